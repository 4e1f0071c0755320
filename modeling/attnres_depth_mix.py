"""The two implementations behind AttnRes's depth mix ``sum_i softmax_i(<u, v_i> / RMS(v_i)) v_i`` (``depth_mix``
in ``modeling_attnres.py`` picks one): a hand-written backward for training, which makes fewer passes over the
sources than autograd would, and a stacked few-call mix for decoding a few tokens without autograd.

Ships to the Hugging Face Hub as remote code with every checkpoint (imports only torch and sibling files).
"""

from __future__ import annotations

import torch

from .numerics import as_dtype, upcast


class DepthMix(torch.autograd.Function):
    """``sum_i softmax_i(r_i · inv_i) v_i`` with ``r_i = v_i · u``, and its hand-written backward.

    The same math autograd would differentiate through the per-source loop, with fewer passes over the [B, T, d]
    sources in the backward (which is what a training step pays for depth mixing: it is memory-bound): per source
    one dot product with the incoming gradient, one matrix-vector product for ``u``'s gradient and one fused write
    of the source's gradient ``a_i g + (∂L/∂r_i) u``, instead of autograd's six passes (and its per-op dispatch).
    Saves the sources (not a stack of them) and three fp32 [S, B, T] per-token scalars (weights, raw dot products,
    inverse RMS).
    """

    @staticmethod
    def forward(ctx, u: torch.Tensor, num_sources: int, *tensors: torch.Tensor) -> torch.Tensor:
        inv, sources = torch.stack(tensors[:num_sources]), tensors[num_sources:]  # inv: [S,B,T] fp32
        raw = upcast(torch.stack([v @ u for v in sources]))  # [S,B,T]: dot products in the sources' dtype
        weights = torch.softmax(raw * inv, dim=0)  # at least fp32
        out = sources[0] * weights[0].unsqueeze(-1)  # at least fp32 (weights are)
        for source, weight in zip(sources[1:], weights[1:]):
            out = out.addcmul_(source, weight.unsqueeze(-1))
        ctx.num_sources = num_sources
        ctx.save_for_backward(u, weights, raw, inv, *sources)
        return out.to(sources[0].dtype)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        u, weights, raw, inv, *sources = ctx.saved_tensors
        grad = upcast(grad_out)  # [B,T,d]
        wide = [upcast(v) for v in sources]  # the sources themselves unless they are narrower than fp32
        grad_weights = torch.stack([torch.linalg.vecdot(v, grad) for v in wide])  # ∂L/∂a_i: [S,B,T]
        grad_logits = weights * (grad_weights - (weights * grad_weights).sum(dim=0, keepdim=True))  # softmax backward
        grad_raw = grad_logits * inv  # ∂L/∂r_i
        grad_inv = grad_logits * raw  # ∂L/∂inv_i
        u_wide = upcast(u)
        grad_sources = [torch.addcmul(weight.unsqueeze(-1) * grad, g_raw.unsqueeze(-1), u_wide).to(v.dtype)
                        for v, weight, g_raw in zip(sources, weights, grad_raw)]  # a_i g + (∂L/∂r_i) u
        grad_u = None
        if ctx.needs_input_grad[0]:
            d = u.shape[-1]
            grad_u = sum(torch.mv(v.reshape(-1, d).t(), g_raw.reshape(-1)) for v, g_raw in zip(wide, grad_raw))
            grad_u = grad_u.to(u.dtype)
        return (grad_u, None, *grad_inv.unbind(0), *grad_sources)


#: Above this many tokens (batch x sequence), an inference-mode mix loops over the sources instead of stacking them.
#: 128 covers the prefill of a short prompt batch (8 x 16) too; the transient stack is then at most
#: 128 x d x (2L + 1) values (17 MB in fp32 at d = 1024, L = 16).
STACKED_MIX_MAX_TOKENS = 128


def stacked_depth_mix(
    query: torch.Tensor,
    key_gain: torch.Tensor,
    sources: list[torch.Tensor],
    inv_rms_values: list[torch.Tensor],
    u: torch.Tensor | None = None,
) -> torch.Tensor:
    """``depth_mix`` for a few tokens without autograd (decoding, dispatch-bound: ``fast_path.py``): the sources are
    stacked once, so the whole mix is one product for the scores, one softmax and one weighted sum (ten aten calls
    whatever the number of sources) instead of two calls per source; for many tokens or under autograd the
    per-source loop is used, which never materialises (or saves for backward) the [S, B, T, d] stack."""
    values = torch.stack(sources)  # [S,B,T,d]
    if u is None:
        u = as_dtype(upcast(query) * upcast(key_gain), values.dtype)
    weights = torch.softmax(upcast(values @ u) * torch.stack(inv_rms_values), dim=0)  # [S,B,T], fp32
    mixed = (upcast(values) * weights.unsqueeze(-1)).sum(dim=0)  # Σ_i a_i v_i, fp32 [B,T,d]
    return as_dtype(mixed, sources[0].dtype)
