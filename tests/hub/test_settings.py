"""``depthbench.hub.settings``: which architecture a released checkpoint is and which config fields reproduce it.

The fixtures are the fork's own config and tensor layout (tests/hub/fork_reference.py, independent of depthbench:
its shape constants D, L, HEADS, FFN are the oracle of what the fields must say). Refusals through the whole of
``depthbench convert`` are test_convert.py's; here each named step on its own.

Run: ``python -m pytest tests/hub/test_settings.py -q``
"""

from __future__ import annotations

import pytest

from depthbench.hub import settings as st
from depthbench.hub.translators import ConversionError, Translator, translator_for
from tests.hub.fork_reference import FFN, HEADS, D, L, fork_config, fork_state

VOCAB = 64


def _model(block_name: str = "default", **kwargs) -> dict:
    return fork_config(block_name, VOCAB, **kwargs)["model"]


def test_the_architecture_comes_from_the_block_name_then_the_repository_name():
    assert st.identify_architecture(_model("peri_norm"))[0] == "peri_ln"
    assert st.identify_architecture(_model(block={"hyper_connections": {"kind": "mhc"}}))[0] == "mhc"
    assert st.identify_architecture(_model("peri_norm"), arch="keel")[0] == "keel"  # --arch wins
    arch, named = st.identify_architecture({}, "aspect-ratio-scaling/periln-lr2e-3-llama-400M-L3-pretrain")
    assert arch == "peri_ln" and named["arch"] == "peri_ln"
    with pytest.raises(ConversionError, match=r"no repository name to read it from; pass --arch"):
        st.identify_architecture({}, "not-a-release-name")
    with pytest.raises(ConversionError) as exc:
        st.identify_architecture(_model("gated_delta"))
    assert "block.name='gated_delta' is not one of" in str(exc.value)
    assert all(name in str(exc.value) for name in ("default", "peri_norm", "post_norm_moda"))


def test_backbone_fields_read_the_config_then_the_tensors():
    model = _model(block={"sequence_mixer": {"n_kv_heads": 2, "rope": {"theta": 5e5}}})
    state = fork_state(model)
    fields = st.backbone_fields(model, state)
    assert {k: fields[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                   "num_key_value_heads", "head_dim", "intermediate_size", "rope_theta",
                                   "rms_norm_eps", "initializer_range")} == \
        {"vocab_size": VOCAB, "hidden_size": D, "num_hidden_layers": L, "num_attention_heads": HEADS,
         "num_key_value_heads": 2, "head_dim": D // HEADS, "intermediate_size": FFN, "rope_theta": 5e5,
         "rms_norm_eps": 1e-6, "initializer_range": 0.02}
    # a plain state dict without a config: the tensors give the shape, the heads are the study's 16
    bare = st.backbone_fields({}, state)
    assert (bare["vocab_size"], bare["hidden_size"], bare["num_hidden_layers"], bare["intermediate_size"]) == \
        (VOCAB, D, L, FFN)
    assert (bare["num_attention_heads"], bare["num_key_value_heads"], bare["head_dim"]) == (16, 16, D // 16)


def test_every_unrepresentable_backbone_setting_is_named_at_once():
    model = _model(block={"sequence_mixer": {"qk_norm": {"name": "rms"}, "rope": {"scaling": {"factor": 2}}},
                          "feed_forward": {"activation": "gelu"}, "attention_residual_alpha": 0.5},
                   model={"name": "moe", "embed_scale": 8.0})
    assert st.backbone_problems(model, Translator()) == [
        "QK-norm (block.sequence_mixer.qk_norm)", "RoPE scaling (rope.scaling)",
        "an embedding scale (model.embed_scale)", "model.name='moe' (only OLMo-core's default Transformer)",
        "feed_forward.activation='gelu' (depthbench uses SwiGLU with silu)",
        "block.attention_residual_alpha=0.5 (residual scaling outside depth-muP/CompleteP)"]
    assert st.backbone_problems(_model(), Translator()) == []
    depth_scaled = _model("depth_mup", block={"attention_residual_alpha": 0.5})
    assert st.backbone_problems(depth_scaled, translator_for("depth_mup")) == []


def _norms(model: dict, arch: str = "pre_ln") -> tuple[dict, list[str]]:
    fields, problems = {"rms_norm_eps": 1e-6}, []
    st.norm_fields(model, fields, translator_for(arch), problems)
    return fields, problems


def test_norm_types_and_the_final_norm():
    assert _norms(_model())[0]["norm_type"] == "rmsnorm"
    assert _norms(_model(block={"layer_norm": {"name": "default"}}))[0]["norm_type"] == "layernorm"
    # DeepNorm's entry script: LayerNorm blocks, the LM head's RMSNorm kept, carried by its own field
    fields, problems = _norms(_model("deepnorm", block={"layer_norm": {"name": "default"}}), "deepnorm")
    assert (fields["norm_type"], fields["deepnorm_final_norm_type"], problems) == ("layernorm", "rmsnorm", [])
    fields, problems = _norms(_model(block={"layer_norm": {"name": "default"}}))
    assert problems == ["lm_head.layer_norm.name='rms' differs from block.layer_norm.name='default': depthbench "
                        "uses one norm type for every norm of this architecture"]
    _, problems = _norms(_model(block={"layer_norm": {"name": "triton_rms"}}))
    assert problems[0] == ("block.layer_norm.name='triton_rms' (depthbench has LayerNorm (default, layer_norm, "
                           "layernorm) and RMSNorm (rms, fused_rms, cute_rms, qwen_rms))")
    model = _model()
    model["lm_head"]["layer_norm"]["eps"] = 1e-5
    assert _norms(model)[1] == ["lm_head.layer_norm.eps=1e-05 differs from the block norms' eps 1e-06: depthbench "
                                "uses one eps"]
    assert _norms(model, "attnres")[1] == []  # AttnRes runs the head's norm with the mix eps


def test_resolve_settings_refuses_every_problem_in_one_error():
    model = _model(block={"sequence_mixer": {"bias": True}, "layer_norm": {"name": "triton_rms"}})
    with pytest.raises(ConversionError) as exc:
        st.resolve_settings(model, fork_state(model))
    message = str(exc.value)
    assert message.startswith("cannot convert this checkpoint exactly; unsupported setting(s): ")
    assert "attention biases (block.sequence_mixer.bias)" in message and "triton_rms" in message
    with pytest.raises(ConversionError, match="shape fields not found in config.json or the tensors: "
                                              "vocab_size, hidden_size, num_hidden_layers, intermediate_size"):
        st.resolve_settings({"block": {"name": "default"}}, {})


def test_release_fields_take_ids_and_context_from_the_config_else_the_tokenizer_else_say_so():
    class Tok:
        eos_token_id, pad_token_id = 7, 8

    fields, notes = st.release_fields(fork_config("default", VOCAB))
    assert (fields["eos_token_id"], fields["pad_token_id"], fields["max_position_embeddings"], notes) == \
        (0, 1, 96, [])
    experiment = {"train_module": {"max_sequence_length": 512}}
    fields, notes = st.release_fields(experiment, tokenizer=Tok)
    assert (fields["eos_token_id"], fields["pad_token_id"], fields["max_position_embeddings"], notes) == \
        (7, 8, 512, [])

    def missing():
        raise ConversionError("the release has no tokenizer/")

    fields, notes = st.release_fields({}, tokenizer=missing)
    assert fields["eos_token_id"] is None and fields["max_position_embeddings"] == st.DEFAULT_CONTEXT == 2048
    assert notes == ["no EOS/PAD ids in config.json and the release has no tokenizer/",
                     "no EOS id in config.json (dataset.tokenizer) or the tokenizer: generate() stops only at "
                     "max_new_tokens",
                     "the context length is not recorded (dataset.sequence_length): the study's 2048 is assumed"]
