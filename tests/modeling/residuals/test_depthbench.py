"""The shared backbone (``modeling/modeling_depthbench.py``) against transformers' own models: its default wiring
is Pre-LN, so it must compute what ``LlamaForCausalLM`` computes. The source-model options: attention biases
(Llama's on q/k/v/o, Qwen2's on q/k/v only), Qwen3's per-head q/k RMSNorm, Mistral's sliding window (on a sequence
longer than the window, with and without the KV cache), tied embeddings, head_dim != d / heads and Llama 3 RoPE
scaling; the analysis interventions (a skipped or swapped block is Llama with its layers edited, the depth states
are Llama's residual stream); weight-decay names and the gradient-checkpointing attribute.

Each HF model is built tiny and random by transformers; its state dict is loaded *unchanged and strictly* into a
``pre_ln`` model configured by hand with the matching fields, and the logits must agree to fp32 rounding. The
registry-wide contract (every architecture) is test_contract.py.

    python -m pytest tests/modeling/residuals/test_depthbench.py -q
"""

from __future__ import annotations

import copy

import pytest
import torch

from depthbench.registry import build_model
from tests.upcycle import tiny_sources
from tests.upcycle.tiny_sources import SHAPE, inputs, relative_difference


def _pre_ln(source, **fields):
    c = source.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    model = build_model("pre_ln", **SHAPE, head_dim=head_dim, rms_norm_eps=c.rms_norm_eps,
                        rope_parameters=dict(c.rope_parameters), tie_word_embeddings=c.tie_word_embeddings, **fields)
    state = source.state_dict()
    if c.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert [k for k in missing if k != "lm_head.weight"] == [], missing
    if c.tie_word_embeddings:
        model.tie_weights()
    return model.eval()


CASES = {
    "llama_bias": (lambda: tiny_sources.llama(bias=True), dict(attention_bias=True)),
    "llama_scaled_tied": (tiny_sources.SOURCES["llama_rope_scaled_tied"], {}),
    "qwen2": (tiny_sources.qwen2, dict(attention_bias=True, attention_output_bias=False)),
    "qwen3": (tiny_sources.qwen3, dict(qk_norm=True)),
    "mistral": (tiny_sources.mistral, dict(sliding_window=5)),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_logits_equal_transformers(case, attn):
    build, fields = CASES[case]
    source = build()
    model = _pre_ln(source, **fields)
    source.config._attn_implementation = attn
    model.config._attn_implementation = attn
    ids = inputs(length=40 if case != "llama_scaled_tied" else 80)  # past the window / the original context
    with torch.no_grad():
        assert relative_difference(model(ids).logits, source(ids).logits) < 1e-5


@pytest.mark.parametrize("case", ["mistral", "qwen3"])
def test_generate_equals_transformers(case):
    build, fields = CASES[case]
    source = build()
    model = _pre_ln(source, **fields)
    ids = inputs(batch=1, length=6)
    kwargs = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(ids, **kwargs), source.generate(ids, **kwargs))


def test_parameter_counts_include_the_options():
    for fields in CASES.values():
        model = build_model("pre_ln", **SHAPE, head_dim=12, **fields[1])
        assert model.config.parameter_counts()["total"] == sum(p.numel() for p in model.parameters())


def test_defaults_keep_the_study_backbone():
    model = build_model("pre_ln", **SHAPE)
    names = {n for n, _ in model.named_parameters()}
    assert not [n for n in names if n.endswith("bias") or "q_norm" in n or "k_norm" in n]
    assert model.config.sliding_window is None


# ================================================================================================ analysis hooks
# The backbone's default wiring is Pre-LN, so its interventions are Llama's own model with its layers edited.
def _llama_and_ours():
    source = tiny_sources.llama()
    return source, _pre_ln(source)


def _llama_logits(source, layers, ids):
    edited = copy.deepcopy(source)
    edited.model.layers = torch.nn.ModuleList([edited.model.layers[i] for i in layers])
    with torch.no_grad():
        return edited(ids, use_cache=False).logits


def test_skip_block_is_llama_without_that_layer():
    source, model = _llama_and_ours()
    ids = inputs(length=10)
    for index in (0, 1, -1):
        kept = [i for i in range(SHAPE["num_hidden_layers"]) if i != index % SHAPE["num_hidden_layers"]]
        with model.skip_block(index), torch.no_grad():
            logits = model(ids, use_cache=False).logits
        assert relative_difference(logits, _llama_logits(source, kept, ids)) < 1e-5


def test_swap_blocks_is_llama_with_its_layers_reordered_and_restores():
    source, model = _llama_and_ours()
    ids = inputs(length=10)
    with torch.no_grad():
        before = model(ids, use_cache=False).logits
        with model.swap_blocks(0, 2):
            swapped = model(ids, use_cache=False).logits
        after = model(ids, use_cache=False).logits
    assert relative_difference(swapped, _llama_logits(source, [2, 1, 0], ids)) < 1e-5
    assert torch.equal(after, before)


def test_depth_states_and_hidden_states_are_llamas_residual_stream():
    """``depth_states``: the embeddings and every block's output (Llama's layer outputs, read by hooks);
    ``output_hidden_states``: exactly Llama's tuple."""
    source, model = _llama_and_ours()
    ids = inputs(length=10)
    stream = []
    hooks = [source.model.embed_tokens.register_forward_hook(lambda m, a, out: stream.append(out))]
    hooks += [layer.register_forward_hook(lambda m, a, out: stream.append(out[0] if isinstance(out, tuple) else out))
              for layer in source.model.layers]
    with torch.no_grad():
        theirs = source(ids, use_cache=False, output_hidden_states=True).hidden_states
    for hook in hooks:
        hook.remove()
    states = model.depth_states(ids)
    assert len(states) == len(stream) == SHAPE["num_hidden_layers"] + 1
    for ours, want in zip(states, stream):
        assert relative_difference(ours, want) < 1e-5
    with torch.no_grad():
        hidden = model(ids, use_cache=False, output_hidden_states=True).hidden_states
    assert len(hidden) == len(theirs)
    for ours, want in zip(hidden, theirs):
        assert relative_difference(ours, want) < 1e-5


def test_block_index_out_of_range_names_the_blocks_there_are():
    _, model = _llama_and_ours()
    with pytest.raises(IndexError, match=r"block index 3 is out of range: the model has 3 blocks \(0\.\.2\)"):
        with model.skip_block(3):
            pass


# ================================================================================================ training plumbing
def test_no_weight_decay_names_are_every_norm_gain_and_bias():
    model = build_model("pre_ln", **SHAPE, attention_bias=True, qk_norm=True)
    names = [n for n, _ in model.named_parameters()]
    want = {n for n in names if n.endswith(".bias") or n.endswith("norm.weight")}
    assert want >= {"model.norm.weight", "model.layers.0.input_layernorm.weight",
                    "model.layers.0.self_attn.q_norm.weight", "model.layers.2.self_attn.v_proj.bias"}
    assert model.no_weight_decay_names() == want


def test_gradient_checkpointing_func_behaves_as_llamas_attribute():
    """Unset it raises AttributeError (as on ``LlamaDecoderLayer``); what transformers assigns is adapted to
    streams (``depthbench_checkpointing.py``) and ``del`` removes it again."""
    source, model = _llama_and_ours()
    ours, theirs = model.model.layers[0], source.model.layers[0]
    assert hasattr(ours, "_gradient_checkpointing_func") == hasattr(theirs, "_gradient_checkpointing_func") is False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    assert getattr(ours._gradient_checkpointing_func, "_depthbench_stream_adapter", False)
    del ours._gradient_checkpointing_func
    assert not hasattr(ours, "_gradient_checkpointing_func")
    with pytest.raises(AttributeError):
        del ours._gradient_checkpointing_func
