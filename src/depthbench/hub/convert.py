"""``depthbench convert``: the study's released OLMo-core checkpoints -> depthbench's Hugging Face format.

The DepthBench study (arXiv 2609.32534) released its models in the ``aspect-ratio-scaling`` organisation as raw
OLMo-core distributed checkpoints (folders ``step0``, ``step3000``, ..., ``step7600``, each an experiment
``config.json`` plus ``model_and_optim/``, a ``torch.distributed.checkpoint`` folder with the optimizer state, and
a ``tokenizer/`` folder). Nothing loads them with ``from_pretrained``, and OLMo-core's own HF converter maps every
residual variant to a plain Llama, silently dropping their semantics. This module converts them exactly, or refuses.

    depthbench convert aspect-ratio-scaling/hc-lr2e-3-llama-400M-L24-pretrain --step 7600 -o hc-L24
    depthbench convert path/to/step7600 -o out          # a local step folder (config.json + model_and_optim/)
    depthbench convert model.pt --arch pre_ln -o out     # a plain OLMo-core state dict (+ --config for the shape)

    import depthbench
    model = depthbench.from_released("aspect-ratio-scaling/preln-lr2e-3-llama-400M-L24-pretrain", step=7600)

* **Download** (Hub ids): only ``step<N>/config.json``, the checkpoint's ``.metadata``, the ``.distcp`` files that
  hold model tensors, and ``tokenizer/`` are fetched (``huggingface_hub.snapshot_download`` with patterns;
  resumable, progress bar). Each rank's ``.distcp`` file mixes model and optimizer tensors, so those files come
  whole; only the model tensors are read from them.
* **Settings** come from the checkpoint's ``config.json`` (``model.block.name``, norms, heads, RoPE,
  ``attnres_block_size``, ``hyper_connections``, ``moda``); missing fields fall back to the repository name
  (architecture) and the study's shape rule (16 heads). Every setting depthbench cannot represent is refused
  with a :class:`ConversionError` naming it (QK-norm, biases, MoE, ``mhc_static``, AttnRes ablations, a final
  norm of another type, ...). Conversions that are exact only up to a documented numerical difference (Liger-mHC's
  Sinkhorn order, AttnRes's two norm epsilons) need ``allow_approximate=True`` and are recorded in the card.
* **Key mapping** (:data:`KEY_MAP` below for the backbone, each architecture's translator in
  :mod:`depthbench.hub.translators` for the rest; documented in the README's "Publishing" section): OLMo-core
  names -> depthbench names (HF Llama's for the backbone). Every source tensor must be consumed and every target
  tensor filled, or the conversion fails naming the keys.

What one architecture reads, maps, refuses or approximates lives in its translator; the functions here are shared
by all of them.

Output: ``save_pretrained`` (safetensors + remote code), the tokenizer, a model card naming the source repository
and step, and ``depthbench_conversion.json`` (source, step, settings, approximations; read by
``depthbench publish``, which re-publishes a conversion as ``<name>-hf``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any

from depthbench.hub.translators import (
    ALIAS_RE,
    BLOCK_NAME_REFINEMENTS,
    BLOCK_NAMES,
    CONSTANT_RE,
    REFINEMENTS,
    ConversionError,
    lookup,
    translator_for,
)

# The backbone mapping (every architecture). ``{i}`` is the block index.
KEY_MAP: list[tuple[str, str]] = [
    ("embeddings.weight", "model.embed_tokens.weight"),
    ("blocks.{i}.attention.w_q.weight", "model.layers.{i}.self_attn.q_proj.weight"),
    ("blocks.{i}.attention.w_k.weight", "model.layers.{i}.self_attn.k_proj.weight"),
    ("blocks.{i}.attention.w_v.weight", "model.layers.{i}.self_attn.v_proj.weight"),
    ("blocks.{i}.attention.w_out.weight", "model.layers.{i}.self_attn.o_proj.weight"),
    ("blocks.{i}.attention_norm.weight", "model.layers.{i}.input_layernorm.weight"),
    ("blocks.{i}.feed_forward.w1.weight", "model.layers.{i}.mlp.gate_proj.weight"),
    ("blocks.{i}.feed_forward.w3.weight", "model.layers.{i}.mlp.up_proj.weight"),
    ("blocks.{i}.feed_forward.w2.weight", "model.layers.{i}.mlp.down_proj.weight"),
    ("blocks.{i}.feed_forward_norm.weight", "model.layers.{i}.post_attention_layernorm.weight"),
    ("lm_head.norm.weight", "model.norm.weight"),
    ("lm_head.w_out.weight", "lm_head.weight"),
]
# Norm names (``layer_norm.name``) that mean LayerNorm; any other is RMSNorm.
LAYER_NORM_NAMES = ("default", "layer_norm", "layernorm")


# ================================================================================================ reading
def _strip_prefix(state: dict) -> dict:
    if state and all(k.startswith("model.") for k in state):
        return {k[len("model."):]: v for k, v in state.items()}
    return state


def load_dcp_model_state(dcp_dir: str) -> dict:
    """The model tensors (no optimizer state) of an OLMo-core ``model_and_optim/`` distributed checkpoint."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    class _Reader(dcp.FileSystemReader):
        """Reads checkpoints written by older torch / OLMo-core's writer (fills storage fields added since)."""

        def read_metadata(self):
            metadata = super().read_metadata()
            defaults = {"transform_descriptors": None}
            for info in (metadata.storage_data or {}).values():
                for name, value in defaults.items():
                    if not hasattr(info, name):
                        setattr(info, name, value)
            return metadata

    reader = _Reader(dcp_dir)
    metadata = reader.read_metadata()
    state = {}
    for key, meta in metadata.state_dict_metadata.items():
        if key.startswith("model.") and isinstance(meta, TensorStorageMetadata):
            state[key[len("model."):]] = torch.empty(meta.size, dtype=meta.properties.dtype)
    if not state:
        raise ConversionError(f"{dcp_dir}: no model.* tensors in the distributed checkpoint")
    import warnings

    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": yes, it is
        warnings.filterwarnings("ignore", message=".*single process.*")
        if _dcp_accepts_no_dist():
            dcp.load({"model": state}, storage_reader=reader, no_dist=True)
        else:
            dcp.load({"model": state}, storage_reader=reader)
    return state


def _dcp_accepts_no_dist() -> bool:
    import inspect

    import torch.distributed.checkpoint as dcp

    return "no_dist" in inspect.signature(dcp.load).parameters


def dcp_model_files(dcp_dir_or_metadata: str) -> set[str]:
    """Relative paths of the ``.distcp`` files holding model tensors (from the checkpoint's ``.metadata``)."""
    import pickle

    path = dcp_dir_or_metadata
    if os.path.isdir(path):
        path = os.path.join(path, ".metadata")
    with open(path, "rb") as f:
        metadata = pickle.load(f)  # torch.distributed.checkpoint's own metadata format (a pickle)
    files = set()
    for index, info in (metadata.storage_data or {}).items():
        if index.fqn.startswith("model."):
            files.add(info.relative_path)
    return files


def load_state(path: str) -> dict:
    """Model tensors from a step folder (``model_and_optim/``), a DCP folder, or a plain state-dict file."""
    import torch

    if os.path.isdir(path):
        for candidate in (os.path.join(path, "model_and_optim"), path):
            if os.path.exists(os.path.join(candidate, ".metadata")):
                return load_dcp_model_state(candidate)
        raise ConversionError(f"{path} holds neither model_and_optim/.metadata nor .metadata (an OLMo-core "
                              "distributed checkpoint) nor is it a state-dict file")
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        return _strip_prefix(load_file(path))
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]
    return _strip_prefix(dict(state))


def read_experiment_config(path: str | None) -> dict:
    """The ``model`` section of an OLMo-core experiment ``config.json`` (or a bare TransformerConfig dict)."""
    if path is None or not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    return config.get("model", config) if isinstance(config, dict) else {}


# ================================================================================================ settings
def resolve_settings(model_cfg: dict, state: dict, repo_name: str | None = None, arch: str | None = None,
                     allow_approximate: bool = False) -> dict:
    """``{"arch", "fields", "approximations"}``: the registry id and depthbench config fields of the checkpoint.

    The architecture comes from ``arch``, else ``model.block.name`` (:data:`BLOCK_NAMES`), else the repository
    name, refined by the block's settings (the translators' refinements); its translator reads the rest.
    Raises :class:`ConversionError` naming every unrepresentable setting.
    """
    from depthbench.hub.names import parse_repo_name

    problems: list[str] = []
    approximations: list[str] = []
    block = model_cfg.get("block") or {}
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
    translator = translator_for(arch)

    # ---- shape: config first, tensors second (the study's 16 heads when neither says)
    emb = state.get("embeddings.weight")
    vocab, d = (tuple(emb.shape) if emb is not None else (model_cfg.get("vocab_size"), model_cfg.get("d_model")))
    layers = sorted({int(m[1]) for k in state if (m := re.match(r"blocks\.(\d+)\.", k))})
    n_layers = model_cfg.get("n_layers") or (layers[-1] + 1 if layers else None)
    mixer = block.get("sequence_mixer") or block.get("attention") or {}
    heads = mixer.get("n_heads") or 16
    kv_heads = mixer.get("n_kv_heads") or heads
    head_dim = mixer.get("head_dim") or (d // heads if d else None)
    w1 = state.get("blocks.0.feed_forward.w1.weight", state.get("blocks.0.feed_forward.feed_forward.w1.weight"))
    ffn = lookup(block, "feed_forward", "hidden_size") or (w1.shape[0] if w1 is not None else None)
    norm = block.get("layer_norm") or {}
    head_norm = lookup(model_cfg, "lm_head", "layer_norm") or norm
    rope = mixer.get("rope") or {}
    fields: dict[str, Any] = {
        "vocab_size": vocab, "hidden_size": d, "num_hidden_layers": n_layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": head_dim, "intermediate_size": ffn,
        "rms_norm_eps": norm.get("eps", 1e-6), "rope_theta": rope.get("theta", 10000),
        "tie_word_embeddings": bool(model_cfg.get("tie_word_embeddings", False)),
        "max_position_embeddings": 2048,
    }
    # ---- refusals common to every block
    for key, bad, what in ((mixer.get("qk_norm"), lambda v: v, "QK-norm (block.sequence_mixer.qk_norm)"),
                           (mixer.get("bias"), lambda v: v, "attention biases (block.sequence_mixer.bias)"),
                           (mixer.get("gate"), lambda v: v, "gated attention (block.sequence_mixer.gate)"),
                           (mixer.get("sliding_window"), lambda v: v, "sliding-window attention"),
                           (rope.get("scaling"), lambda v: v, "RoPE scaling (rope.scaling)"),
                           (lookup(block, "feed_forward", "bias"), lambda v: v, "MLP biases (feed_forward.bias)"),
                           (norm.get("bias"), lambda v: v, "norm biases (layer_norm.bias)"),
                           (block.get("feed_forward_moe"), lambda v: v, "mixture-of-experts feed-forward")):
        if key is not None and bad(key):
            problems.append(what)
    activation = lookup(block, "feed_forward", "activation", default="silu")
    if activation not in ("silu", None):
        problems.append(f"feed_forward.activation={activation!r} (depthbench uses SwiGLU with silu)")
    norm_name = norm.get("name", "rms")
    fields["norm_type"] = (("layernorm" if norm_name in LAYER_NORM_NAMES else "rmsnorm") if "name" in norm
                           else translator.unnamed_norm_type)
    head_name = head_norm.get("name", norm_name)
    if (head_name in LAYER_NORM_NAMES) != (fields["norm_type"] == "layernorm"):
        problems.append(f"lm_head.layer_norm.name={head_name!r} differs from block.layer_norm.name={norm_name!r}: "
                        "depthbench uses one norm type for every norm")
    if head_norm.get("eps", fields["rms_norm_eps"]) != fields["rms_norm_eps"] and translator.head_eps_must_match:
        problems.append(f"lm_head.layer_norm.eps={head_norm.get('eps')} differs from the block norms' eps "
                        f"{fields['rms_norm_eps']}: depthbench uses one eps")
    for key in ("attention_residual_alpha", "feed_forward_residual_alpha"):
        if block.get(key) not in (None, 1.0, 1) and not translator.residual_alpha_allowed:
            problems.append(f"block.{key}={block.get(key)} (residual scaling outside depth-muP/CompleteP)")

    # ---- architecture settings (HC's may change the id: its kind names HC or mHC)
    arch = translator.settings(block, state, fields, problems, approximations) or arch
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size") if not fields[k]]
    if missing:
        problems.append(f"shape fields not found in config.json or the tensors: {', '.join(missing)}")
    if problems:
        raise ConversionError("cannot convert this checkpoint exactly; unsupported setting(s): " + "; ".join(problems))
    if approximations and not allow_approximate:
        raise ConversionError("this conversion is not exact: " + " | ".join(approximations)
                              + ". Pass --allow-approximate (allow_approximate=True) to convert anyway; the model "
                                "card records the difference")
    return {"arch": arch, "fields": fields, "approximations": approximations}


# ================================================================================================ mapping
def _expand(pattern: str, n_layers: int) -> list[tuple[int | None, str]]:
    return [(i, pattern.format(i=i)) for i in range(n_layers)] if "{i}" in pattern else [(None, pattern)]


def map_state(arch: str, state: dict, n_layers: int, n_streams: int = 4, liger: bool = False) -> dict:
    """OLMo-core tensors -> depthbench tensors for ``arch`` (``n_streams`` and ``liger``: mHC's connectors, see
    :class:`~depthbench.hub.translators.ManifoldHyperConnections`). Raises naming every unconsumed source key."""
    import torch

    translator = translator_for(arch)
    source = {k: v for k, v in state.items() if not ALIAS_RE.match(k)}
    for key in [k for k in source if CONSTANT_RE.match(k)]:
        source.pop(key)
    source = translator.rename_from_olmo(source, n_layers)
    out: dict[str, torch.Tensor] = {}
    rules = [(s, d, "") for s, d in KEY_MAP] + list(translator.key_map)
    for src_pattern, dst_pattern, transform in rules:
        for (i, src) in _expand(src_pattern, n_layers):
            if src not in source:
                continue
            value = source.pop(src)
            if transform == "T":
                value = value.t().contiguous()
            elif transform == "flat":
                value = value.reshape(-1)
            out[dst_pattern.format(i=i) if i is not None else dst_pattern] = value
    out.update(translator.tensors_from_olmo(source, n_layers, n_streams, liger))
    if source:
        raise ConversionError(f"{len(source)} checkpoint tensor(s) have no place in depthbench's {arch}: "
                              + ", ".join(sorted(source)[:12]) + (" ..." if len(source) > 12 else ""))
    return out


def to_olmo_state(arch: str, state: dict, n_layers: int, n_streams: int = 4) -> dict:
    """The inverse of :func:`map_state` for exact settings (depthbench tensors -> OLMo-core names; mHC's native
    backend); used to test the key-mapping round trip for the architectures upstream OLMo-core does not build."""
    translator = translator_for(arch)
    state = dict(state)
    out = {}
    rules = [(s, d, "") for s, d in KEY_MAP] + list(translator.key_map)
    for src_pattern, dst_pattern, transform in rules:
        for (i, dst) in _expand(dst_pattern, n_layers):
            if dst not in state:
                continue
            value = state.pop(dst)
            src = src_pattern.format(i=i) if i is not None else src_pattern
            if transform == "T":
                value = value.t().contiguous()
            elif transform == "flat":
                value = value.reshape(1, -1)
            out[src] = value
    out.update(translator.tensors_to_olmo(state, n_layers, n_streams))
    out = translator.rename_to_olmo(out)
    if state:
        raise ConversionError(f"no OLMo-core name for: {', '.join(sorted(state))}")
    return out


# ================================================================================================ convert
def download_release(repo_id: str, step: int | None, cache_dir: str | None = None,
                     revision: str | None = None, endpoint: str | None = None) -> tuple[str, int]:
    """Fetch what a conversion needs from a release repository; returns (local snapshot folder, step).

    ``endpoint`` overrides ``HF_ENDPOINT`` (a mirror, or the tests' loopback Hub); ``cache_dir`` the Hub cache.
    """
    from huggingface_hub import HfApi, snapshot_download

    api = HfApi(endpoint=endpoint)
    files = api.list_repo_files(repo_id, revision=revision)
    steps = sorted({int(m[1]) for f in files if (m := re.match(r"^step(\d+)/", f))})
    if not steps:
        raise ConversionError(f"{repo_id} has no step<N>/ folders: is it one of the study's OLMo-core releases?")
    if step is None:
        step = steps[-1]
    if step not in steps:
        raise ConversionError(f"{repo_id} has no step{step}/; available steps: {', '.join(map(str, steps))}")
    prefix = f"step{step}/"
    meta_patterns = [f"{prefix}config.json", f"{prefix}model_and_optim/.metadata", "tokenizer/*"]
    local = snapshot_download(repo_id, revision=revision, allow_patterns=meta_patterns, cache_dir=cache_dir,
                              endpoint=endpoint)
    metadata = os.path.join(local, prefix, "model_and_optim", ".metadata")
    if not os.path.exists(metadata):
        raise ConversionError(f"{repo_id}: {prefix}model_and_optim/.metadata is missing")
    needed = [f"{prefix}model_and_optim/{name}" for name in sorted(dcp_model_files(metadata))]
    local = snapshot_download(repo_id, revision=revision, allow_patterns=meta_patterns + needed, cache_dir=cache_dir,
                              endpoint=endpoint)
    return local, step


def convert(source: str, output_dir: str, step: int | None = None, arch: str | None = None,
            config_path: str | None = None, tokenizer_dir: str | None = None, allow_approximate: bool = False,
            repo_name: str | None = None, revision: str | None = None, overwrite: bool = False,
            endpoint: str | None = None, hub_cache_dir: str | None = None) -> str:
    """Convert ``source`` (a Hub release id, a local step/release folder, or a state-dict file) into
    ``output_dir``; returns ``output_dir``. See the module docstring."""
    import shutil

    from depthbench.hub.cards import write_card
    from depthbench.registry import build_model

    if os.path.exists(output_dir) and os.listdir(output_dir) and not overwrite:
        raise ConversionError(f"{output_dir} exists and is not empty; choose another folder or pass --overwrite")
    is_hub = not os.path.exists(source) and re.fullmatch(r"[\w.-]+/[\w.-]+", source) is not None
    source_repo = source if is_hub else (repo_name or os.path.basename(os.path.abspath(source)))
    if is_hub:
        local, step = download_release(source, step, revision=revision, endpoint=endpoint, cache_dir=hub_cache_dir)
        step_dir = os.path.join(local, f"step{step}")
        tokenizer_dir = tokenizer_dir or os.path.join(local, "tokenizer")
    elif os.path.isdir(source) and step is not None and os.path.isdir(os.path.join(source, f"step{step}")):
        step_dir = os.path.join(source, f"step{step}")  # a local copy of a whole release
        tokenizer_dir = tokenizer_dir or os.path.join(source, "tokenizer")
    else:
        step_dir = source
    state = load_state(step_dir)
    model_cfg = read_experiment_config(config_path or (os.path.join(step_dir, "config.json")
                                                       if os.path.isdir(step_dir) else None))
    settings = resolve_settings(model_cfg, state, repo_name=source_repo, arch=arch,
                                allow_approximate=allow_approximate)
    fields = settings["fields"]
    block = model_cfg.get("block") or {}
    mapped = map_state(settings["arch"], state, fields["num_hidden_layers"],
                       **translator_for(settings["arch"]).map_options(block, fields))
    import torch

    model = build_model(settings["arch"], **fields)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(mapped) - {k for k in expected if k == "lm_head.weight"
                                                     and fields["tie_word_embeddings"]})
    unexpected = sorted(set(mapped) - set(expected))
    if missing or unexpected:
        raise ConversionError(f"the checkpoint does not match depthbench's {settings['arch']}: missing "
                              f"{missing[:8]}, unexpected {unexpected[:8]}")
    for key, value in mapped.items():
        if tuple(value.shape) != tuple(expected[key].shape):
            raise ConversionError(f"{key}: checkpoint shape {tuple(value.shape)} != depthbench's "
                                  f"{tuple(expected[key].shape)} (check the heads/shape settings)")
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in mapped.items()}, strict=False)
    model.eval()
    if overwrite and os.path.isdir(output_dir):
        shutil.rmtree(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    with torch.no_grad():
        model.save_pretrained(output_dir, safe_serialization=True)
    if tokenizer_dir and os.path.isdir(tokenizer_dir):
        for file in os.listdir(tokenizer_dir):
            if os.path.isfile(os.path.join(tokenizer_dir, file)):
                shutil.copy2(os.path.join(tokenizer_dir, file), os.path.join(output_dir, file))
    record = {"source_repo": source_repo, "step": step, "arch": settings["arch"], "fields": fields,
              "approximations": settings["approximations"], "block_name": block.get("name")}
    with open(os.path.join(output_dir, "depthbench_conversion.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    from depthbench.hub.names import converted_repo_name

    write_card(output_dir, repo_id=converted_repo_name(source_repo) if "/" in source_repo else None,
               source={"repo": source_repo, "step": step}, approximations=settings["approximations"])
    return output_dir


def from_released(repo_id: str, step: int | None = None, cache_dir: str | None = None,
                  allow_approximate: bool = False, endpoint: str | None = None, hub_cache_dir: str | None = None,
                  **from_pretrained_kwargs):
    """A released model of the study as a depthbench model, converted once into the local cache.

    ``depthbench.from_released("aspect-ratio-scaling/preln-lr2e-3-llama-400M-L24-pretrain", step=7600)``. The
    conversion lives in ``$HF_HOME/depthbench/converted/<repo>/step<N>`` (``cache_dir`` to change) and is reused.
    ``endpoint`` / ``hub_cache_dir`` override ``HF_ENDPOINT`` and the Hub download cache.
    """
    from huggingface_hub import constants
    from transformers import AutoModelForCausalLM

    from depthbench.registry import register_auto_classes

    register_auto_classes()  # idempotent: the Auto classes know every architecture below

    if step is None:
        _, step = download_release(repo_id, None, endpoint=endpoint, cache_dir=hub_cache_dir)
    root = cache_dir or os.path.join(constants.HF_HOME, "depthbench", "converted")
    target = os.path.join(root, repo_id.replace("/", "--"), f"step{step}")
    if not os.path.isfile(os.path.join(target, "depthbench_conversion.json")):
        tmp = target + ".tmp"
        convert(repo_id, tmp, step=step, allow_approximate=allow_approximate, overwrite=True, endpoint=endpoint,
                hub_cache_dir=hub_cache_dir)
        if os.path.isdir(target):
            import shutil

            shutil.rmtree(target)
        os.replace(tmp, target)
    return AutoModelForCausalLM.from_pretrained(target, **from_pretrained_kwargs)


# ================================================================================================ CLI
def run_cli(args: argparse.Namespace) -> int:
    out = convert(args.source, args.output, step=args.step, arch=args.arch, config_path=args.config,
                  tokenizer_dir=args.tokenizer, allow_approximate=args.allow_approximate, repo_name=args.repo_name,
                  revision=args.revision, overwrite=args.overwrite)
    with open(os.path.join(out, "depthbench_conversion.json"), encoding="utf-8") as f:
        record = json.load(f)
    print(f"converted {record['source_repo']} (step {record['step']}) -> {out} as {record['arch']}")
    return 0


def register_cli(subparsers) -> None:
    """Add ``depthbench convert``."""
    p = subparsers.add_parser(
        "convert", help="convert a released OLMo-core checkpoint of the study into depthbench's HF format",
        description="Convert aspect-ratio-scaling/NAME (downloading only the model part of a step), a local step "
                    "folder (config.json + model_and_optim/) or a plain state dict into a from_pretrained folder "
                    "(safetensors, remote code, tokenizer, model card). Unrepresentable settings are refused.")
    p.add_argument("source", help="Hub repo id, local step/release folder, or state-dict file (.pt/.safetensors)")
    p.add_argument("-o", "--output", required=True, help="output folder")
    p.add_argument("--step", type=int, help="training step (default: the last one in the repository)")
    p.add_argument("--arch", help="registry id, when neither config.json nor the name gives it")
    p.add_argument("--config", help="experiment config.json to read the settings from (plain state dicts)")
    p.add_argument("--tokenizer", help="tokenizer folder to copy (default: the release's tokenizer/)")
    p.add_argument("--repo-name", help="release name to read settings from for a local source")
    p.add_argument("--revision", help="Hub revision of the release repository")
    p.add_argument("--allow-approximate", action="store_true",
                   help="convert settings that are exact only up to a documented numerical difference")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    p.set_defaults(func=run_cli)

