"""The depthbench config fields of a released OLMo-core checkpoint, read in named steps.

:func:`resolve_settings` is what ``depthbench convert`` asks: which registry architecture a checkpoint is and which
config fields reproduce it. It runs, in order, :func:`identify_architecture` (``model.block.name``, the translators'
refinements, the repository name as a fallback), :func:`backbone_fields` (shape, heads, RoPE, eps, init std; the
config first, the tensors second, the study's 16 heads when neither says), :func:`backbone_problems` (the settings
no depthbench backbone has), :func:`norm_fields` (block and final norm types and eps), the architecture's own
translator (:mod:`depthbench.hub.translators`), and :func:`release_fields` reads what the rest of the experiment
config records (EOS/PAD ids, the context length). Every unrepresentable setting is collected and refused at once,
by name, in one :class:`~depthbench.hub.translators.ConversionError`; nothing here names an architecture.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from depthbench.hub.translators import (
    BLOCK_NAME_REFINEMENTS,
    BLOCK_NAMES,
    REFINEMENTS,
    ConversionError,
    Translator,
    block_of,
    lookup,
    translator_for,
)

# Norm names (``layer_norm.name``) of OLMo-core's LayerNorm and of its RMSNorms whose math is depthbench's RMSNorm
# (the fused/CuTe kernels compute the same function; Qwen's differs only in where a bf16 cast happens).
LAYER_NORM_NAMES = ("default", "layer_norm", "layernorm")
RMS_NORM_NAMES = ("rms", "fused_rms", "cute_rms", "qwen_rms")
#: The study's context length, used when a checkpoint's config does not record one.
DEFAULT_CONTEXT = 2048


def identify_architecture(model_cfg: dict, repo_name: str | None = None, arch: str | None = None) -> tuple[str, dict]:
    """``(registry id, settings read from the repository name)``: ``arch`` if given, else ``model.block.name``
    (:data:`~depthbench.hub.translators.BLOCK_NAMES`) refined by the block's settings, else the repository name."""
    from depthbench.repo_names import parse_repo_name

    block = block_of(model_cfg)
    name_settings = {}
    if repo_name:
        try:
            name_settings = parse_repo_name(repo_name)
        except ValueError:
            name_settings = {}
    block_name = block.get("name")
    if arch is None:
        if block_name is not None:
            if block_name not in BLOCK_NAMES:
                raise ConversionError(f"block.name={block_name!r} is not one of the study's architectures "
                                      f"depthbench can represent ({', '.join(sorted(BLOCK_NAMES))})")
            arch = BLOCK_NAMES[block_name]
            for refine in BLOCK_NAME_REFINEMENTS:
                arch = refine(arch, block)
        elif name_settings:
            arch = name_settings["arch"]
        else:
            raise ConversionError("the architecture is unknown: the checkpoint has no config.json with "
                                  "model.block.name and no repository name to read it from; pass --arch")
    for refine in REFINEMENTS:
        arch = refine(arch, block, name_settings)
    return arch, name_settings


def backbone_fields(model_cfg: dict, state: dict) -> dict[str, Any]:
    """Shape, heads, RoPE theta, eps and init std: the config first, the tensors second (16 heads if neither)."""
    block = block_of(model_cfg)
    emb = state.get("embeddings.weight")
    vocab, d = (tuple(emb.shape) if emb is not None else (model_cfg.get("vocab_size"), model_cfg.get("d_model")))
    layers = sorted({int(m[1]) for k in state if (m := re.match(r"blocks\.(\d+)\.", k))})
    mixer = block.get("sequence_mixer") or block.get("attention") or {}
    heads = mixer.get("n_heads") or 16
    w1 = state.get("blocks.0.feed_forward.w1.weight", state.get("blocks.0.feed_forward.feed_forward.w1.weight"))
    return {
        "vocab_size": vocab, "hidden_size": d,
        "num_hidden_layers": model_cfg.get("n_layers") or (layers[-1] + 1 if layers else None),
        "num_attention_heads": heads, "num_key_value_heads": mixer.get("n_kv_heads") or heads,
        "head_dim": mixer.get("head_dim") or (d // heads if d else None),
        "intermediate_size": lookup(block, "feed_forward", "hidden_size") or (w1.shape[0] if w1 is not None else None),
        "rms_norm_eps": (block.get("layer_norm") or {}).get("eps", 1e-6),
        "rope_theta": (mixer.get("rope") or {}).get("theta", 10000),
        "tie_word_embeddings": bool(model_cfg.get("tie_word_embeddings", False)),
        "initializer_range": model_cfg.get("init_std", 0.02),
        "max_position_embeddings": DEFAULT_CONTEXT,
    }


def backbone_problems(model_cfg: dict, translator: Translator) -> list[str]:
    """The settings of ``model_cfg`` that no depthbench backbone has, by name."""
    block = block_of(model_cfg)
    mixer = block.get("sequence_mixer") or block.get("attention") or {}
    rope = mixer.get("rope") or {}
    checks = ((mixer.get("qk_norm"), "QK-norm (block.sequence_mixer.qk_norm)"),
              (mixer.get("bias"), "attention biases (block.sequence_mixer.bias)"),
              (mixer.get("gate"), "gated attention (block.sequence_mixer.gate)"),
              (mixer.get("sliding_window"), "sliding-window attention"),
              (mixer.get("clip_qkv"), "QKV clipping (block.sequence_mixer.clip_qkv)"),
              (rope.get("scaling"), "RoPE scaling (rope.scaling)"),
              (lookup(block, "feed_forward", "bias"), "MLP biases (feed_forward.bias)"),
              ((block.get("layer_norm") or {}).get("bias"), "norm biases (layer_norm.bias)"),
              (block.get("feed_forward_moe"), "mixture-of-experts feed-forward"),
              (lookup(model_cfg, "lm_head", "bias"), "an LM-head bias (lm_head.bias)"),
              (model_cfg.get("embedding_norm"), "an embedding norm (model.embedding_norm)"),
              (model_cfg.get("embed_scale"), "an embedding scale (model.embed_scale)"),
              (model_cfg.get("block_pattern"), "model.block_pattern (mixed block types)"))
    problems = [what for value, what in checks if value]
    if model_cfg.get("name", "default") != "default":
        problems.append(f"model.name={model_cfg['name']!r} (only OLMo-core's default Transformer)")
    activation = lookup(block, "feed_forward", "activation", default="silu")
    if activation not in ("silu", None):
        problems.append(f"feed_forward.activation={activation!r} (depthbench uses SwiGLU with silu)")
    for key in ("attention_residual_alpha", "feed_forward_residual_alpha"):
        if block.get(key) not in (None, 1.0, 1) and not translator.residual_alpha_allowed:
            problems.append(f"block.{key}={block.get(key)} (residual scaling outside depth-muP/CompleteP)")
    overrides = translator.block_overrides_problem(model_cfg)
    return problems + ([overrides] if overrides else [])


def _norm_type(norm: dict, default: str, where: str, problems: list[str]) -> str:
    name = norm.get("name")
    if name is None:
        return default
    if name in LAYER_NORM_NAMES:
        return "layernorm"
    if name not in RMS_NORM_NAMES:
        problems.append(f"{where}.name={name!r} (depthbench has LayerNorm ({', '.join(LAYER_NORM_NAMES)}) and "
                        f"RMSNorm ({', '.join(RMS_NORM_NAMES)}))")
    return "rmsnorm"


def norm_fields(model_cfg: dict, fields: dict[str, Any], translator: Translator, problems: list[str]) -> None:
    """``norm_type`` of the blocks, and the final norm: the same type and eps, or the translator's
    ``final_norm_field`` when the architecture represents another type there."""
    norm = block_of(model_cfg).get("layer_norm") or {}
    head_norm = lookup(model_cfg, "lm_head", "layer_norm") or norm
    fields["norm_type"] = _norm_type(norm, translator.unnamed_norm_type, "block.layer_norm", problems)
    head_type = _norm_type(head_norm, fields["norm_type"], "lm_head.layer_norm", problems) if "name" in head_norm \
        else fields["norm_type"]
    if head_type != fields["norm_type"]:
        if translator.final_norm_field:
            fields[translator.final_norm_field] = head_type
        else:
            problems.append(f"lm_head.layer_norm.name={head_norm.get('name')!r} differs from block.layer_norm.name="
                            f"{norm.get('name')!r}: depthbench uses one norm type for every norm of this architecture")
    if head_norm.get("eps", fields["rms_norm_eps"]) != fields["rms_norm_eps"] and translator.head_eps_must_match:
        problems.append(f"lm_head.layer_norm.eps={head_norm.get('eps')} differs from the block norms' eps "
                        f"{fields['rms_norm_eps']}: depthbench uses one eps")


def resolve_settings(model_cfg: dict, state: dict, repo_name: str | None = None, arch: str | None = None) -> dict:
    """``{"arch", "fields", "notes"}``: the registry id and depthbench config fields of the checkpoint, and what the
    model card should say about them. Raises :class:`ConversionError` naming every unrepresentable setting."""
    arch, _ = identify_architecture(model_cfg, repo_name, arch)
    translator = translator_for(arch)
    fields = backbone_fields(model_cfg, state)
    problems = backbone_problems(model_cfg, translator)
    norm_fields(model_cfg, fields, translator, problems)
    notes: list[str] = []
    arch = translator.settings(model_cfg, state, fields, problems, notes) or arch  # HC's kind may name mHC
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size") if not fields[k]]
    if missing:
        problems.append(f"shape fields not found in config.json or the tensors: {', '.join(missing)}")
    if problems:
        raise ConversionError("cannot convert this checkpoint exactly; unsupported setting(s): " + "; ".join(problems))
    return {"arch": arch, "fields": fields, "notes": notes}


def release_fields(experiment: dict, tokenizer: Callable[[], Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """``(fields, notes)`` from the rest of the experiment config: the EOS / PAD / BOS ids of ``dataset.tokenizer``
    (else the release's tokenizer, ``tokenizer()``, when the config has none) and the context length
    (``dataset.sequence_length``, else ``train_module.max_sequence_length``, else the study's 2048, noted)."""
    recorded = lookup(experiment, "dataset", "tokenizer", default={}) or {}
    fields: dict[str, Any] = {}
    notes: list[str] = []
    for key in ("eos_token_id", "pad_token_id", "bos_token_id"):
        fields[key] = recorded.get(key)
    if (fields["eos_token_id"] is None or fields["pad_token_id"] is None) and tokenizer is not None:
        try:
            loaded = tokenizer()
        except ConversionError as exc:
            loaded = None
            notes.append(f"no EOS/PAD ids in config.json and {exc}")
        for key in ("eos_token_id", "pad_token_id"):
            if fields[key] is None and loaded is not None:
                fields[key] = getattr(loaded, key, None)
    if fields["eos_token_id"] is None:
        notes.append("no EOS id in config.json (dataset.tokenizer) or the tokenizer: generate() stops only at "
                     "max_new_tokens")
    context = (lookup(experiment, "dataset", "sequence_length")
               or lookup(experiment, "train_module", "max_sequence_length"))
    if context is None:
        notes.append(f"the context length is not recorded (dataset.sequence_length): the study's {DEFAULT_CONTEXT} "
                     "is assumed")
    fields["max_position_embeddings"] = int(context or DEFAULT_CONTEXT)
    return fields, notes
