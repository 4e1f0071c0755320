"""mHC's Sinkhorn (``modeling/mhc_sinkhorn.py``) and the memory paths it serves: the gradient of the Sinkhorn
recomputed in backward equals autograd through the unrolled float64 iterations, it saves only its input, the
early-exit inference Sinkhorn equals the full iterations, and the mHC sublayer (``MHCResidual``) keeps no [N, n+1, d]
mixing product and matches a float64 reference.

Run: ``python -m pytest tests/modeling/test_mhc_sinkhorn.py -q``
"""

from __future__ import annotations

import pytest
import torch
from depthbench.modeling.mhc_sinkhorn import sinkhorn, sinkhorn_inference, sinkhorn_scaled
from depthbench.modeling.modeling_mhc import MHCResidual
from torch.utils._python_dispatch import TorchDispatchMode

from tests.helpers import random_ids, tiny_model
from tests.modeling.saved_tensors import saved_storages


# ------------------------------------------------------------------------------------------------ mHC
def _unrolled_sinkhorn(z: torch.Tensor, num_iters: int) -> torch.Tensor:
    """Plain Sinkhorn-Knopp on ``exp(z)`` [..., n, n]: columns then rows, num_iters times (autograd through all)."""
    p = torch.softmax(z, dim=-2)
    p = p / p.sum(-1, keepdim=True)
    for _ in range(num_iters - 1):
        p = p / p.sum(-2, keepdim=True)
        p = p / p.sum(-1, keepdim=True)
    return p


@pytest.mark.parametrize("std", [1.0, 6.0])
def test_sinkhorn_recompute_gradient_equals_unrolled_float64(std):
    z = std * torch.randn(37, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    cotangent = torch.randn(37, 4, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    leaf = z.clone().requires_grad_()
    want = _unrolled_sinkhorn(leaf, 20)
    (want_grad,) = torch.autograd.grad(want, leaf, cotangent)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-6)):
        leaf = z.to(dtype).requires_grad_()
        got = sinkhorn(leaf, 20)
        (grad,) = torch.autograd.grad(got, leaf, cotangent.to(dtype))
        torch.testing.assert_close(got.double(), want, rtol=0, atol=tol)
        torch.testing.assert_close(grad.double(), want_grad, rtol=0, atol=tol)


def test_sinkhorn_saves_only_its_input_and_decodes_identically():
    z = torch.randn(2, 5, 4, 4).requires_grad_()
    p, saved = saved_storages(sinkhorn_scaled, z, 20)
    # one [n, n, N] tensor (the token-minor input), not 2 per iteration
    assert len(saved) == 1 and saved[0].shape == (4, 4, 10)
    with torch.no_grad():
        assert torch.equal(sinkhorn_scaled(z, 20), p)  # the decode path runs the very same kernels


def _reference_mhc(stream, r: MHCResidual, norm, branch):
    """mHC sublayer written out in float64 from the paper's equations (see MHCResidual's docstring)."""
    n = r.num_streams
    x = stream.flatten(-2)
    x_hat = x / x.pow(2).mean(-1, keepdim=True).add(r.eps).sqrt()
    m = x_hat @ r.phi.T
    alpha = torch.cat([r.alpha_pre.expand(n), r.alpha_post.expand(n), r.alpha_res.expand(n * n)])
    z = alpha * m + r.bias
    h_pre, h_post = torch.sigmoid(z[..., :n]), 2 * torch.sigmoid(z[..., n:2 * n])
    h_res = _unrolled_sinkhorn(z[..., 2 * n:].unflatten(-1, (n, n)), r.num_iters)
    u = torch.einsum("bts,btsd->btd", h_pre, stream)
    return torch.einsum("btrs,btsd->btrd", h_res, stream) + h_post.unsqueeze(-1) * branch(norm(u)).unsqueeze(-2)


def test_mhc_sublayer_gradients_equal_float64_reference():
    model = tiny_model("mhc")
    r = model.model.layers[1].attn_residual
    with torch.no_grad():
        r.phi.normal_(std=0.05)
        r.bias.normal_()
        for gain in (r.alpha_pre, r.alpha_post, r.alpha_res):
            gain.fill_(0.7)
    layer = model.model.layers[1]
    stream = torch.randn(2, 6, 4, 64, generator=torch.Generator().manual_seed(2))
    cotangent = torch.randn(2, 6, 4, 64, generator=torch.Generator().manual_seed(3))
    params = [r.phi, r.bias, r.alpha_pre, r.alpha_post, r.alpha_res, layer.mlp.up_proj.weight]

    leaf = stream.clone().requires_grad_()
    out = r(leaf, layer.post_attention_layernorm, layer.mlp)
    grads = torch.autograd.grad(out, [leaf, *params], cotangent)

    model.double()
    leaf64 = stream.double().requires_grad_()
    want = _reference_mhc(leaf64, r, layer.post_attention_layernorm, layer.mlp)
    want_grads = torch.autograd.grad(want, [leaf64, *params], cotangent.double())
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    for got, ref in zip(grads, want_grads):
        torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-5)


def test_mhc_branch_input_does_not_keep_the_mixing_product():
    """The norm saves a [N, d] copy of the branch input, not a view into the [N, n+1, d] product."""
    model = tiny_model("mhc")
    layer = model.model.layers[0]
    stream = torch.randn(2, 6, 4, 64, requires_grad=True)
    seen = []

    def norm(u):
        seen.append(u.untyped_storage().nbytes())
        return layer.input_layernorm(u)

    r = layer.attn_residual
    out = r(stream, norm, layer.mlp)
    assert seen == [2 * 6 * 64 * 4]  # own storage: B*T*d fp32 values
    with torch.no_grad():  # decoding takes the fused fast path (folded weights): the same values up to rounding
        torch.testing.assert_close(r(stream, norm, layer.mlp), out, rtol=1e-6, atol=1e-6)


def test_mhc_no_grad_forward_equals_training_forward():
    model = tiny_model("mhc")
    for r in (layer.attn_residual for layer in model.model.layers):
        with torch.no_grad():
            r.phi.normal_(std=0.05)
            r.bias.normal_()
    ids = random_ids(2, 9)
    train = model(input_ids=ids, use_cache=False).logits
    with torch.no_grad():  # the fused no-autograd path folds the gains into the projection: equal up to rounding
        torch.testing.assert_close(model(input_ids=ids, use_cache=False).logits, train, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------------------ Sinkhorn early exit
class _CountLogSoftmax(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += func.overloadpacket.__name__ == "_log_softmax"
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("std", [0.01, 0.3, 1.0, 3.0, 30.0])
@pytest.mark.parametrize("gap", [0.0, 8.0])
def test_early_exit_sinkhorn_equals_full_iterations(std, gap):
    n = 4
    z = std * torch.randn(256, n, n, generator=torch.Generator().manual_seed(7))
    z = z + torch.full((n, n), -gap).fill_diagonal_(0.0)
    full = sinkhorn_scaled(z, 20).view(z.shape)  # the differentiable path's (and the training) iterations
    with torch.no_grad():
        for batch in (z, z[:1], z[5:13]):  # the whole batch and decode-sized ones
            fast = sinkhorn_inference(batch.clone(), 20)
            expected = full if batch is z else sinkhorn_scaled(batch, 20).view(batch.shape)
            torch.testing.assert_close(fast, expected, rtol=0, atol=1e-6)
            torch.testing.assert_close(fast.sum(-1), torch.ones(len(batch), n), rtol=0, atol=1e-6)  # rows exact


def test_early_exit_sinkhorn_stops_once_converged():
    """A matrix that one round makes doubly stochastic (symmetric exp(z) with equal row sums, as at the mHC init)
    costs one round; a near-permutation one (gap 8, asymmetric) runs all rounds."""
    n = 4
    symmetric = torch.full((n, n), -8.0).fill_diagonal_(0.0).expand(2, n, n)
    slow = symmetric + 0.1 * torch.randn(2, n, n, generator=torch.Generator().manual_seed(0))
    for z, calls in ((symmetric, 2), (slow, 2 * 20)):
        counter = _CountLogSoftmax()
        with torch.no_grad(), counter:
            out = sinkhorn_inference(z, 20)
        assert counter.calls == calls
        torch.testing.assert_close(out, sinkhorn_scaled(z, 20).view(z.shape), rtol=0, atol=1e-6)
