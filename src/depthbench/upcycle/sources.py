"""Source models of ``depthbench upcycle``: which Hugging Face causal LMs it reads, and how their config fields and
tensors map onto depthbench's backbone.

Supported families (``config.architectures`` / the model class): ``LlamaForCausalLM`` (SmolLM2, Llama 3.x with RoPE
scaling, tied or untied embeddings, optional ``attention_bias``), ``MistralForCausalLM`` (sliding window),
``Qwen2ForCausalLM`` (q/k/v biases) and ``Qwen3ForCausalLM`` (per-head q/k RMSNorm). The backbone's parameter names
are HF Llama's (and Qwen's for the q/k norms), so tensors map by name; every source tensor is either consumed or the
upcycle is refused naming it, and every source setting depthbench's backbone cannot represent is refused naming
the field (:func:`backbone_fields`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class UpcycleError(ValueError):
    """Bad input for ``depthbench upcycle`` (a one-line message: what was wrong, what is allowed)."""


@dataclass(frozen=True)
class Family:
    """One supported source family: ``biases`` = (q/k/v bias, o bias) when fixed by the family (Qwen2), else read
    from ``attention_bias``; ``qk_norm``: the family has Qwen3's per-head q/k norms."""

    name: str
    fixed_biases: tuple[bool, bool] | None = None
    qk_norm: bool = False


FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family("llama"),
    "MistralForCausalLM": Family("mistral"),
    "Qwen2ForCausalLM": Family("qwen2", fixed_biases=(True, False)),
    "Qwen3ForCausalLM": Family("qwen3", qk_norm=True),
}

#: Source config fields copied unchanged into the depthbench config (same name, same meaning).
COPIED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "initializer_range",
          "tie_word_embeddings", "attention_dropout", "pad_token_id", "bos_token_id", "eos_token_id")

#: Per-block tensors of the backbone (relative to ``model.layers.N.``), Llama / Qwen names.
BLOCK_TENSORS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                 "self_attn.o_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
                 "self_attn.o_proj.bias", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                 "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                 "input_layernorm.weight", "post_attention_layernorm.weight")
#: Tensors outside the blocks.
TOP_TENSORS = ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight")
#: Tensors a new (grown) block's output projections hold: zero, so the block adds nothing at step 0.
OUTPUT_PROJECTIONS = ("self_attn.o_proj.weight", "self_attn.o_proj.bias", "mlp.down_proj.weight")

_BLOCK_RE = re.compile(r"model\.layers\.(\d+)\.(.+)")


def family_of(source) -> tuple[str, Family]:
    """``(class name, Family)`` of a loaded source model; :class:`UpcycleError` naming the supported ones."""
    from transformers import PreTrainedModel

    if not isinstance(source, PreTrainedModel) or not hasattr(source, "get_output_embeddings") \
            or source.get_output_embeddings() is None:
        raise UpcycleError(f"the source ({type(source).__name__}) is not a causal language model with an LM head; "
                           f"upcycle reads {', '.join(FAMILIES)}")
    name = type(source).__name__
    if name not in FAMILIES:
        raise UpcycleError(f"unsupported source family {name} (model_type {source.config.model_type!r}); "
                           f"supported: {', '.join(FAMILIES)}")
    return name, FAMILIES[name]


def backbone_fields(config, family: Family) -> dict:
    """The depthbench backbone fields that compute ``config``'s model; :class:`UpcycleError` naming the first
    source field the backbone cannot represent."""
    def refuse(field, value, why):
        raise UpcycleError(f"the source's {field}={value!r} is not supported: {why}")

    fields = {name: getattr(config, name) for name in COPIED if hasattr(config, name)}
    fields["head_dim"] = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if config.hidden_act not in ("silu", "gelu_pytorch_tanh"):
        refuse("hidden_act", config.hidden_act, "the backbone's MLP is SwiGLU with silu (or gelu_pytorch_tanh)")
    if getattr(config, "mlp_bias", False):
        refuse("mlp_bias", True, "the backbone's MLP has no biases")
    if getattr(config, "pretraining_tp", 1) not in (None, 1):
        refuse("pretraining_tp", config.pretraining_tp, "only 1 (no tensor-parallel slicing of the projections)")
    rope = dict(getattr(config, "rope_parameters", None) or {})
    fields["rope_parameters"] = rope or {"rope_type": "default", "rope_theta": getattr(config, "rope_theta", 1e4)}
    if family.fixed_biases is not None:
        fields["attention_bias"], fields["attention_output_bias"] = family.fixed_biases
    else:
        fields["attention_bias"] = bool(getattr(config, "attention_bias", False))
    fields["qk_norm"] = family.qk_norm
    fields["sliding_window"] = _sliding_window(config, refuse)
    return fields


def _sliding_window(config, refuse) -> int | None:
    """Mistral's window (every layer), ``None`` for full attention; a per-layer mix of sliding and full layers is
    refused (the backbone has one window for every layer)."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if hasattr(config, "use_sliding_window") and not config.use_sliding_window:
        window = None
    if types is not None:
        kinds = set(types)
        if kinds == {"full_attention"}:
            return None
        if kinds != {"sliding_attention"}:
            refuse("layer_types", sorted(kinds), "a mix of sliding-window and full-attention layers (the backbone has "
                   "one sliding_window for every layer)")
    return window


def block_map(num_source_layers: int, grow: int, mode: str) -> list[int | None]:
    """Source block of every upcycled block (``None`` = a new block): ``grow`` new blocks appended after the last
    source block, or interleaved: spread evenly over the gaps between source blocks (the source's first and last
    blocks stay first and last; a one-block source appends)."""
    if mode not in ("interleave", "append"):
        raise UpcycleError(f"grow_mode={mode!r} is not allowed: grow_mode must be 'interleave' or 'append'")
    gaps = num_source_layers - 1
    if mode == "append" or gaps == 0:
        return [*range(num_source_layers), *([None] * grow)]
    layout: list[int | None] = []
    for i in range(num_source_layers):
        layout.append(i)
        if i < gaps:
            layout += [None] * ((grow * (i + 1)) // gaps - (grow * i) // gaps)
    return layout


def map_state(state: dict, layout: list[int | None], tied: bool) -> tuple[dict, list[str]]:
    """Source tensors renamed into the upcycled model (block indices per ``layout``); every source tensor is consumed
    or named in the returned list of leftovers (the caller refuses them)."""
    position = {src: dst for dst, src in enumerate(layout) if src is not None}
    out, leftover = {}, []
    for name, tensor in state.items():
        match = _BLOCK_RE.fullmatch(name)
        if match and match[2] in BLOCK_TENSORS and int(match[1]) in position:
            out[f"model.layers.{position[int(match[1])]}.{match[2]}"] = tensor
        elif name in TOP_TENSORS:
            if name == "lm_head.weight" and tied:
                continue  # the same tensor as the embedding (tied): the upcycled model ties it too
            out[name] = tensor
        elif not name.endswith("rotary_emb.inv_freq"):
            leftover.append(name)
    return out, leftover
