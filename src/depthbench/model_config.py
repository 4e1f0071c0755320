"""The model a run config asks for: the architecture id and its validated HF config, next to the registry.

``model.config_path`` (an HF ``config.json`` or a folder holding one), else ``model.arch`` + ``model.shape``
(``depthbench.shapes``); ``model.fields`` override both and are checked against the architecture's config class.
The trainer receives the result and builds the model from it.

    >>> arch, config = resolve_model_config(cfg.model, shards, seq_len=cfg.data.seq_len)
"""

from __future__ import annotations

import difflib
import inspect
import os
from typing import TYPE_CHECKING, Any, Protocol

from depthbench import atomic, registry, runs
from depthbench.config import ModelConfig, RunConfigError
from depthbench.shapes import get_shape

if TYPE_CHECKING:  # loads transformers
    from transformers import PretrainedConfig

#: Keys of a saved ``config.json`` that describe the file, not the model.
_FILE_KEYS = ("architectures", "auto_map", "transformers_version", "torch_dtype", "dtype")


class TokenData(Protocol):
    """What the model config needs to know of the training data (``depthbench.data.TokenShards`` has it)."""

    data_dir: str
    vocab_size: int
    eos_token_id: int
    pad_token_id: int | None


def resolve_model_config(model: ModelConfig, data: TokenData, *, seq_len: int) -> tuple[str, PretrainedConfig]:
    """``(architecture id, HF config)`` of the model to train on ``data`` with windows of ``seq_len`` tokens. The
    vocabulary size is ``model.vocab_size``, else the one of the config file / shape / fields, else the data's
    tokenizer size; the tokenizer must fit into it. EOS and PAD ids default to the data's.

    Raises:
        RunConfigError: Unknown architecture/shape/field, the tokenizer's vocabulary exceeds the model's, or
            ``seq_len`` exceeds the model's ``max_position_embeddings`` (the message says what is allowed).
    """
    arch, fields = model.arch, {}
    if model.init_from:
        arch, fields = _from_init_folder(model)
    elif model.config_path:
        arch, fields = _from_config_file(model.config_path, arch)
    elif model.shape:
        fields = dict(get_shape(model.shape).config_fields())
    if arch is None:
        raise RunConfigError("model.arch is required unless model.config_path names a depthbench config")
    config_class = registry.get(arch).config_class
    check_field_names(config_class, model.fields)
    fields.update(model.fields)
    vocab = model.vocab_size or fields.get("vocab_size") or data.vocab_size
    if vocab < data.vocab_size:
        raise RunConfigError(
            f"the tokenizer's vocabulary ({data.vocab_size} tokens, {os.path.join(data.data_dir, runs.DATA_META)}) "
            f"exceeds the model's vocab_size={vocab}; use a model with vocab_size >= {data.vocab_size} or "
            "re-tokenize the data")
    fields["vocab_size"] = vocab
    fields.setdefault("eos_token_id", data.eos_token_id)
    fields.setdefault("pad_token_id", data.pad_token_id)
    try:
        config = config_class(**fields)
    except (TypeError, ValueError) as exc:
        raise RunConfigError(f"invalid model config for {arch!r}: {exc}") from exc
    if seq_len > config.max_position_embeddings:
        raise RunConfigError(
            f"data.seq_len={seq_len} exceeds the model's max_position_embeddings={config.max_position_embeddings}; "
            "lower data.seq_len or set model.fields.max_position_embeddings")
    return arch, config


def _from_config_file(config_path: str, arch: str | None) -> tuple[str | None, dict[str, Any]]:
    """``(architecture, config fields)`` of an HF ``config.json`` (the architecture from its ``model_type`` unless
    ``arch`` is given)."""
    path = os.path.join(config_path, "config.json") if os.path.isdir(config_path) else config_path
    if not os.path.isfile(path):
        raise RunConfigError(f"model.config_path: {path} does not exist")
    model_type, fields = _config_json_fields(path, "model.config_path")
    if arch is None:
        matches = [a.id for a in registry.ARCHITECTURES.values() if a.model_type == model_type]
        if not matches:
            raise RunConfigError(f"model.config_path {path}: model_type {model_type!r} is not a depthbench "
                                 f"architecture; set model.arch (one of {', '.join(registry.arch_ids())})")
        arch = matches[0]
    return arch, fields


def _config_json_fields(path: str, key: str) -> tuple[Any, dict[str, Any]]:
    """``(model_type, config fields)`` of the HF ``config.json`` at ``path`` (named by the run-config ``key`` in
    errors), without the keys that describe the file rather than the model (:data:`_FILE_KEYS`)."""
    try:
        fields = atomic.read_json(path)
    except ValueError as exc:
        raise RunConfigError(f"{key}: {exc}") from None
    if not isinstance(fields, dict):
        raise RunConfigError(f"{key}: {path} does not hold a JSON object (an HF config.json)")
    model_type = fields.pop("model_type", None)
    for name in _FILE_KEYS:
        fields.pop(name, None)
    return model_type, fields


def _from_init_folder(model: ModelConfig) -> tuple[str, dict[str, Any]]:
    """``(architecture, config fields)`` of ``model.init_from``'s ``config.json``, after checking that
    ``model.arch`` / ``model.shape`` (when given) agree with it (``depthbench.training.init_from``)."""
    folder = init_folder(model.init_from)
    path = os.path.join(folder, "config.json")
    model_type, fields = _config_json_fields(path, "model.init_from")
    matches = [a.id for a in registry.ARCHITECTURES.values() if a.model_type == model_type]
    if not matches:
        raise RunConfigError(f"model.init_from {folder}: model_type {model_type!r} is not a depthbench architecture "
                             "(upcycle a pretrained model into one first: depthbench upcycle SRC -o DIR --arch ARCH)")
    check_agrees(folder, matches[0], fields, model.arch, model.shape)
    return matches[0], fields


def init_folder(path: str) -> str:
    """The model folder of ``model.init_from``: ``path`` itself, or a training checkpoint's ``hf/`` export."""
    if not os.path.isdir(path):
        raise RunConfigError(f"model.init_from={path!r} is not a folder: give a depthbench checkpoint folder (written "
                             "by `depthbench upcycle`, a run's final/, or a checkpoint's hf/)")
    export = os.path.join(path, runs.CHECKPOINT_EXPORT)
    if not os.path.isfile(os.path.join(path, "config.json")) and os.path.isfile(os.path.join(export, "config.json")):
        path = os.path.join(path, runs.CHECKPOINT_EXPORT)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise RunConfigError(f"model.init_from={path!r} holds no config.json: give a depthbench checkpoint folder "
                             "(written by `depthbench upcycle`, a run's final/, or a checkpoint's hf/)")
    if not weight_files(path):
        raise RunConfigError(f"model.init_from={path!r} holds no *.safetensors weights: give a checkpoint folder "
                             "saved with save_pretrained(safe_serialization=True)")
    return path


def weight_files(folder: str) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))


def check_agrees(folder: str, arch_in_folder: str, folder_fields: dict, arch: str | None, shape: str | None) -> None:
    """Refuse a run config whose ``model.arch`` / ``model.shape`` disagree with the init folder, naming both."""
    if arch is not None and arch != arch_in_folder:
        raise RunConfigError(f"model.init_from {folder} holds a {arch_in_folder} model but model.arch is {arch!r}: "
                             f"drop model.arch (the folder's architecture is used) or set it to {arch_in_folder!r}")
    if shape is not None:
        try:
            wanted = get_shape(shape).config_fields()
        except ValueError as exc:
            raise RunConfigError(f"model.shape={shape!r}: {exc}") from None
        differ = [f"{k} {folder_fields.get(k)!r} in the folder, {v!r} in shape {shape}" for k, v in wanted.items()
                  if k != "vocab_size" and folder_fields.get(k) != v]
        if differ:
            raise RunConfigError(f"model.init_from {folder} does not have model.shape={shape!r}: "
                                 + "; ".join(differ) + " (drop model.shape: the folder's sizes are used)")


def check_field_names(config_class: type, fields: dict) -> None:
    """Refuse ``model.fields`` keys the architecture's config class does not know (a typo would otherwise be
    stored as an unused attribute and the default size trained)."""
    known: set[str] = set()
    for klass in config_class.__mro__:
        if "__init__" in vars(klass):
            known |= {name for name, p in inspect.signature(klass.__init__).parameters.items()
                      if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and name != "self"}
    known |= set(config_class().to_dict())
    for key in fields:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise RunConfigError(f"unknown config key 'model.fields.{key}': {config_class.__name__} has no field "
                                 f"{key!r}; {hint}valid fields: {', '.join(sorted(known))}")
