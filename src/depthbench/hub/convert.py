"""``depthbench convert``: the study's released OLMo-core checkpoints -> depthbench's Hugging Face format.

The DepthBench study (arXiv 2609.32534) released its models in the ``aspect-ratio-scaling`` organisation as raw
checkpoints of its OLMo-core fork (folders ``step0``, ``step3000``, ..., ``step7600``, each an experiment
``config.json`` plus ``model_and_optim/``, a ``torch.distributed.checkpoint`` folder with the optimizer state, and
a ``tokenizer/`` folder). Nothing loads them with ``from_pretrained``, and OLMo-core's own HF converter maps every
residual variant to a plain Llama, silently dropping their semantics. This module converts them exactly, or refuses.

    depthbench convert aspect-ratio-scaling/hc-lr2e-3-llama-400M-L24-pretrain --step 7600 -o hc-L24
    depthbench convert path/to/hc-...-pretrain/step7600 -o out   # a local step folder (name, tokenizer from above)
    depthbench convert model.pt --arch pre_ln --config config.json -o out   # a plain OLMo-core state dict

    import depthbench
    model = depthbench.from_released("aspect-ratio-scaling/preln-lr2e-3-llama-400M-L24-pretrain", step=7600)

* **Download** (Hub ids, :mod:`depthbench.hub.release_files`): only ``step<N>/config.json``, the checkpoint's
  ``.metadata``, the ``.distcp`` files that hold model tensors, and ``tokenizer/`` are fetched. The ``.metadata``
  pickle is read with an allow-list unpickler (a crafted file runs nothing); a missing or truncated shard is named.
* **Settings** (:mod:`depthbench.hub.settings` and each architecture's translator in
  :mod:`depthbench.hub.translators`) come from the checkpoint's ``config.json``; missing fields fall back to the
  repository name (architecture) and the study's shape rule (16 heads). Every setting depthbench cannot represent
  is refused with a :class:`ConversionError` naming it. EOS / PAD / BOS ids and the context length come from the
  experiment config (``dataset.tokenizer``, ``dataset.sequence_length``) and go into ``config.json`` and
  ``generation_config.json``, so ``generate()`` stops at EOS.
* **Readout** of HC and native mHC: the fork's revisions differ and ``config.json`` cannot tell them apart, so
  ``readout=`` (``--readout sum|sum_norm``) chooses it, or :mod:`depthbench.hub.readout` decides it from the loss of
  both readouts on a built-in text sample, printing both figures and recording them; unclear evidence (an untrained
  checkpoint) stops the conversion asking for ``--readout``.
* **Key mapping** (:data:`KEY_MAP` below for the backbone, each translator for the rest; documented in
  ``docs/hub.md``): OLMo-core names -> depthbench names (HF Llama's for the backbone). Every source tensor must be
  consumed and every target tensor filled, or the conversion fails naming the keys.
* **dtype**: the checkpoint's (its embedding's), unless ``dtype=`` (``--dtype``) says otherwise.

Output (written into a temporary sibling folder and renamed into place, so a failed conversion leaves nothing
half-written): ``save_pretrained`` (safetensors + remote code), the tokenizer, a model card naming the source
repository and step with the conversion notes, and ``depthbench_conversion.json`` (source, step, settings, notes;
read by ``depthbench publish``, which re-publishes a conversion as ``<name>-hf``).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from typing import Any

from depthbench import atomic
from depthbench.hub.readout import decide_readout, load_tokenizer
from depthbench.hub.release_files import (  # noqa: F401  (re-exported: the module's public reading functions)
    dcp_model_files,
    download_release,
    is_hub_id,
    load_dcp_model_state,
    load_state,
    locate_hub,
    locate_local,
    read_experiment_config,
    read_release_config,
)
from depthbench.hub.settings import LAYER_NORM_NAMES, release_fields, resolve_settings  # noqa: F401
from depthbench.hub.translators import (
    ALIAS_RE,
    CONSTANT_RE,
    ConversionError,
    block_of,
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
CONVERSION_RECORD = "depthbench_conversion.json"
DTYPES = ("float32", "bfloat16", "float16")


# ================================================================================================ mapping
def _expand(pattern: str, n_layers: int) -> list[tuple[int | None, str]]:
    return [(i, pattern.format(i=i)) for i in range(n_layers)] if "{i}" in pattern else [(None, pattern)]


def map_state(arch: str, state: dict, n_layers: int, n_streams: int = 4, liger: bool = False,
              pre_eps: float = 0.0) -> dict:
    """OLMo-core tensors -> depthbench tensors for ``arch`` (``n_streams``, ``liger`` and ``pre_eps``: mHC's
    connectors, see :class:`~depthbench.hub.translators.ManifoldHyperConnections`). Raises naming every unconsumed
    source key."""
    translator = translator_for(arch)
    source = {k: v for k, v in state.items() if not ALIAS_RE.match(k) and not CONSTANT_RE.match(k)}
    source = translator.rename_from_olmo(source, n_layers)
    out = {}
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
    out.update(translator.tensors_from_olmo(source, n_layers, n_streams, liger, pre_eps))
    if source:
        raise ConversionError(f"{len(source)} checkpoint tensor(s) have no place in depthbench's {arch}: "
                              + ", ".join(sorted(source)[:12]) + (" ..." if len(source) > 12 else ""))
    return out


def to_olmo_state(arch: str, state: dict, n_layers: int, n_streams: int = 4) -> dict:
    """The inverse of :func:`map_state` (depthbench tensors -> OLMo-core names; mHC's native backend)."""
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


# ================================================================================================ the model
def build_converted(arch: str, fields: dict[str, Any], mapped: dict):
    """depthbench's ``arch`` with ``fields``, holding the mapped tensors (fp32); checks names and shapes."""
    from depthbench.registry import build_model

    model = build_model(arch, **fields)
    expected = model.state_dict()
    tied = {"lm_head.weight"} if fields.get("tie_word_embeddings") else set()
    missing, unexpected = sorted(set(expected) - set(mapped) - tied), sorted(set(mapped) - set(expected))
    if missing or unexpected:
        raise ConversionError(f"the checkpoint does not match depthbench's {arch}: missing {missing[:8]}, "
                              f"unexpected {unexpected[:8]}")
    for key, value in mapped.items():
        if tuple(value.shape) != tuple(expected[key].shape):
            raise ConversionError(f"{key}: checkpoint shape {tuple(value.shape)} != depthbench's "
                                  f"{tuple(expected[key].shape)} (check the heads/shape settings)")
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in mapped.items()}, strict=False)
    return model.eval()


def resolve_dtype(dtype, state: dict):
    """The converted model's dtype: ``dtype`` (a ``torch.dtype`` or one of :data:`DTYPES`), else the checkpoint's
    (its embedding's)."""
    import torch

    if dtype is None:
        emb = state.get("embeddings.weight")
        return emb.dtype if emb is not None else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ConversionError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return getattr(torch, dtype)


def _dtype_notes(mapped: dict, dtype) -> list[str]:
    rounded = sorted(k for k, v in mapped.items() if v.is_floating_point() and v.element_size() > dtype.itemsize)
    if not rounded:
        return []
    return [f"{len(rounded)} tensor(s) held in higher precision than {str(dtype)[6:]} (e.g. {rounded[0]}) are "
            f"stored rounded to {str(dtype)[6:]}; --dtype float32 keeps them exactly"]


def _readout_note(field: str, evidence: dict) -> str:
    if evidence["decided_by"] == "evidence":
        losses = ", ".join(f"{k} {v:.4f}" for k, v in evidence["loss_nats_per_token"].items())
        return (f"{field}={evidence['chosen']!r}, decided from evidence: loss on the built-in sample "
                f"({evidence['tokens']} tokens) {losses} nats/token (rule: {evidence['rule']})")
    return f"{field}={evidence['chosen']!r}, chosen with --readout (readout=)"


# ================================================================================================ writing
def _check_output(output_dir: str, overwrite: bool) -> None:
    if os.path.exists(output_dir) and (not os.path.isdir(output_dir) or os.listdir(output_dir)) and not overwrite:
        raise ConversionError(f"{output_dir} exists and is not empty; choose another folder or pass --overwrite")


def write_atomically(output_dir: str, write) -> str:
    """``write(folder)`` into a temporary sibling of ``output_dir``, then rename it into place (replacing
    ``output_dir``); on any failure, interrupt included, the temporary folder is removed and ``output_dir`` is
    untouched."""
    output_dir = os.path.abspath(output_dir)
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(output_dir)}.partial-", dir=parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        write(tmp)
        if os.path.isdir(output_dir):
            shutil.rmtree(output_dir)
        os.replace(tmp, output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return output_dir


def _save(folder: str, model, tokenizer_dir: str | None, record: dict, notes: list[str]) -> None:
    import torch
    from transformers import GenerationConfig

    from depthbench.cards import write_card
    from depthbench.repo_names import converted_repo_name

    config = model.config
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                                               pad_token_id=config.pad_token_id)
    with torch.no_grad():
        model.save_pretrained(folder, safe_serialization=True)
    if tokenizer_dir and os.path.isdir(tokenizer_dir):
        for file in os.listdir(tokenizer_dir):
            if os.path.isfile(os.path.join(tokenizer_dir, file)):
                shutil.copy2(os.path.join(tokenizer_dir, file), os.path.join(folder, file))
    atomic.write_json(os.path.join(folder, CONVERSION_RECORD), record)
    write_card(folder, repo_id=converted_repo_name(record["source_repo"]),
               source={"repo": record["source_repo"], "step": record["step"]}, notes=notes)


# ================================================================================================ convert
def _locate(source: str, step, tokenizer_dir, repo_name, config_path, revision, endpoint, hub_cache_dir):
    if is_hub_id(source):
        return locate_hub(source, step, tokenizer_dir, config_path, revision=revision, endpoint=endpoint,
                          cache_dir=hub_cache_dir)
    if not os.path.exists(source):
        raise ConversionError(f"{source} is neither a local path nor a Hub repository id (owner/name)")
    return locate_local(source, step, tokenizer_dir, repo_name, config_path)


def convert(source: str, output_dir: str, step: int | None = None, arch: str | None = None,
            config_path: str | None = None, tokenizer_dir: str | None = None, repo_name: str | None = None,
            revision: str | None = None, overwrite: bool = False, endpoint: str | None = None,
            hub_cache_dir: str | None = None, readout: str | None = None, dtype=None) -> str:
    """Convert ``source`` (a Hub release id, a local release or step folder, or a state-dict file) into
    ``output_dir``; returns ``output_dir``. ``readout`` (``"sum"`` / ``"sum_norm"``) chooses the HC / native-mHC
    readout the config leaves open (default: decided from evidence); ``dtype`` the saved dtype (default: the
    checkpoint's). See the module docstring."""
    _check_output(output_dir, overwrite)
    src = _locate(source, step, tokenizer_dir, repo_name, config_path, revision, endpoint, hub_cache_dir)
    state = load_state(src.path)
    target_dtype = resolve_dtype(dtype, state)
    experiment = read_release_config(src.config_path)
    model_cfg = experiment.get("model", {})
    settings = resolve_settings(model_cfg, state, repo_name=src.repo, arch=arch)
    arch_id, fields, notes = settings["arch"], settings["fields"], settings["notes"]
    translator = translator_for(arch_id)
    tokenizer = functools.cache(lambda: load_tokenizer(src.tokenizer_dir))  # loaded only when needed
    extra, release_notes = release_fields(experiment, tokenizer)
    fields.update(extra)
    notes += release_notes
    mapped = map_state(arch_id, state, fields["num_hidden_layers"],
                       **translator.map_options(block_of(model_cfg), fields))
    evidence = decide_readout(translator, fields, readout, tokenizer, lambda f: build_converted(arch_id, f, mapped))
    if evidence:
        notes.insert(0, _readout_note(translator.readout_field, evidence))
    model = build_converted(arch_id, fields, mapped).to(target_dtype)
    notes += _dtype_notes(mapped, target_dtype)
    record = {"source_repo": src.repo, "step": src.step, "arch": arch_id, "fields": fields, "notes": notes,
              "block_name": block_of(model_cfg).get("name"), "dtype": str(target_dtype).replace("torch.", "")}
    return write_atomically(output_dir, lambda folder: _save(folder, model, src.tokenizer_dir, record, notes))


def _cache_name(step: int | None, readout: str | None, dtype) -> str:
    parts = [f"step{step}" if step is not None else "root"] + ([f"readout-{readout}"] if readout else [])
    return "-".join(parts + ([f"dtype-{str(dtype).replace('torch.', '')}"] if dtype is not None else []))


def from_released(repo_id: str, step: int | None = None, cache_dir: str | None = None, endpoint: str | None = None,
                  hub_cache_dir: str | None = None, readout: str | None = None, dtype=None,
                  **from_pretrained_kwargs):
    """A released model of the study as a depthbench model, converted once into the local cache.

    ``depthbench.from_released("aspect-ratio-scaling/preln-lr2e-3-llama-400M-L24-pretrain", step=7600)``. A
    repository storing its final checkpoint at the root (``config.json`` + ``model_and_optim/``) is converted from
    there (``step``: ``None`` or that checkpoint's final step). The conversion lives in
    ``$HF_HOME/depthbench/converted/<repo>/step<N>`` (``root`` when the step is not stated; ``cache_dir`` to
    change; ``readout`` and
    ``dtype``, as :func:`convert` takes them, are part of the folder name) and is reused; a failed conversion
    leaves no entry. ``dtype`` is also the loaded model's dtype. ``endpoint`` / ``hub_cache_dir`` override
    ``HF_ENDPOINT`` and the Hub download cache; other keywords go to ``from_pretrained``.
    """
    from huggingface_hub import constants
    from transformers import AutoModelForCausalLM

    from depthbench.registry import register_auto_classes

    register_auto_classes()  # idempotent: the Auto classes know every architecture below
    if step is None:
        _, step = download_release(repo_id, None, endpoint=endpoint, cache_dir=hub_cache_dir)
    root = cache_dir or os.path.join(constants.HF_HOME, "depthbench", "converted")
    target = os.path.join(root, repo_id.replace("/", "--"), _cache_name(step, readout, dtype))
    if not os.path.isfile(os.path.join(target, CONVERSION_RECORD)):
        convert(repo_id, target, step=step, overwrite=True, endpoint=endpoint, hub_cache_dir=hub_cache_dir,
                readout=readout, dtype=dtype)
    if dtype is not None:
        from_pretrained_kwargs.setdefault("dtype", resolve_dtype(dtype, {}))
    return AutoModelForCausalLM.from_pretrained(target, **from_pretrained_kwargs)
