"""``depthbench.upcycle.sources``: which source families are read, their config fields as backbone fields, where
each source block goes and how its tensors are renamed. Oracles: transformers' own configs and models (the
fields it derives, e.g. ``layer_types``), and layouts and state dicts written by hand.

    python -m pytest tests/upcycle/test_sources.py -q
"""

from __future__ import annotations

import pytest
import torch

from depthbench.upcycle import UpcycleError, upcycle
from depthbench.upcycle.sources import FAMILIES, backbone_fields, block_map, family_of, map_state
from tests.upcycle import tiny_sources


def test_unsupported_sources_are_refused_naming_what_is_supported():
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32))
    with pytest.raises(UpcycleError, match="unsupported source family GPT2LMHeadModel.*supported: LlamaForCausalLM"):
        upcycle(gpt2, "pre_ln")
    base = LlamaModel(LlamaConfig(**tiny_sources.SHAPE))
    with pytest.raises(UpcycleError, match="not a causal language model"):
        upcycle(base, "pre_ln")


def test_source_settings_the_backbone_lacks_are_refused_by_name():
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(**tiny_sources.SHAPE, mlp_bias=True))
    with pytest.raises(UpcycleError, match="mlp_bias"):
        upcycle(model, "pre_ln")
    model = LlamaForCausalLM(LlamaConfig(**tiny_sources.SHAPE, hidden_act="relu"))
    with pytest.raises(UpcycleError, match="hidden_act='relu'"):
        upcycle(model, "pre_ln")


def test_a_source_tensor_without_a_place_is_refused_by_name():
    source = tiny_sources.llama()
    source.register_buffer("extra_scale", torch.ones(3))  # persistent: part of the state dict
    with pytest.raises(UpcycleError, match="extra_scale"):
        upcycle(source, "pre_ln")


def test_the_family_is_the_model_class_transformers_built():
    from transformers import MistralConfig, MistralForCausalLM

    name, family = family_of(MistralForCausalLM(MistralConfig(**tiny_sources.SHAPE)))
    assert (name, family) == ("MistralForCausalLM", FAMILIES["MistralForCausalLM"]) and family.name == "mistral"


def test_backbone_fields_read_what_transformers_set_in_each_family():
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    qwen2 = backbone_fields(Qwen2Config(**tiny_sources.SHAPE), FAMILIES["Qwen2ForCausalLM"])
    assert (qwen2["attention_bias"], qwen2["attention_output_bias"]) == (True, False)  # Qwen2: q/k/v biases only
    assert qwen2["head_dim"] == 32 // 4 and qwen2["sliding_window"] is None and not qwen2["qk_norm"]
    qwen3 = backbone_fields(Qwen3Config(**tiny_sources.SHAPE, head_dim=12), FAMILIES["Qwen3ForCausalLM"])
    assert qwen3["head_dim"] == 12 and qwen3["qk_norm"] and "attention_output_bias" not in qwen3
    llama_config = LlamaConfig(**tiny_sources.SHAPE, attention_bias=True, rope_theta=5000.0)
    llama = backbone_fields(llama_config, FAMILIES["LlamaForCausalLM"])
    assert llama["attention_bias"] is True and llama["rope_parameters"] == llama_config.rope_parameters
    assert {k: llama[k] for k in ("hidden_size", "num_key_value_heads", "vocab_size")} == \
        {"hidden_size": 32, "num_key_value_heads": 2, "vocab_size": 96}


def test_a_sliding_window_is_kept_only_where_every_layer_slides():
    """transformers' Qwen2 decides which layers slide (``layer_types`` from ``use_sliding_window`` and
    ``max_window_layers``): all of them -> the window; none -> full attention; a mix -> refused by name."""
    from transformers import MistralConfig, Qwen2Config

    qwen2 = FAMILIES["Qwen2ForCausalLM"]
    every = Qwen2Config(**tiny_sources.SHAPE, use_sliding_window=True, sliding_window=8, max_window_layers=0)
    assert set(every.layer_types) == {"sliding_attention"} and backbone_fields(every, qwen2)["sliding_window"] == 8
    off = Qwen2Config(**tiny_sources.SHAPE, use_sliding_window=False, sliding_window=8)
    assert backbone_fields(off, qwen2)["sliding_window"] is None
    mistral = MistralConfig(**tiny_sources.SHAPE, sliding_window=5)
    assert backbone_fields(mistral, FAMILIES["MistralForCausalLM"])["sliding_window"] == 5
    mixed = Qwen2Config(**tiny_sources.SHAPE, use_sliding_window=True, sliding_window=8, max_window_layers=1)
    with pytest.raises(UpcycleError, match=r"layer_types=\['full_attention', 'sliding_attention'\] is not supported"
                                           r": a mix of sliding-window and full-attention layers"):
        backbone_fields(mixed, qwen2)


def test_tensor_parallel_slicing_is_refused_naming_the_field():
    from transformers import LlamaConfig

    with pytest.raises(UpcycleError, match=r"pretraining_tp=2 is not supported: only 1"):
        backbone_fields(LlamaConfig(**tiny_sources.SHAPE, pretraining_tp=2), FAMILIES["LlamaForCausalLM"])


@pytest.mark.parametrize("layers,grow", [(3, 3), (4, 2), (5, 7), (2, 5), (6, 1)])
def test_interleaved_growth_spreads_new_blocks_evenly_between_source_blocks(layers, grow):
    layout = block_map(layers, grow, "interleave")
    assert [s for s in layout if s is not None] == list(range(layers))  # source order kept
    assert layout[0] == 0 and layout[-1] == layers - 1 and layout.count(None) == grow
    positions = [i for i, s in enumerate(layout) if s is not None]
    per_gap = [b - a - 1 for a, b in zip(positions, positions[1:])]
    assert max(per_gap) - min(per_gap) <= 1  # even: gaps differ by at most one new block


def test_growth_layouts_by_hand():
    assert block_map(4, 2, "interleave") == [0, 1, None, 2, None, 3]
    assert block_map(3, 0, "interleave") == [0, 1, 2]
    assert block_map(1, 2, "interleave") == [0, None, None]  # one block: nothing to put between, appended
    assert block_map(2, 2, "append") == [0, 1, None, None]
    with pytest.raises(UpcycleError, match="grow_mode='middle' is not allowed: grow_mode must be 'interleave' or "
                                           "'append'"):
        block_map(2, 1, "middle")


def test_map_state_renames_blocks_by_layout_and_names_every_leftover():
    t = {name: torch.full((1,), float(i)) for i, name in enumerate([
        "model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
        "model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.q_proj.weight",
        "model.layers.1.mlp.down_proj.weight", "model.layers.0.self_attn.rotary_emb.inv_freq",
        "model.layers.1.self_attn.rope_scale", "vision_tower.weight"])}
    out, leftover = map_state(t, [0, None, 1], tied=False)
    renamed = {"model.embed_tokens.weight": "model.embed_tokens.weight", "lm_head.weight": "lm_head.weight",
               "model.norm.weight": "model.norm.weight",
               "model.layers.0.self_attn.q_proj.weight": "model.layers.0.self_attn.q_proj.weight",
               "model.layers.2.self_attn.q_proj.weight": "model.layers.1.self_attn.q_proj.weight",
               "model.layers.2.mlp.down_proj.weight": "model.layers.1.mlp.down_proj.weight"}
    assert sorted(out) == sorted(renamed)
    assert all(out[new] is t[old] for new, old in renamed.items())  # the source's tensors, by reference
    assert leftover == ["model.layers.1.self_attn.rope_scale", "vision_tower.weight"]  # inv_freq is a buffer of RoPE
    tied, _ = map_state(t, [0, 1], tied=True)
    assert "lm_head.weight" not in tied and "model.embed_tokens.weight" in tied
