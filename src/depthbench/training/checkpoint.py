"""Checkpoints of ``depthbench train``: the one owner of their on-disk layout (``checkpoints/`` of the run folder,
described in :mod:`depthbench.runs`; the names inside a checkpoint are the constants here).

Owned here: :class:`TrainerState` (what ``trainer_state.json`` stores), :class:`Checkpointer` (atomic save,
verified load, pruning, HF export), :func:`find_resume_checkpoint` (``latest`` or the newest complete one) and
:func:`latest_trainer_state` (the newest checkpoint's state of a run folder, read without loading anything).

Whose checkpoint it is: ``trainer_state.json`` records the model that wrote it (``"model": {"arch", "keys"}``: the
registry id and every tensor's name and shape), in both formats of ``state/``; :func:`check_model` refuses to
load a checkpoint of another architecture or another key set into a run, naming both architectures and the first
differing keys, before any tensor is read (the sharded loader would otherwise fill only the keys the model asks
for, silently). A checkpoint written before that record (no ``"model"``) has its key set read from its files'
headers and compared the same way; its architecture cannot be checked, which is said once.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any

from depthbench import atomic, runs
from depthbench.data.tokenizers import TOKENIZER_CONFIG, finalize_tokenizer_config
from depthbench.training.errors import CheckpointError, CheckpointWriteError

#: The checkpoint's own names, read by the checkpointer alone (the folder names other commands read too, such as
#: ``ckpt-NNNNNN`` and its ``hf`` export, are in :mod:`depthbench.runs`).
TRAINER_STATE = "trainer_state.json"
LATEST = "latest"
STATE = "state"
MODEL_RECORD = "model"
"""The key of ``trainer_state.json`` that names the model which wrote the checkpoint: ``{"arch", "keys"}``."""


@dataclass
class TrainerState:
    """What ``trainer_state.json`` stores besides accelerate's state (model, optimizer, scheduler, RNG)."""

    step: int = 0
    tokens: int = 0
    loader: dict = field(default_factory=dict)
    last_train_loss: float | None = None
    last_eval: dict = field(default_factory=dict)
    train_time_s: float = 0.0  # summed over sessions


def read_trainer_state(path: str) -> dict[str, Any]:
    """``trainer_state.json`` of checkpoint folder ``path`` (the one reader of it), as a dict.

    Raises:
        CheckpointError: The file is missing, unreadable, not JSON or not an object (the message names it).
    """
    state_file = os.path.join(path, TRAINER_STATE)
    try:
        record = atomic.read_json(state_file)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {path} is incomplete or corrupt: cannot read {state_file}: {exc}") from exc
    if not isinstance(record, dict):
        what = "it is missing" if record is None else "it holds no JSON object"
        raise CheckpointError(f"checkpoint {path} is incomplete or corrupt: cannot read {state_file}: {what}")
    return record


def checkpoint_names(root: str) -> list[str]:
    """Names of the finished (renamed) checkpoint folders under ``root``, oldest first."""
    if not os.path.isdir(root):
        return []
    return sorted(n for n in os.listdir(root)
                  if re.fullmatch(runs.CHECKPOINT_PREFIX + r"\d+", n) and os.path.isdir(os.path.join(root, n)))


def is_complete(path: str) -> bool:
    """Whether checkpoint folder ``path`` is complete: ``trainer_state.json`` (written last) parses and every file
    of its manifest exists with the recorded size (the hashes are checked by :meth:`Checkpointer.load`)."""
    try:
        manifest = read_trainer_state(path)["manifest"]
        return all(os.path.getsize(os.path.join(path, rel)) == entry["bytes"] for rel, entry in manifest.items())
    except (OSError, ValueError, KeyError, TypeError, CheckpointError):
        return False


def find_resume_checkpoint(root: str, *, log=None) -> str | None:
    """The checkpoint to resume under ``root``: the one named by ``latest``, else (pointer missing, e.g. lost in a
    partial copy of the run folder) the newest complete one found by scanning, said through ``log``.

    Raises:
        CheckpointError: ``latest`` names a missing folder, or checkpoint folders exist but none is complete
            (starting fresh would overwrite them).
    """
    latest = Checkpointer.read_latest(root)
    if latest is not None:
        return latest
    names = checkpoint_names(root)
    for name in reversed(names):
        if is_complete(os.path.join(root, name)):
            if log:
                log(f"{os.path.join(root, LATEST)} is missing: resuming from {os.path.join(root, name)}, the newest "
                    f"complete checkpoint found by scanning {root} ({len(names)} checkpoint folder(s))")
            return os.path.join(root, name)
    if names:
        raise CheckpointError(
            f"{os.path.join(root, LATEST)} is missing and none of the checkpoint folders in {root} "
            f"({', '.join(names)}) "
            "is complete (trainer_state.json with its manifest); refusing to start fresh over them: restore the "
            "folder, or pass --overwrite to start over")
    return None


def latest_trainer_state(run_dir: str) -> dict[str, Any] | None:
    """``trainer_state.json`` of the newest complete checkpoint of ``run_dir`` as a dict (``None`` when there is
    none or it cannot be read); reads files only, loads no model."""
    root = os.path.join(run_dir, runs.CHECKPOINTS)
    try:
        path = find_resume_checkpoint(root)
        if path is None:
            return None
        return read_trainer_state(path)
    except (OSError, CheckpointError):
        return None


def _key_differences(ours: dict[str, list[int]], theirs: dict[str, list[int]], limit: int = 3) -> str:
    """The first differing keys of two ``{name: shape}`` sets, in words (empty when they are equal)."""
    missing = [k for k in ours if k not in theirs]
    extra = [k for k in theirs if k not in ours]
    reshaped = [k for k in ours if k in theirs and list(ours[k]) != list(theirs[k])]
    parts = []
    for what, names in (("missing from the checkpoint", missing), ("only in the checkpoint", extra)):
        if names:
            more = f" and {len(names) - limit} more" if len(names) > limit else ""
            parts.append(f"{len(names)} {what}: {', '.join(names[:limit])}{more}")
    if reshaped:
        more = f" and {len(reshaped) - limit} more" if len(reshaped) > limit else ""
        parts.append(f"{len(reshaped)} of another shape: " + ", ".join(
            f"{k} {list(theirs[k])} (this run {list(ours[k])})" for k in reshaped[:limit]) + more)
    return "; ".join(parts)


def check_model(path: str, record: dict[str, Any], arch: str | None, keys: dict[str, list[int]],
                log=None) -> None:
    """Refuse checkpoint ``path`` (its ``trainer_state.json`` ``record``) unless it was written by a model of
    architecture ``arch`` with exactly the tensors ``keys`` (``{name: shape}``).

    A checkpoint without the record (written before depthbench kept it) is checked by the key set its files
    hold (:func:`depthbench.training.model_state.saved_keys`); that its architecture is unknown is said through
    ``log``.

    Raises:
        CheckpointError: Another architecture or another key set, naming both architectures and the first
            differing keys (exit code 2).
    """
    from depthbench.training.model_state import saved_keys

    recorded = record.get(MODEL_RECORD)
    if isinstance(recorded, dict):
        their_arch, theirs = recorded.get("arch"), recorded.get("keys")
    else:
        their_arch, theirs = None, saved_keys(os.path.join(path, STATE))
        if log:
            log(f"checkpoint {path} does not record the model that wrote it (written before depthbench recorded "
                "it): its tensors' names and shapes were checked against this run's model, its architecture "
                "cannot be")
    differences = _key_differences(keys, theirs) if isinstance(theirs, dict) else ""
    if (their_arch and arch and their_arch != arch) or differences:
        written = f"a {their_arch} model" if their_arch else "a model of unrecorded architecture"
        raise CheckpointError(
            f"checkpoint {path} was written by {written}, and this run trains {arch}: refusing to load another "
            f"model's state ({differences or 'the same tensor names and shapes, another architecture'}). Resume "
            "from a checkpoint of this run, or pass --overwrite to start over")


def _is_write_failure(exc: BaseException) -> bool:
    """An OS-level write failure (disk full, quota, read-only, permissions), also when a library (safetensors)
    reports it in its own exception type."""
    if isinstance(exc, OSError):
        return True
    text = str(exc)
    return any(m in text for m in ("No space left", "Disk quota", "Read-only file system", "Permission denied"))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return f"{type(exc).__name__}: {exc}"


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


# ================================================================================================ checkpoints
class Checkpointer:
    """Atomic checkpoints under ``root``: ``ckpt-XXXXXX/`` + a ``latest`` pointer file.

    A checkpoint is written into ``ckpt-XXXXXX.tmp``, every file is fsynced, ``trainer_state.json`` (with a manifest
    of every file's size and sha256) is written last, then the folder is renamed and ``latest`` is replaced
    atomically. A crash at any point leaves ``latest`` on the previous complete checkpoint; stale ``.tmp`` folders
    are removed by the next save. Only the newest ``keep_last`` checkpoints are kept. A sharded (FSDP2) save keeps
    the protocol: every rank writes (and fsyncs) its shards into the ``.tmp`` folder, and only after all of them
    are done does the main process write the manifest and rename, so a rank killed during the save leaves
    ``latest`` where it was.

    ``model_state`` (:class:`depthbench.training.model_state.ModelState`) says where the model and optimizer go;
    without one, accelerate's ``save_state``/``load_state`` and the model passed to :meth:`save` are used.
    """

    def __init__(self, root: str, accelerator, keep_last: int = 2, hash_files: bool = True, model_state=None,
                 arch: str | None = None):
        self.root, self.acc, self.keep_last, self.hash_files = root, accelerator, keep_last, hash_files
        self.model_state, self.arch = model_state, arch
        self._keys = None

    def model_keys(self) -> dict[str, list[int]] | None:
        """``{tensor name: shape}`` of the run's model (``None`` without a ``model_state``)."""
        if self._keys is None and self.model_state is not None:
            self._keys = self.model_state.keys()
        return self._keys

    def model_record(self) -> dict[str, Any]:
        """What ``trainer_state.json`` records about the model (:data:`MODEL_RECORD`)."""
        keys = self.model_keys()
        return {MODEL_RECORD: {"arch": self.arch, "keys": keys}} if keys is not None else {}

    @staticmethod
    def read_latest(root: str) -> str | None:
        pointer = os.path.join(root, LATEST)
        if not os.path.exists(pointer):
            return None
        with open(pointer, encoding="utf-8") as f:
            name = f.read().strip()
        path = os.path.join(root, name)
        if not name or not os.path.isdir(path):
            raise CheckpointError(f"checkpoint pointer {pointer} names {name!r}, which does not exist")
        return path

    def latest_path(self) -> str | None:
        return self.read_latest(self.root)

    def save(self, state: TrainerState, model, tokenizer_dir: str | None, hf_export: bool = True) -> str:
        """Write checkpoint ``ckpt-<step>`` atomically; a failed write (disk full, read-only) removes the partial copy
        and raises :class:`CheckpointWriteError` naming the last good checkpoint and the resume command."""
        name = f"{runs.CHECKPOINT_PREFIX}{state.step:06d}"
        try:
            return self._save(name, state, model, tokenizer_dir, hf_export)
        except Exception as exc:
            if not _is_write_failure(exc):
                raise
            if self.acc.is_main_process:
                shutil.rmtree(os.path.join(self.root, name + ".tmp"), ignore_errors=True)  # frees the partial copy
            raise CheckpointWriteError(f"cannot write checkpoint {os.path.join(self.root, name)}: {_reason(exc)} "
                                       f"(the partial copy was removed). {self.resume_hint()}") from exc

    def resume_hint(self) -> str:
        """Which checkpoint is the last good one and the command that continues from it."""
        try:
            latest = find_resume_checkpoint(self.root)
        except CheckpointError:
            latest = None
        out = os.path.dirname(os.path.abspath(self.root))
        if latest is None:
            return "No checkpoint of this run was written; free space and start it again."
        return (f"The last good checkpoint is {latest}; free space (or lower checkpoint.keep_last, or set "
                f"checkpoint.hf_export=false) and continue with: depthbench train -c "
                f"{os.path.join(out, runs.RUN_CONFIG)} --resume")

    def _save(self, name: str, state: TrainerState, model, tokenizer_dir: str | None, hf_export: bool) -> str:
        acc = self.acc
        final, tmp = os.path.join(self.root, name), os.path.join(self.root, name + ".tmp")
        if acc.is_main_process:
            os.makedirs(self.root, exist_ok=True)
            for stale in os.listdir(self.root):
                if stale.endswith(".tmp"):
                    shutil.rmtree(os.path.join(self.root, stale), ignore_errors=True)
            os.makedirs(tmp)
        acc.wait_for_everyone()
        if self.model_state is not None:
            self.model_state.save(os.path.join(tmp, STATE))
        else:
            acc.save_state(os.path.join(tmp, STATE))
        if hf_export:
            self._save_hf(os.path.join(tmp, runs.CHECKPOINT_EXPORT), model, tokenizer_dir)
        acc.wait_for_everyone()
        if acc.is_main_process:
            manifest = {}
            for dirpath, _, files in os.walk(tmp):
                for file in files:
                    path = os.path.join(dirpath, file)
                    with open(path, "rb+") as f:
                        os.fsync(f.fileno())
                    entry = {"bytes": os.path.getsize(path)}
                    if self.hash_files:
                        entry["sha256"] = sha256_file(path)
                    manifest[os.path.relpath(path, tmp)] = entry
                atomic.fsync_dir(dirpath)
            atomic.write_json(os.path.join(tmp, TRAINER_STATE),
                              {**asdict(state), **self.model_record(), "manifest": manifest})
            if os.path.exists(final):  # re-saving the same step (e.g. stopped right after a resume)
                shutil.rmtree(final)
            os.replace(tmp, final)
            atomic.fsync_dir(self.root)
            atomic.write_text(os.path.join(self.root, LATEST), name)
            self._prune(keep=name)
        acc.wait_for_everyone()
        return final

    def _prune(self, keep: str) -> None:
        names = sorted(n for n in os.listdir(self.root)
                       if n.startswith(runs.CHECKPOINT_PREFIX) and not n.endswith(".tmp"))
        for old in names[:-self.keep_last]:
            if old != keep:
                shutil.rmtree(os.path.join(self.root, old), ignore_errors=True)

    def _save_hf(self, path: str, model, tokenizer_dir: str | None) -> None:
        acc = self.acc
        if self.model_state is not None:
            state_dict = self.model_state.full_state_dict()  # collective under FSDP2: every rank calls it
        else:
            state_dict = acc.get_state_dict(model)
        if acc.is_main_process:
            from transformers.utils import logging as hf_logging

            from depthbench.cards import write_card

            unwrapped = self.model_state.export_model() if self.model_state is not None else acc.unwrap_model(model)
            hf_logging.disable_progress_bar()
            try:
                unwrapped.save_pretrained(path, state_dict=state_dict, safe_serialization=True)
            finally:
                hf_logging.enable_progress_bar()
            if tokenizer_dir and os.path.isdir(tokenizer_dir):
                for file in os.listdir(tokenizer_dir):
                    src = os.path.join(tokenizer_dir, file)
                    if os.path.isfile(src):
                        shutil.copy2(src, os.path.join(path, file))
                if os.path.isfile(os.path.join(path, TOKENIZER_CONFIG)):  # the export's copy knows its model
                    finalize_tokenizer_config(path, model_max_length=unwrapped.config.max_position_embeddings)
            write_card(path, run_dir=os.path.dirname(os.path.abspath(self.root)))  # README.md model card

    def export_hf(self, path: str, model, tokenizer_dir: str | None) -> None:
        """Atomic HF export (``path.tmp`` then rename) of the model + tokenizer."""
        tmp = path + ".tmp"
        if self.acc.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        self.acc.wait_for_everyone()
        try:
            self._save_hf(tmp, model, tokenizer_dir)
        except Exception as exc:
            if not _is_write_failure(exc):
                raise
            if self.acc.is_main_process:
                shutil.rmtree(tmp, ignore_errors=True)
            raise CheckpointWriteError(f"cannot write the export {path}: {_reason(exc)} (the partial copy was "
                                       f"removed). {self.resume_hint()} (the resumed run only writes the export)"
                                       ) from exc
        if self.acc.is_main_process:
            shutil.rmtree(path, ignore_errors=True)
            os.replace(tmp, path)
        self.acc.wait_for_everyone()

    def load(self, path: str, log=None) -> TrainerState:
        """Verify ``path`` against its manifest and the run's model (:func:`check_model`; ``log`` says what could
        not be checked) and load it into the accelerator; returns the trainer state."""
        state_file = os.path.join(path, TRAINER_STATE)
        record = read_trainer_state(path)
        for rel, entry in record.pop("manifest", {}).items():
            file = os.path.join(path, rel)
            if not os.path.isfile(file):
                raise CheckpointError(f"checkpoint {path} is incomplete: {file} is missing")
            if os.path.getsize(file) != entry["bytes"]:
                raise CheckpointError(f"checkpoint file {file} is corrupt: {os.path.getsize(file)} bytes, the "
                                      f"manifest in {state_file} says {entry['bytes']}")
            if "sha256" in entry and sha256_file(file) != entry["sha256"]:
                raise CheckpointError(f"checkpoint file {file} is corrupt: sha256 differs from {state_file}")
        keys = self.model_keys()
        if keys is not None:
            check_model(path, record, self.arch, keys, log=log)
        try:
            if self.model_state is not None:
                self.model_state.load(os.path.join(path, STATE))
            else:
                self.acc.load_state(os.path.join(path, STATE))
        except Exception as exc:  # noqa: BLE001 - re-raised with the checkpoint named
            raise CheckpointError(f"cannot load checkpoint {path}/state: {type(exc).__name__}: {exc}") from exc
        known = {f for f in TrainerState.__dataclass_fields__}
        return TrainerState(**{k: v for k, v in record.items() if k in known})


