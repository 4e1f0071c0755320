"""``depthbench.bench.models``: the compared models. The control is transformers' own ``LlamaForCausalLM`` holding
``pre_ln``'s state dict, so it must compute what ``pre_ln`` computes (the oracle: transformers running it); each
model is built from the benchmark's seed and shape.

    python -m pytest tests/bench/test_models.py -q
"""

from __future__ import annotations

import torch

from depthbench.bench.models import build_models, shape_fields
from depthbench.bench.settings import BenchSettings

SETTINGS = BenchSettings(shape="d64-L2", batch_size=2, seq_len=12, vocab_size=64, memory=False, decode_tokens=20,
                         prompt_len=8, attn_implementation="eager")


def _logits(model, ids):
    with torch.no_grad():
        return model.eval()(input_ids=ids).logits


def test_the_llama_control_computes_pre_ln():
    from transformers import LlamaForCausalLM

    models = build_models(["pre_ln", "llama"], SETTINGS)
    llama = models["llama"]
    assert type(llama) is LlamaForCausalLM and llama.config.num_hidden_layers == 2
    assert llama.config._attn_implementation == "eager" and llama.config.hidden_size == 64
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(_logits(llama, ids), _logits(models["pre_ln"], ids), rtol=1e-5, atol=1e-5)


def test_the_control_without_pre_ln_gets_the_seeds_pre_ln_weights():
    """Built alone (as bench/gpu_check.py builds it), the control holds the seed's pre_ln weights."""
    alone = build_models(["llama"], SETTINGS)["llama"].state_dict()
    reference = build_models(["pre_ln"], SETTINGS)["pre_ln"].state_dict()
    assert sorted(alone) == sorted(reference) and all(torch.equal(alone[k], reference[k]) for k in reference)


def test_the_control_keeps_its_own_init_when_weights_are_not_shared():
    own = build_models(["llama"], SETTINGS, share_weights=False)["llama"].state_dict()
    reference = build_models(["pre_ln"], SETTINGS)["pre_ln"].state_dict()
    assert sorted(own) == sorted(reference)
    assert not torch.equal(own["model.layers.0.self_attn.q_proj.weight"],
                           reference["model.layers.0.self_attn.q_proj.weight"])


def test_every_model_is_built_from_the_seed():
    first, second = (build_models(["hc"], SETTINGS)["hc"].state_dict() for _ in range(2))
    assert all(torch.equal(first[k], second[k]) for k in first)
    other = build_models(["hc"], BenchSettings(**{**SETTINGS.__dict__, "seed": 1}))["hc"].state_dict()
    assert not torch.equal(first["model.embed_tokens.weight"], other["model.embed_tokens.weight"])


def test_positions_fit_the_training_sequence_and_the_decoded_tokens():
    assert shape_fields(SETTINGS)["max_position_embeddings"] == 8 + 20  # prompt + decoded > seq_len 12
    longer = BenchSettings(**{**SETTINGS.__dict__, "seq_len": 40})
    assert shape_fields(longer)["max_position_embeddings"] == 40
    assert shape_fields(SETTINGS)["hidden_size"] == 64 and shape_fields(SETTINGS)["num_hidden_layers"] == 2
