"""The two implementations behind AttnRes's depth mix (``modeling/attnres_depth_mix.py``): the hand-written backward
of :class:`DepthMix` (against finite differences and against what it promises to save) and the stacked few-token mix
for decoding (against the per-source loop and the paper's formula written out in fp64). The mix's own equations
(Attention Residuals, arXiv 2603.15031) are tested in ``residuals/test_attnres.py``.

    python -m pytest tests/modeling/test_attnres_depth_mix.py -q
"""

from __future__ import annotations

import pytest
import torch
from depthbench.modeling import modeling_attnres as ar
from depthbench.modeling.attnres_depth_mix import STACKED_MIX_MAX_TOKENS, DepthMix, stacked_depth_mix
from depthbench.modeling.numerics import inv_rms

from tests.modeling.saved_tensors import saved_storages, storage_ids

D = 32


def test_depth_mix_backward_passes_gradcheck_in_float64():
    """The hand-written backward of the mix (sources, their inverse RMS, query and key gain) against finite
    differences."""
    generator = torch.Generator().manual_seed(6)
    sources = [torch.randn(2, 3, 5, generator=generator, dtype=torch.float64, requires_grad=True) for _ in range(4)]
    query = torch.randn(5, generator=generator, dtype=torch.float64, requires_grad=True)
    key_gain = torch.randn(5, generator=generator, dtype=torch.float64, requires_grad=True)

    def mix(q, g, *srcs):
        return ar.depth_mix(q, g, list(srcs), [inv_rms(s, 1e-6) for s in srcs])

    assert torch.autograd.gradcheck(mix, (query, key_gain, *sources))


def test_bf16_mix_gradients_reach_every_input_in_their_dtype():
    generator = torch.Generator().manual_seed(7)
    sources = [torch.randn(2, 3, D, generator=generator).bfloat16().requires_grad_() for _ in range(3)]
    query = torch.randn(D, generator=generator).bfloat16().requires_grad_()
    key_gain = torch.ones(D).bfloat16().requires_grad_()
    out = ar.depth_mix(query, key_gain, sources, [inv_rms(s, 1e-6) for s in sources])
    out.float().pow(2).sum().backward()
    for tensor in (*sources, query, key_gain):
        assert tensor.grad is not None and tensor.grad.dtype == torch.bfloat16 and tensor.grad.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inference_mix_of_few_tokens_equals_the_autograd_mix(dtype):
    """Decoding (no autograd, few tokens) stacks the sources for a few-call mix; it must equal the per-source loop
    that training uses, and above the token threshold inference takes the loop again."""
    generator = torch.Generator().manual_seed(5)
    query, key_gain = torch.randn(D, generator=generator).to(dtype), torch.randn(D, generator=generator).to(dtype)
    for batch, length in ((1, 1), (8, 1), (2, STACKED_MIX_MAX_TOKENS)):
        sources = [torch.randn(batch, length, D, generator=generator).to(dtype) for _ in range(6)]
        inv = [inv_rms(s, 1e-6) for s in sources]
        with torch.enable_grad():
            looped = ar.depth_mix(query, key_gain, sources, inv)
        with torch.no_grad():
            fast = ar.depth_mix(query, key_gain, sources, inv)
        stacked = stacked_depth_mix(query, key_gain, sources, inv)
        assert fast.dtype == looped.dtype == dtype
        tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(fast, looped, **tol)
        torch.testing.assert_close(stacked, looped, **tol)


def _formula_mix(query, key_gain, sources, eps):
    """The paper's mix in fp64, keys materialised: ``k_i = g v_i / RMS(v_i)``, ``o = sum_i softmax_i(<w, k_i>) v_i``."""
    stacked = torch.stack(sources).double()
    keys = key_gain.double() * stacked * torch.rsqrt(stacked.pow(2).mean(-1, keepdim=True) + eps)
    return (torch.softmax(keys @ query.double(), dim=0).unsqueeze(-1) * stacked).sum(0)


def test_stacked_mix_equals_the_formula_with_or_without_a_folded_query():
    """``u = query * key_gain`` computed inside, or passed already folded (the fast path's cache; query and key gain
    are then not read at all)."""
    generator = torch.Generator().manual_seed(8)
    sources = [torch.randn(3, 2, D, generator=generator) * 4.0 ** k for k in range(5)]
    query, key_gain = torch.randn(D, generator=generator), 1 + 0.3 * torch.randn(D, generator=generator)
    inv = [inv_rms(s, 1e-6) for s in sources]
    expected = _formula_mix(query, key_gain, sources, 1e-6)
    torch.testing.assert_close(stacked_depth_mix(query, key_gain, sources, inv).double(), expected,
                               rtol=1e-5, atol=1e-5)
    folded = stacked_depth_mix(None, None, sources, inv, u=query * key_gain)
    torch.testing.assert_close(folded.double(), expected, rtol=1e-5, atol=1e-5)


def test_depth_mix_saves_the_sources_themselves_and_per_token_scalars():
    """What the docstring promises the backward keeps: each source (no [S, B, T, d] stack of them, no fp32 copy
    of bf16 sources), ``u`` and three fp32 [S, B, T] scalars (weights, raw dot products, inverse RMS)."""
    generator = torch.Generator().manual_seed(9)
    num, batch, length = 5, 2, 3
    sources = [torch.randn(batch, length, D, generator=generator).bfloat16().requires_grad_() for _ in range(num)]
    u = torch.randn(D, generator=generator).bfloat16().requires_grad_()
    inv = [inv_rms(s.detach(), 1e-6).requires_grad_() for s in sources]
    out, saved = saved_storages(lambda: DepthMix.apply(u, num, *inv, *sources))
    assert out.dtype == torch.bfloat16 and out.shape == (batch, length, D)
    assert storage_ids(*sources, u) <= storage_ids(*saved)
    others = [t for t in saved if t.untyped_storage().data_ptr() not in storage_ids(*sources, u)]
    assert sorted((t.dtype, tuple(t.shape)) for t in others) == [(torch.float32, (num, batch, length))] * 3
