"""Memory-saving training paths and fast decoding paths of mHC, MoDA and KEEL compute the plain math.

Each architecture keeps less for the backward pass than autograd would on its own (peak training memory):
mHC recomputes its Sinkhorn iterations in backward (``modeling/mhc_sinkhorn.py``) and does not keep the [N, n+1, d]
mixing product alive through the branch input (``modeling/modeling_hc.py``); MoDA's depth attention saves the depth
slots rather than their per-block stacks (``modeling/moda_depth_slots.py``); KEEL's output norm saves its input and
per-token scale rather than also the normalised copy (``OutputRMSNorm`` in ``modeling/norms.py``). Decoding skips
autograd-only work (mHC) or runs the explicit-score attention math for a single query (MoDA). These tests check the
gradients against plain float64 references written out here, that the saved tensors really are the smaller set,
and that the decode paths equal the training forward.
"""

from __future__ import annotations

import pytest
import torch
from depthbench.modeling.mhc_sinkhorn import sinkhorn, sinkhorn_scaled
from depthbench.modeling.moda_depth_slots import depth_logits, depth_readout
from depthbench.modeling.modeling_mhc import MHCResidual
from depthbench.modeling.norms import OutputRMSNorm, RMSNorm

from tests.helpers import random_ids, tiny_model


def _saved_storages(fn, *args) -> list[torch.Tensor]:
    """The tensors autograd saves while running ``fn(*args)`` (one per distinct storage)."""
    saved, seen = [], set()

    def pack(tensor):
        key = tensor.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = fn(*args)
    return out, saved


def _storage_ids(*tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors}


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
    p, saved = _saved_storages(sinkhorn_scaled, z, 20)
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


# ------------------------------------------------------------------------------------------------ MoDA
def test_moda_depth_functions_equal_einsum_on_the_stack_with_gradients():
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 2, 3, 5, 8, generator=g, dtype=torch.float64)  # [B, H_kv, G, T, hd]
    slots = [torch.randn(2, 2, 5, 8, generator=g, dtype=torch.float64) for _ in range(4)]
    weights = torch.rand(2, 2, 3, 5, 4, generator=g, dtype=torch.float64)
    leaves = [x.clone().requires_grad_() for x in (q, weights, *slots)]
    got = depth_logits(leaves[0], leaves[2:]), depth_readout(leaves[1], leaves[2:])
    ref_leaves = [x.clone().requires_grad_() for x in (q, weights, *slots)]
    stack = torch.stack(ref_leaves[2:], dim=3)
    want = (torch.einsum("bkgtd,bktsd->bkgts", ref_leaves[0], stack),
            torch.einsum("bkgts,bktsd->bkgtd", ref_leaves[1], stack))
    cotangents = [torch.randn_like(w) for w in want]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    grads = torch.autograd.grad(got, leaves, cotangents)
    want_grads = torch.autograd.grad(want, ref_leaves, cotangents)
    for a, b in zip(grads, want_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(lambda qq, *ss: depth_logits(qq, ss), (leaves[0], *leaves[2:4]))
    with torch.no_grad():  # the decode path (plain batched products) computes the same values
        torch.testing.assert_close(depth_logits(q, slots), want[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(depth_readout(weights, slots), want[1], rtol=0, atol=1e-12)


def test_moda_depth_attention_saves_the_slots_not_their_stack():
    q = torch.randn(2, 2, 3, 5, 8, requires_grad=True)
    slots = [torch.randn(2, 2, 5, 8, requires_grad=True) for _ in range(6)]
    _, saved = _saved_storages(depth_logits, q, slots)
    assert _storage_ids(*saved) == _storage_ids(q, *slots)  # references only: no [.., S, hd] copy


@pytest.mark.parametrize("batch", [1, 3])
def test_moda_decode_path_equals_training_forward(batch):
    """Cached one-token steps (explicit-score math, no grad) give the logits of the full SDPA training forward."""
    model = tiny_model("moda", attn_implementation="sdpa")
    ids = random_ids(batch, 10, seed=5)
    full = model(input_ids=ids, use_cache=False).logits  # grad enabled: the training path
    with torch.no_grad():
        out = model(input_ids=ids[:, :6], use_cache=True)
        cache = getattr(out, "cache", None) or out.past_key_values
        steps = [out.logits]
        for t in range(6, 10):
            out = model(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True)
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full.detach(), rtol=0, atol=2e-5)


# ---------------------------------------------------------------------------------------------- KEEL, Peri-LN
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_output_norm_equals_rmsnorm_with_gradients_and_saves_less(dtype):
    plain, fused = RMSNorm(32).to(dtype), OutputRMSNorm(32).to(dtype)
    with torch.no_grad():
        plain.weight.normal_()
        fused.weight.copy_(plain.weight)
    x = (3 * torch.randn(2, 7, 32, dtype=dtype)).requires_grad_()
    cotangent = torch.randn(2, 7, 32, dtype=dtype)
    want, saved_plain = _saved_storages(plain, x)
    got, saved_fused = _saved_storages(fused, x)
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(got, want, rtol=0, atol=tol)
    for a, b in zip(torch.autograd.grad(got, (x, fused.weight), cotangent),
                    torch.autograd.grad(want, (x, plain.weight), cotangent)):
        torch.testing.assert_close(a, b, rtol=0, atol=10 * tol)
    full_size = lambda tensors: [t for t in tensors if t.numel() == x.numel()]  # noqa: E731
    assert len(full_size(saved_fused)) == 1 < len(full_size(saved_plain))  # the input only
    with torch.no_grad():
        torch.testing.assert_close(fused(x), want, rtol=0, atol=tol)


def test_output_norm_gradcheck():
    norm = OutputRMSNorm(8).double()
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, w: norm.forward(a) * 1.0, (x, norm.weight))


def _saved_bytes(model, ids) -> int:
    sizes = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        sizes[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids=ids, labels=ids)
    return sum(sizes.values())


def test_peri_ln_keeps_one_tensor_per_output_norm_beyond_pre_ln():
    """Peri-LN's output norms read the branch outputs, which nothing else keeps: each saves exactly its input, the
    per-token scale and its gain on top of what Pre-LN saves (a plain RMSNorm would also keep the normalised copy)."""
    ids = random_ids(2, 16)
    pre_ln, peri_ln = tiny_model("pre_ln"), tiny_model("peri_ln")
    tokens, d = ids.numel(), pre_ln.config.hidden_size
    extra = _saved_bytes(peri_ln, ids) - _saved_bytes(pre_ln, ids)
    assert extra == pre_ln.config.num_sublayers * (tokens * d + tokens + d) * 4
