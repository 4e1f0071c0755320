"""Reading the study's releases: where a release's files are (local or on the Hub), its experiment config, and the
model tensors of its ``torch.distributed.checkpoint`` folder, without running anything a file asks for.

A release (DepthBench, arXiv 2609.32534; the trainer of the study's OLMo-core fork writes it) is a repository
``<name>`` holding ``stepN/config.json`` (the whole experiment config), ``stepN/model_and_optim/`` (a distributed
checkpoint: ``.metadata`` plus ``__R_S.distcp`` files mixing model and optimizer tensors) and ``tokenizer/``.

* :func:`read_dcp_metadata`: a checkpoint's ``.metadata`` is a pickle, and ``depthbench.from_released`` downloads it
  from any repository a user names, so it is read with :class:`MetadataUnpickler`, an allow-list unpickler that
  builds only the checkpoint-metadata classes of ``torch.distributed.checkpoint`` (and OLMo-core's copy of its
  storage record) and refuses everything else before it is called.
* :func:`check_shards`: every ``.distcp`` file holding a model tensor must exist and be long enough for what the
  metadata says it holds; a missing or truncated one is named (torch's own error for it is a ``CheckpointException``,
  a ``BaseException``, with a traceback per rank).
* :func:`locate_source`: a Hub id, a local release folder, a local ``stepN/`` folder (its release name and
  tokenizer come from the folder above it) or a state-dict file.
"""

from __future__ import annotations

import os
import pickle
import re
from dataclasses import dataclass

from depthbench import atomic
from depthbench.hub.translators import ConversionError

#: (module, name) pairs a checkpoint's ``.metadata`` may build: torch's checkpoint-metadata dataclasses, the dtype /
#: layout / memory-format constants they hold, ``torch.Size`` and path objects. Nothing callable beyond
#: constructors of plain records and ``torch.serialization._get_layout`` (a lookup by name).
_DCP_METADATA = "torch.distributed.checkpoint.metadata"
ALLOWED_METADATA_GLOBALS = {
    (_DCP_METADATA, name) for name in ("Metadata", "MetadataIndex", "TensorStorageMetadata", "BytesStorageMetadata",
                                       "ChunkStorageMetadata", "TensorProperties", "StorageMeta",
                                       "_MEM_FORMAT_ENCODING")
} | {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
     ("torch.serialization", "_get_layout"), ("collections", "OrderedDict"), ("builtins", "set"),
     ("builtins", "frozenset"), ("pathlib", "PosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "PurePosixPath"),
     ("pathlib", "PureWindowsPath")}
#: Classes with the same fields stored under another module by writers other than torch's (OLMo-core's own
#: ``RemoteFileSystemWriter``): read as torch's, so no OLMo-core install is needed.
METADATA_ALIASES = {("olmo_core.distributed.checkpoint.filesystem", "_StorageInfo"):
                    ("torch.distributed.checkpoint.filesystem", "_StorageInfo")}


def _torch_constant(name: str) -> bool:
    import torch

    return isinstance(getattr(torch, name, None), (torch.dtype, torch.layout, torch.memory_format))


class RefusedGlobal(pickle.UnpicklingError):
    """A pickle asked for a global that is not part of a checkpoint's metadata (refused before it is looked up)."""


class MetadataUnpickler(pickle.Unpickler):
    """Unpickles a distributed checkpoint's ``.metadata`` building only :data:`ALLOWED_METADATA_GLOBALS`, torch's
    dtype/layout/memory-format constants and :data:`METADATA_ALIASES`; any other global (a function a crafted file
    would call, say ``os.system``) raises before it is looked up, so nothing it names runs."""

    def find_class(self, module: str, name: str):
        module, name = METADATA_ALIASES.get((module, name), (module, name))
        if (module, name) in ALLOWED_METADATA_GLOBALS or (module == "torch" and _torch_constant(name)):
            return super().find_class(module, name)
        raise RefusedGlobal(f"global {module}.{name} is not part of a checkpoint's metadata")


def read_dcp_metadata(path: str):
    """The ``Metadata`` of a distributed checkpoint (``path``: the folder or its ``.metadata``), read with
    :class:`MetadataUnpickler`. Raises :class:`ConversionError` naming the file when it is missing, truncated or
    asks for anything but checkpoint metadata."""
    if os.path.isdir(path):
        path = os.path.join(path, ".metadata")
    if not os.path.isfile(path):
        raise ConversionError(f"{path} is missing: a distributed checkpoint needs its .metadata")
    try:
        with open(path, "rb") as f:
            metadata = MetadataUnpickler(f).load()
    except RefusedGlobal as exc:
        raise ConversionError(f"{path} is not a checkpoint's metadata, refused without running it: {exc}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as exc:
        raise ConversionError(f"{path} is truncated or corrupt ({type(exc).__name__}: {exc}); download it "
                              "again") from None
    if not hasattr(metadata, "state_dict_metadata"):
        raise ConversionError(f"{path} holds a {type(metadata).__name__}, not a checkpoint's Metadata")
    for info in (getattr(metadata, "storage_data", None) or {}).values():
        if not hasattr(info, "transform_descriptors"):  # written by an older torch or by OLMo-core's writer
            info.transform_descriptors = None
    return metadata


def dcp_model_files(dcp_dir_or_metadata: str) -> set[str]:
    """Relative paths of the ``.distcp`` files holding model tensors (from the checkpoint's ``.metadata``)."""
    metadata = read_dcp_metadata(dcp_dir_or_metadata)
    return {info.relative_path for index, info in (metadata.storage_data or {}).items()
            if index.fqn.startswith("model.")}


def check_shards(dcp_dir: str, metadata) -> None:
    """Every ``.distcp`` file holding a model tensor exists and is at least as long as the metadata says; raises
    :class:`ConversionError` naming the missing or truncated files."""
    needed: dict[str, int] = {}
    for index, info in (metadata.storage_data or {}).items():
        if index.fqn.startswith("model."):
            needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    bad = []
    for name, end in sorted(needed.items()):
        path = os.path.join(dcp_dir, name)
        if not os.path.isfile(path):
            bad.append(f"{path} is missing")
        elif os.path.getsize(path) < end:
            bad.append(f"{path} is truncated ({os.path.getsize(path)} bytes, the metadata needs {end})")
    if bad:
        raise ConversionError("the checkpoint is incomplete: " + "; ".join(bad) + "; download it again")


def load_dcp_model_state(dcp_dir: str) -> dict:
    """The model tensors (no optimizer state) of an OLMo-core ``model_and_optim/`` distributed checkpoint."""
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import StorageMeta, TensorStorageMetadata

    metadata = read_dcp_metadata(dcp_dir)
    check_shards(dcp_dir, metadata)

    class _Reader(dcp.FileSystemReader):
        """torch's reader with the metadata read once, by :func:`read_dcp_metadata` (never by ``pickle.load``)."""

        def read_metadata(self, *args, **kwargs):
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    state = {key[len("model."):]: torch.empty(meta.size, dtype=meta.properties.dtype)
             for key, meta in metadata.state_dict_metadata.items()
             if key.startswith("model.") and isinstance(meta, TensorStorageMetadata)}
    if not state:
        raise ConversionError(f"{dcp_dir}: no model.* tensors in the distributed checkpoint")
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": yes, it is
            warnings.filterwarnings("ignore", message=".*single process.*")
            dcp.load({"model": state}, storage_reader=_Reader(dcp_dir), **_no_dist())
    except (CheckpointException, RuntimeError, OSError, ValueError) as exc:  # CheckpointException: a BaseException
        raise ConversionError(f"{dcp_dir}: the distributed checkpoint could not be read ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    return state


def _no_dist() -> dict:
    import inspect

    import torch.distributed.checkpoint as dcp

    return {"no_dist": True} if "no_dist" in inspect.signature(dcp.load).parameters else {}


def _strip_prefix(state: dict) -> dict:
    if state and all(k.startswith("model.") for k in state):
        return {k[len("model."):]: v for k, v in state.items()}
    return state


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
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as exc:
        raise ConversionError(f"{path} is not a readable state-dict file ({type(exc).__name__}: {exc})") from None
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]
    return _strip_prefix(dict(state))


def read_release_config(path: str | None) -> dict:
    """The experiment ``config.json`` of a step (``{}`` when there is none); a bare ``TransformerConfig`` dict is
    returned as ``{"model": ...}``."""
    if path is None or not os.path.exists(path):
        return {}
    try:
        config = atomic.read_json(path)
    except ValueError as exc:  # the message names the file
        raise ConversionError(str(exc)) from None
    if not isinstance(config, dict):
        return {}
    return config if "model" in config else {"model": config}


def read_experiment_config(path: str | None) -> dict:
    """The ``model`` section of an OLMo-core experiment ``config.json`` (or a bare TransformerConfig dict)."""
    return read_release_config(path).get("model", {})


# ================================================================================================ where a release is
@dataclass
class Source:
    """Where one conversion reads from: the step folder (or state-dict file), its step, the release name, the
    tokenizer folder and the experiment config file (each ``None`` when there is none)."""

    path: str
    step: int | None
    repo: str
    tokenizer_dir: str | None
    config_path: str | None


STEP_RE = re.compile(r"^step(\d+)$")


def _existing_dir(path: str | None) -> str | None:
    return path if path and os.path.isdir(path) else None


def _steps_in(folder: str) -> list[int]:
    if not os.path.isdir(folder):
        return []
    return sorted(int(m[1]) for n in os.listdir(folder) if (m := STEP_RE.match(n)) and
                  os.path.isdir(os.path.join(folder, n)))


def locate_local(source: str, step: int | None, tokenizer_dir: str | None, repo_name: str | None,
                 config_path: str | None) -> Source:
    """A local release folder (``step``, default the last one), a ``stepN/`` folder (its release name and tokenizer
    come from the folder above it), or a checkpoint folder / state-dict file of its own."""
    path = os.path.abspath(source)
    steps = _steps_in(path)
    match = STEP_RE.match(os.path.basename(path))
    if steps and not os.path.isdir(os.path.join(path, "model_and_optim")):  # a local copy of a whole release
        step = steps[-1] if step is None else step
        if step not in steps:
            raise ConversionError(f"{source} has no step{step}/; available steps: {', '.join(map(str, steps))}")
        release, step_dir = path, os.path.join(path, f"step{step}")
    elif match and os.path.isdir(path):
        if step is not None and int(match[1]) != step:
            raise ConversionError(f"{source} is step {match[1]}, not --step {step}")
        release, step_dir, step = os.path.dirname(path), path, int(match[1])
    elif os.path.isdir(path) and is_root_stored(path):  # a release storing its final checkpoint at the root
        release, step_dir = path, path
        final = root_final_step(os.path.join(path, "config.json"))
        if step is not None and step != final:
            raise ConversionError(f"{source} stores one final checkpoint at its root (step {final or 'not stated'}), "
                                  f"not --step {step}")
        step = final
    else:
        release, step_dir = None, path
    name = repo_name or os.path.basename(release or path.rstrip(os.sep))
    tokenizer = tokenizer_dir or _existing_dir(os.path.join(release, "tokenizer") if release else None)
    config = config_path or (os.path.join(step_dir, "config.json") if os.path.isdir(step_dir) else None)
    return Source(step_dir, step, name, tokenizer, config)


def root_final_step(config_path: str) -> int | None:
    """The final step of a root-stored checkpoint: its ``config.json``'s ``trainer.max_duration`` when given in
    steps (``None`` when it does not say)."""
    trainer = read_release_config(config_path).get("trainer")
    duration = trainer.get("max_duration") if isinstance(trainer, dict) else None
    if isinstance(duration, dict) and duration.get("unit") == "steps" and isinstance(duration.get("value"), int):
        return duration["value"]
    return None


def download_release(repo_id: str, step: int | None, cache_dir: str | None = None,
                     revision: str | None = None, endpoint: str | None = None) -> tuple[str, int | None]:
    """Fetch what a conversion needs from a release repository; returns (local snapshot folder, step).

    A repository holds ``step<N>/`` folders, or one final checkpoint at its root (``config.json`` +
    ``model_and_optim/``, as some of the study's releases do); for a root-stored one the step is its config's
    final step (``None`` when the config does not say), and ``step`` must be that step or ``None``.
    ``endpoint`` overrides ``HF_ENDPOINT`` (a mirror, or the tests' loopback Hub); ``cache_dir`` the Hub cache.
    """
    from huggingface_hub import HfApi, snapshot_download

    api = HfApi(endpoint=endpoint)
    files = api.list_repo_files(repo_id, revision=revision)
    steps = sorted({int(m[1]) for f in files if (m := re.match(r"^step(\d+)/", f))})
    root = not steps and "config.json" in files and "model_and_optim/.metadata" in files
    if not steps and not root:
        raise ConversionError(f"{repo_id} holds no checkpoint (neither step<N>/ folders nor config.json + "
                              "model_and_optim/ at its root): is it one of the study's OLMo-core releases?")
    if root:
        prefix = ""
    else:
        if step is None:
            step = steps[-1]
        if step not in steps:
            raise ConversionError(f"{repo_id} has no step{step}/; available steps: {', '.join(map(str, steps))}")
        prefix = f"step{step}/"
    meta_patterns = [f"{prefix}config.json", f"{prefix}model_and_optim/.metadata", "tokenizer/*"]
    local = snapshot_download(repo_id, revision=revision, allow_patterns=meta_patterns, cache_dir=cache_dir,
                              endpoint=endpoint)
    if root:
        final = root_final_step(os.path.join(local, "config.json"))
        if step is not None and step != final:
            raise ConversionError(f"{repo_id} stores one final checkpoint at its root (step {final or 'not stated'}), "
                                  f"not step {step}; omit --step")
        step = final
    metadata = os.path.join(local, prefix, "model_and_optim", ".metadata")
    if not os.path.exists(metadata):
        raise ConversionError(f"{repo_id}: {prefix}model_and_optim/.metadata is missing")
    needed = [f"{prefix}model_and_optim/{name}" for name in sorted(dcp_model_files(metadata))]
    local = snapshot_download(repo_id, revision=revision, allow_patterns=meta_patterns + needed, cache_dir=cache_dir,
                              endpoint=endpoint)
    return local, step


def is_root_stored(folder: str) -> bool:
    """``folder`` (a snapshot or a local release) holds its checkpoint at the root."""
    return os.path.isfile(os.path.join(folder, "model_and_optim", ".metadata")) and \
        os.path.isfile(os.path.join(folder, "config.json"))


def locate_hub(repo_id: str, step: int | None, tokenizer_dir: str | None, config_path: str | None,
               **download) -> Source:
    """A Hub release: downloads the model part of ``step`` (default: the last one)."""
    local, step = download_release(repo_id, step, **download)
    step_dir = local if is_root_stored(local) and not os.path.isdir(os.path.join(local, f"step{step}")) \
        else os.path.join(local, f"step{step}")
    return Source(step_dir, step, repo_id, tokenizer_dir or _existing_dir(os.path.join(local, "tokenizer")),
                  config_path or os.path.join(step_dir, "config.json"))


def is_hub_id(source: str) -> bool:
    """``source`` names a Hub repository (``owner/name``) and no local path."""
    return not os.path.exists(source) and re.fullmatch(r"[\w.-]+/[\w.-]+", source) is not None
