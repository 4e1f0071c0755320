"""Training under bf16 autocast over fp32 weights (the trainer's GPU recipe and its FSDP2 policy) works for every
architecture: a forward and backward pass runs, and the gradients are the fp32 ones to bf16 precision.

The custom autograd functions of the modeling files (MoDA's depth slots, AttnRes's depth mix, HC's stream
recomputation, mHC's Sinkhorn) see autocast's mixed dtypes in their backward (an fp32 RoPE'd query against bf16
slots, bf16 gradients of fp32 inputs); this is where a dtype mismatch shows. What this test does not see: with
every fp32 guard of the modeling files switched off (``full_precision`` a no-op, ``upcast`` to bf16), mHC, MoDA,
DenseFormer and the norm family stay inside both bounds below (AttnRes raises, HC's worst tensor reaches 10 %), so the
guards are tested where they are, per architecture: ``test_autocast_does_not_lower_gate_precision`` in
``residuals/test_hc.py`` and ``..._mapping_precision`` in ``test_mhc.py`` fail when ``full_precision`` is a no-op
(checked), and the bf16 mix tests of ``test_attnres.py`` and ``test_denseformer.py`` assert the dtypes of their math.

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
    # bf16 keeps 8 significant bits, a few roundings per op. Over the whole model that is about 1 % of the gradient
    # (0.3-1.2 % measured per architecture); a single tensor whose gradient is a sum over every token and channel
    # with cancellation (HC's static gates: 2-6 % over input seeds, and it varies with the CPU's bf16 kernels) sits
    # higher. A wrong or bf16-accumulated backward is off by far more than either bound.
    error_sq = total_sq = 0.0
    for name, grad in fp32.items():
        assert bf16[name].dtype == torch.float32, name  # gradients of the fp32 master weights
        error, scale = (bf16[name] - grad).norm().item(), grad.norm().item()
        error_sq, total_sq = error_sq + error**2, total_sq + scale**2
        if scale > 0:
            assert error <= 0.10 * scale, (name, error / scale)
    assert error_sq**0.5 <= 0.02 * total_sq**0.5, (error_sq / total_sq) ** 0.5
