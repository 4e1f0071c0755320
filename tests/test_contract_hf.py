"""The transformers-ecosystem part of the model contract, parametrized over the registry.

What works on ``LlamaForCausalLM`` must work on every registered architecture, or be refused at once with an
error that names the feature and the architecture. These tests cover what practitioners' tools rely on beyond the
basic contract of ``test_contract.py``: big-model offloading (accelerate ``device_map="auto"``), both gradient
checkpointing modes, the causal-LM loss keywords, attention outputs, the cache keyword, static caches and
``torch.compile``, RoPE scaling, custom 4-D masks, padding-free packed batches and the task heads.

Run it (all architectures, or one) with::

    python -m pytest tests/test_contract_hf.py -q
    python -m pytest tests/test_contract_hf.py -q -k "moda"
"""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers import ARCH_IDS, max_abs_diff, random_ids, tiny_model
from torch import nn

from depthbench.registry import ARCHITECTURES

ARCH = pytest.mark.parametrize("arch_id", ARCH_IDS)
ATOL = 1e-5


@torch.no_grad()
def _logits(model, input_ids, **kwargs) -> torch.Tensor:
    return model(input_ids=input_ids, use_cache=False, **kwargs).logits


def _greedy(model, input_ids, max_new_tokens: int, **kwargs) -> torch.Tensor:
    return model.generate(
        input_ids=input_ids, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=False,
        pad_token_id=0, eos_token_id=None, **kwargs,
    )


# ============================================================================================ offloading
@ARCH
def test_no_module_is_a_forward_argument(arch_id):
    """accelerate's hooks move every forward argument with ``.to()``; a module argument breaks offloading."""
    model = tiny_model(arch_id)
    seen: list[str] = []

    def check(module, args, kwargs):
        for value in (*args, *kwargs.values()):
            if isinstance(value, nn.Module):
                seen.append(f"{type(module).__name__} got a {type(value).__name__}")

    handles = [m.register_forward_pre_hook(check, with_kwargs=True) for m in model.modules()]
    _logits(model, random_ids(1, 4, seed=1), output_hidden_states=True)
    for handle in handles:
        handle.remove()
    assert not seen, seen


@ARCH
def test_offloaded_model_matches_in_memory(arch_id, checkpoints, tmp_path):
    """``device_map="auto"`` with a memory limit that offloads half the model to disk: same logits, same hidden
    states and the same greedy continuation as the model in memory."""
    ckpt = checkpoints.get(arch_id)
    cls = ARCHITECTURES[arch_id].causal_lm_class
    reference = cls.from_pretrained(ckpt.path).eval()
    budget = sum(p.numel() * p.element_size() for p in reference.parameters()) // 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Some parameters are on the meta device because they were offloaded"
        offloaded = cls.from_pretrained(
            ckpt.path, device_map="auto", max_memory={"cpu": budget}, offload_folder=str(tmp_path / "offload")
        ).eval()
    placements = set(offloaded.hf_device_map.values())
    assert {"cpu", "disk"} <= placements, offloaded.hf_device_map
    with torch.no_grad():
        out = offloaded(input_ids=ckpt.input_ids, use_cache=False, output_hidden_states=True)
        ref = reference(input_ids=ckpt.input_ids, use_cache=False, output_hidden_states=True)
    assert max_abs_diff(out.logits, ref.logits) < ATOL
    for a, b in zip(out.hidden_states, ref.hidden_states, strict=True):
        assert max_abs_diff(a, b) < ATOL
    prompt = ckpt.input_ids[:1, :4]
    assert torch.equal(_greedy(offloaded, prompt, 3), _greedy(reference, prompt, 3))
