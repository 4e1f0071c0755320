"""Sinkhorn-Knopp projection onto the doubly stochastic matrices (mHC's ``H_res``), in log domain and fp32: a
differentiable version that recomputes its iterations in the backward pass instead of keeping them, and a
no-autograd version that stops once the matrices have converged to rounding.

Ships to the Hugging Face Hub as remote code with every checkpoint (imports only torch and sibling files).
"""

from __future__ import annotations

import math

import torch

from .numerics import full_precision, upcast


def sinkhorn(logits: torch.Tensor, num_iters: int, temperature: float = 1.0) -> torch.Tensor:
    """Sinkhorn-Knopp projection of ``exp(logits / τ)`` onto the doubly stochastic matrices, in log domain, fp32.

    Each iteration normalises the columns (``dim=-2``) and then the rows (``dim=-1``), so on return every row sums
    to 1 to fp32 precision and the columns sum to 1 approximately (the error shrinks with ``num_iters``). Works on
    any batch of square matrices [..., n, n] at once (no loop over tokens); for n = 1 the result is exactly 1.

    Args:
        logits: [..., n, n], any float dtype (upcast to fp32 inside).
        num_iters: Number of (column, row) normalisation rounds, >= 1.
        temperature: τ > 0.

    Returns:
        The fp32 matrices, entries >= 0, [..., n, n].
    """
    with full_precision(logits):
        return sinkhorn_scaled(upcast(logits) / temperature, num_iters).reshape(logits.shape)


def sinkhorn_scaled(z: torch.Tensor, num_iters: int) -> torch.Tensor:
    """:func:`sinkhorn` on upcast, temperature-scaled logits [..., n, n]; returns [N, n, n] (N = leading dims).

    With autograd recording, :class:`SinkhornFunction` saves only its input and recomputes the iterations in the
    backward pass (the unrolled iterations would otherwise keep 2 * num_iters tensors per sublayer alive for the
    backward, a large share of mHC's activation memory: see docs/benchmarks.md); without it (inference, decoding)
    the forward runs alone.
    """
    n = z.shape[-1]
    # Token-minor layout [n, n, N]: the size-n reductions become vectorised elementwise ops over N tokens
    # (reducing a trailing dim of size n is slower on CPU, forward and backward; see docs/benchmarks.md).
    z = z.reshape(-1, n, n).permute(1, 2, 0).contiguous()
    if torch.is_grad_enabled() and z.requires_grad:
        p = SinkhornFunction.apply(z, num_iters)
    else:  # the same iterations, keeping none of them
        for _ in range(num_iters):
            z = torch.log_softmax(torch.log_softmax(z, dim=0), dim=1)
        p = z.exp()
    return p.permute(2, 0, 1)


#: Early exit of the no-autograd Sinkhorn (:func:`sinkhorn_inference`): the largest |column sum - 1| at which the
#: iterations count as converged, in ulps of 1 in the working dtype (fp32: 2^-21, the rounding of a sum of a few
#: probabilities).
SINKHORN_TOLERANCE_ULPS = 4


def _column_error(z: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The probabilities ``exp(z)`` of row-normalised log-probabilities ``z`` and their largest |column sum - 1|
    (host syncs)."""
    p = z.exp()
    low, high = torch.aminmax(p.sum(dim=-2))  # one reduction for both ends (fewer kernels than |sum - 1|.max())
    return p, max(1.0 - float(low), float(high) - 1.0)


def sinkhorn_inference(z: torch.Tensor, num_iters: int) -> torch.Tensor:
    """:func:`sinkhorn_scaled` without autograd on logits [..., n, n] (fp32 or wider; column then row normalisation, log
    domain), stopping early once the matrices are doubly stochastic to rounding: when every column of the
    probabilities sums to 1 within :data:`SINKHORN_TOLERANCE_ULPS` ulps after a round (rows are exact after each
    round), further rounds only repeat normalisations that change nothing beyond rounding, so the result equals the
    full ``num_iters`` rounds within ~1e-6 in fp32 (``tests/modeling/test_mhc_sinkhorn.py``). The
    check (a
    few kernels and host syncs) runs after rounds 1 and 2, and then once more only where the error's geometric
    decay between them predicts convergence before ``num_iters``; the exit always rests on a measured error. At the
    mHC init every matrix converges in one round (7 kernels instead of 41); near-permutation maps (large logit
    gaps) do not converge in 20 rounds and pay the two checks. The check reads probabilities, not
    log-probabilities, whose rounding (an ulp of |log p|) would hide the convergence of small entries. Returns the
    probabilities [..., n, n]. On an accelerator the check would cost a host synchronisation per sublayer (stalling
    the kernel queue that decoding relies on), so there every round runs, as in :func:`sinkhorn_scaled`."""
    check, errors, tolerance = 1, [], SINKHORN_TOLERANCE_ULPS * torch.finfo(z.dtype).eps
    if z.device.type != "cpu":
        check = num_iters + 1  # never
    for done in range(1, num_iters + 1):
        z = torch.log_softmax(torch.log_softmax(z, dim=-2), dim=-1)
        if done == check:
            p, error = _column_error(z)
            if error <= tolerance:
                return p
            errors.append(error)
            check = done + 1
            if len(errors) == 2:  # predict the round where error * rate^k reaches the tolerance
                rate = errors[1] / errors[0]
                check = num_iters + 1
                if rate < 1.0:
                    check = done + max(1, math.ceil(math.log(tolerance / error) / math.log(rate)))
    return z.exp_()


def _sinkhorn_steps(z: torch.Tensor, num_iters: int) -> list[torch.Tensor]:
    """The log-domain iterates of Sinkhorn-Knopp on logits ``z`` [n, n, N]: ``2 * num_iters`` tensors, each the
    log-softmax of the previous one over the columns (``dim=0``, even entries) or the rows (``dim=1``, odd ones).

    Normalising ``exp(z)`` so that a column (row) sums to 1 is ``z - logsumexp(z)`` over it, i.e. a log-softmax:
    one fused kernel per normalisation, which takes logits of any range (no exp can overflow or lose a row) and
    costs 2 kernels per round (each touches only n²N values, N = batch size when decoding: dispatch-bound, see
    ``fast_path.py``).
    """
    steps = []
    for _ in range(num_iters):
        z = torch.log_softmax(z, dim=0)  # columns sum to 1
        steps.append(z)
        z = torch.log_softmax(z, dim=1)  # rows sum to 1
        steps.append(z)
    return steps


class SinkhornFunction(torch.autograd.Function):
    """Sinkhorn-Knopp on logits [n, n, N] (log domain, :func:`_sinkhorn_steps`, then ``exp``) that saves only its
    input for the backward pass and recomputes the iterates there (activation recomputation: the gradient is the
    one autograd would give for the unrolled iterations, computed with the same log-softmax backward kernels)."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, num_iters: int) -> torch.Tensor:
        ctx.num_iters = num_iters
        ctx.save_for_backward(z)
        return _sinkhorn_steps(z, num_iters)[-1].exp()

    @staticmethod
    def backward(ctx, grad_p: torch.Tensor):
        (z,) = ctx.saved_tensors
        steps = _sinkhorn_steps(z, ctx.num_iters)
        grad = grad_p * steps[-1].exp()  # through exp
        for i in range(len(steps) - 1, -1, -1):  # through each log-softmax, last first
            grad = torch.ops.aten._log_softmax_backward_data(grad, steps[i], i % 2, grad.dtype)
        return grad, None
