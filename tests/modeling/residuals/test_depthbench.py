"""The backbone's source-model options against transformers' own models: attention biases (Llama's on q/k/v/o,
Qwen2's on q/k/v only), Qwen3's per-head q/k RMSNorm, Mistral's sliding window (on a sequence longer than the
window, with and without the KV cache), tied embeddings, head_dim != d / heads and Llama 3 RoPE scaling.

Each HF model is built tiny and random by transformers; its state dict is loaded *unchanged and strictly* into a
``pre_ln`` model configured by hand with the matching fields, and the logits must agree to fp32 rounding.

    python -m pytest tests/modeling/test_backbone_options.py -q
"""

from __future__ import annotations

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
