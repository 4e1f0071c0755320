"""The configuration every architecture shares (``modeling/configuration_depthbench.py``): its parameter counts
against transformers' own models of the same shape, the derived defaults as ``LlamaConfig`` derives them, and the
validation errors (the field, the value and what is allowed). The registry-wide config checks (defaults, round
trips, bad backbones for every architecture) are in test_contract.py.

    python -m pytest tests/modeling/test_configuration_depthbench.py -q
"""

from __future__ import annotations

import pytest
from depthbench.modeling.configuration_depthbench import DepthBenchConfig
from depthbench.modeling.hf_compat import MIN_TRANSFORMERS
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from depthbench.registry import build_model
from tests.helpers import tiny_model
from tests.upcycle.tiny_sources import SHAPE

SMALL = dict(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)


@pytest.mark.parametrize("hf_model, hf_config, fields", [
    pytest.param(LlamaForCausalLM, LlamaConfig, dict(tie_word_embeddings=True), id="llama-gqa-tied"),
    pytest.param(LlamaForCausalLM, LlamaConfig, dict(attention_bias=True, head_dim=6), id="llama-bias-head_dim"),
    pytest.param(Qwen2ForCausalLM, Qwen2Config, dict(attention_bias=True, attention_output_bias=False), id="qwen2"),
    pytest.param(Qwen3ForCausalLM, Qwen3Config, dict(qk_norm=True, head_dim=6), id="qwen3"),
])
def test_parameter_counts_equal_the_transformers_model_of_that_shape(hf_model, hf_config, fields):
    counts = DepthBenchConfig(**SMALL, **fields).parameter_counts()
    hf_fields = {k: v for k, v in fields.items() if k not in ("attention_output_bias", "qk_norm")}
    if hf_config is Qwen3Config:
        hf_fields["attention_bias"] = False
    reference = hf_model(hf_config(**SMALL, **hf_fields))
    assert counts["total"] == sum(p.numel() for p in reference.parameters())
    assert counts["embedding"] == reference.model.embed_tokens.weight.numel()
    assert counts["backbone"] == sum(p.numel() for p in reference.model.layers.parameters())
    assert counts["lm_head"] == (0 if fields.get("tie_word_embeddings") else SMALL["vocab_size"] * 16)
    assert counts["final_norm"] == 16 and counts["extra"] == 0


def test_derived_fields_follow_llama_config():
    ours, llama = DepthBenchConfig(hidden_size=48, num_attention_heads=4), LlamaConfig(hidden_size=48,
                                                                                       num_attention_heads=4)
    assert (ours.head_dim, ours.num_key_value_heads) == (llama.head_dim, llama.num_key_value_heads) == (12, 4)
    assert DepthBenchConfig(attention_bias=True).attention_output_bias is True
    assert DepthBenchConfig(attention_bias=True, attention_output_bias=False).attention_output_bias is False
    assert DepthBenchConfig().num_sublayers == 2 * DepthBenchConfig().num_hidden_layers


def test_rope_parameters_set_rope_theta_and_the_callers_dict_is_left_alone():
    rope = {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}
    config = DepthBenchConfig(rope_parameters=rope)
    assert config.rope_theta == 500.0
    assert config.rope_parameters["rope_type"] == "linear" and config.rope_parameters["factor"] == 2.0
    assert rope == {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}


def test_min_transformers_is_always_the_running_codes_own():
    assert DepthBenchConfig(depthbench_min_transformers="4.0.0").depthbench_min_transformers == MIN_TRANSFORMERS


@pytest.mark.parametrize("fields, message", [
    (dict(rms_norm_eps=0), "rms_norm_eps=0 is not allowed: rms_norm_eps must be a positive number."),
    (dict(vocab_size=True), "vocab_size=True is not allowed: vocab_size must be an integer >= 1."),
    (dict(attention_dropout=1.0), "attention_dropout=1.0 is not allowed: attention_dropout must be in [0, 1)."),
    (dict(norm_type="batchnorm"), "norm_type='batchnorm' is not allowed: norm_type must be one of ['rmsnorm', "
                                  "'layernorm']."),
    (dict(rope_parameters={"rope_type": "linear", "factor": 0.5}),
     "rope_parameters['factor']=0.5 is not allowed: rope_parameters['factor'] must be a number >= 1 for "
     "rope_type='linear'."),
])
def test_a_bad_field_is_refused_naming_it_and_what_is_allowed(fields, message):
    with pytest.raises(ValueError) as info:
        DepthBenchConfig(**fields)
    assert str(info.value) == message


def test_a_subclass_without_its_own_init_still_validates():
    """transformers would make such a subclass a dataclass whose generated ``__init__`` skips ours."""

    class Bare(DepthBenchConfig):
        model_type = "depthbench_test_bare"

    assert Bare(hidden_size=48, num_attention_heads=4).head_dim == 12
    with pytest.raises(ValueError, match="head_dim=15 is not allowed"):
        Bare(head_dim=15)


def test_rope_parameters_are_validated():
    with pytest.raises(ValueError, match="rope_type"):
        tiny_model("pre_ln", rope_parameters={"rope_type": "warp"})
    with pytest.raises(ValueError, match="factor"):
        tiny_model("pre_ln", rope_parameters={"rope_type": "linear"})


@pytest.mark.parametrize("field,value", [("sliding_window", 0), ("qk_norm", "yes"), ("attention_bias", 1)])
def test_bad_option_values_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        build_model("pre_ln", **SHAPE, **{field: value})
