"""MoDA's depth slots (``modeling/moda_depth_slots.py``): the depth functions equal einsum on the stacked slots
(with gradients), the depth attention saves the slots rather than their per-block stacks, and the decode path
equals the training forward.

Run: ``python -m pytest tests/modeling/test_moda_depth_slots.py -q``
"""

from __future__ import annotations

import pytest
import torch
from depthbench.modeling.moda_depth_slots import depth_logits, depth_readout

from tests.helpers import random_ids, tiny_model
from tests.modeling.saved_tensors import saved_storages, storage_ids


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
    _, saved = saved_storages(depth_logits, q, slots)
    assert storage_ids(*saved) == storage_ids(q, *slots)  # references only: no [.., S, hd] copy


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
