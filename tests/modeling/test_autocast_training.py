"""Training under bf16 autocast over fp32 weights (the trainer's GPU recipe and its FSDP2 policy) works for every
architecture: a forward and backward pass runs, and the gradients are the fp32 ones to bf16 precision.

The custom autograd functions of the modeling files (MoDA's depth slots, AttnRes's depth mix, HC's stream
recomputation, mHC's Sinkhorn) see autocast's mixed dtypes in their backward (an fp32 RoPE'd query against bf16
slots, bf16 gradients of fp32 inputs); this is where a dtype mismatch shows.

Run: ``python -m pytest tests/modeling/test_autocast_training.py -q``
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import ARCH_IDS, random_ids, tiny_model


def _gradients(model, ids, autocast: bool) -> dict[str, torch.Tensor]:
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


# every architecture with sdpa; MoDA also with its own eager attention (the other path to its depth slots)
@pytest.mark.parametrize("arch_id, attn_implementation", [(a, "sdpa") for a in ARCH_IDS] + [("moda", "eager")])
def test_bf16_autocast_gradients_match_fp32(arch_id, attn_implementation):
    ids = random_ids(2, 24, seed=3)
    fp32 = _gradients(tiny_model(arch_id, attn_implementation=attn_implementation), ids, autocast=False)
    bf16 = _gradients(tiny_model(arch_id, attn_implementation=attn_implementation), ids, autocast=True)
    assert bf16.keys() == fp32.keys()
    for name, grad in fp32.items():
        assert bf16[name].dtype == torch.float32, name  # gradients of the fp32 master weights
        scale = grad.norm().item()
        if scale > 0:  # bf16 keeps 8 significant bits; a few roundings per op: a few percent of the gradient
            assert (bf16[name] - grad).norm().item() <= 0.05 * scale, name
