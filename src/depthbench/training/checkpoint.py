"""Checkpoints and run folders: the one owner of their on-disk layout (used by ``depthbench.training.trainer`` and the
sweep/report side).

Run folder (``output_dir``) of ``depthbench train``::

    run_config.json          {"config": RunConfig as dict, "resolved": world size, accumulation, steps, model config,
                             "history": one entry per resume (step, checkpoint, world size, changed settings)}
    metrics.jsonl            one JSON object per logged step
    checkpoints/latest       name of the newest complete checkpoint (replaced atomically)
    checkpoints/ckpt-000100/ state/ (accelerate save_state: model, optimizer, scheduler, RNG), hf/ (HF export +
                             tokenizer + README.md model card), trainer_state.json (step, tokens, data-loader
                             position, file manifest)
    final/                   HF export of the finished model (with its model card, depthbench.hub.cards)
    summary.json             the dict returned by ``depthbench.training.trainer.train``
    tensorboard/             with track.tensorboard=true

Owned here: :class:`TrainerState` (what ``trainer_state.json`` stores), :class:`Checkpointer` (atomic save,
verified load, pruning, HF export), :func:`prepare_output_dir` (fresh start, resume or refusal),
:func:`truncate_metrics` (drop rows a resumed run re-logs) and :func:`latest_trainer_state` (the newest
checkpoint's state of a run folder, read without loading anything).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from depthbench import atomic
from depthbench.config import RunConfig, RunConfigError
from depthbench.data.tokenizers import TOKENIZER_CONFIG, finalize_tokenizer_config
from depthbench.errors import BadInput, Failed

#: Keys of the run config that define a run, with the reason a resume may not change them (refused with it).
IDENTITY_KEYS = {
    "model.arch": "the model's weights in the checkpoint belong to it",
    "model.shape": "the model's weights in the checkpoint have its sizes",
    "model.config_path": "the model's weights in the checkpoint were built from it",
    "model.fields": "the model's weights in the checkpoint were built from them",
    "model.vocab_size": "the model's embeddings in the checkpoint have it",
    "data.data_dir": "the data stream and the loader position in the checkpoint belong to it",
    "data.seq_len": "the data stream and the loader position in the checkpoint depend on it",
    "optim.betas": "it is restored from the optimizer state of the checkpoint, a new value would not apply",
    "optim.eps": "it is restored from the optimizer state of the checkpoint, a new value would not apply",
    "optim.weight_decay": "it is restored from the optimizer state of the checkpoint, a new value would not apply",
    "optim.decay_norms_and_biases": "the optimizer's parameter groups in the checkpoint depend on it",
    "optim.warmup_fraction": "it shapes the LR schedule (change train.max_steps or optim.lr instead)",
    "optim.warmup_steps": "it shapes the LR schedule (change train.max_steps or optim.lr instead)",
    "optim.min_lr_ratio": "it shapes the LR schedule (change train.max_steps or optim.lr instead)",
    "train.global_batch_size": "the data order and the meaning of a step depend on it",
    "train.seed": "the data order depends on it",
}

#: Keys that may change when resuming and change the run from the resumed step on (recorded in the history of
#: ``run_config.json``). Settings that do not change the result (micro-batch size, world size, eval, logging,
#: checkpoint cadence, tracking, attention kernel) may change freely and are recorded too.
SAFE_ON_RESUME = ("optim.lr", "optim.grad_clip", "train.max_steps", "train.max_tokens", "train.stop_at_step")

#: ``--resume`` with a changed key outside these is refused with the key's reason.
_FREE_KEYS = ("resume", "overwrite", "output_dir")


class TrainingError(Failed, RuntimeError):
    """Training cannot continue (the message says why and what to do; exit code 1)."""


class CheckpointError(BadInput, TrainingError):
    """A checkpoint is missing, incomplete or corrupt (the message names the file; exit code 2: bad input)."""


class CheckpointWriteError(TrainingError):
    """A checkpoint or export could not be written (disk full, read-only); the message names the last good
    checkpoint and how to resume."""


@dataclass
class TrainerState:
    """What ``trainer_state.json`` stores besides accelerate's state (model, optimizer, scheduler, RNG)."""

    step: int = 0
    tokens: int = 0
    loader: dict = field(default_factory=dict)
    last_train_loss: float | None = None
    last_eval: dict = field(default_factory=dict)
    train_time_s: float = 0.0  # summed over sessions


@dataclass
class RunStart:
    """What :func:`prepare_output_dir` decided: the checkpoint to resume (``None``: fresh start), the previous
    run config (``None`` when there is none) and the keys changed since (``{key: [old, new]}``)."""

    checkpoint: str | None = None
    previous: dict | None = None
    changes: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    resolved: dict | None = None  # the previous session's "resolved" entry (max_steps, warmup_steps, ...)


# ================================================================================================ run folder
def _dotted(tree: dict, key: str) -> Any:
    for part in key.split("."):
        tree = tree.get(part, {}) if isinstance(tree, dict) else {}
    return tree


def _leaves(tree: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and key != "fields":  # model.fields compares as one value
            out.update(_leaves(value, f"{name}."))
        else:
            out[name] = value
    return out


def _same(key: str, old: Any, new: Any) -> bool:
    if key == "data.data_dir" and isinstance(old, str) and isinstance(new, str):
        return os.path.realpath(old) == os.path.realpath(new)  # a relative path to the same folder is the same
    return old == new


def config_changes(previous: dict, current: dict) -> dict[str, list]:
    """``{dotted key: [previous value, current value]}`` for every setting that differs (paths of the same folder
    count as equal; ``resume`` / ``overwrite`` / ``output_dir`` are ignored)."""
    old, new = _leaves(previous), _leaves(current)
    return {k: [old.get(k), new.get(k)] for k in sorted(set(old) | set(new))
            if k not in _FREE_KEYS and not _same(k, old.get(k), new.get(k))}


def checkpoint_names(root: str) -> list[str]:
    """Names of the finished (renamed) checkpoint folders under ``root``, oldest first."""
    if not os.path.isdir(root):
        return []
    return sorted(n for n in os.listdir(root) if re.fullmatch(r"ckpt-\d+", n) and os.path.isdir(os.path.join(root, n)))


def is_complete(path: str) -> bool:
    """Whether checkpoint folder ``path`` is complete: ``trainer_state.json`` (written last) parses and every file
    of its manifest exists with the recorded size (the hashes are checked by :meth:`Checkpointer.load`)."""
    try:
        with open(os.path.join(path, "trainer_state.json"), encoding="utf-8") as f:
            manifest = json.load(f)["manifest"]
        return all(os.path.getsize(os.path.join(path, rel)) == entry["bytes"] for rel, entry in manifest.items())
    except (OSError, ValueError, KeyError, TypeError):
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
                log(f"{os.path.join(root, 'latest')} is missing: resuming from {os.path.join(root, name)}, the newest "
                    f"complete checkpoint found by scanning {root} ({len(names)} checkpoint folder(s))")
            return os.path.join(root, name)
    if names:
        raise CheckpointError(
            f"{os.path.join(root, 'latest')} is missing and none of the checkpoint folders in {root} "
            f"({', '.join(names)}) "
            "is complete (trainer_state.json with its manifest); refusing to start fresh over them: restore the "
            "folder, or pass --overwrite to start over")
    return None


def _holds_work(out: str) -> bool:
    """Whether run folder ``out`` holds anything a fresh start would lose (checkpoints, metrics, results)."""
    metrics = os.path.join(out, "metrics.jsonl")
    return bool(checkpoint_names(os.path.join(out, "checkpoints"))
                or os.path.exists(os.path.join(out, "summary.json")) or os.path.isdir(os.path.join(out, "final"))
                or (os.path.exists(metrics) and os.path.getsize(metrics) > 0))


def _check_writable(out: str) -> None:
    """Create ``out`` (and ``out/checkpoints``) and write a probe file there, or raise a clear error."""
    try:
        os.makedirs(os.path.join(out, "checkpoints"), exist_ok=True)
        for folder in (out, os.path.join(out, "checkpoints")):
            probe = os.path.join(folder, f".write-probe-{os.getpid()}")
            with open(probe, "wb") as f:
                f.write(b"ok")
            os.remove(probe)
    except OSError as exc:
        raise RunConfigError(f"output_dir {out} is not writable ({exc.strerror or exc}): choose another --output "
                             "or fix its permissions / free space (nothing was written)") from None


def agree(acc, error: BaseException | None) -> None:
    """Raise ``error`` on every rank when any rank has one (others get a :class:`TrainingError` pointing at it), so
    a check done on the main process cannot leave the other ranks waiting in a collective."""
    if acc.num_processes > 1:
        import torch

        flag = torch.tensor([0.0 if error is None else 1.0], device=acc.device)
        if float(acc.reduce(flag, reduction="sum").item()) > 0 and error is None:
            error = TrainingError("another rank stopped with an error (its message is above); stopping too")
    if error is not None:
        raise error


def prepare_output_dir(cfg: RunConfig, acc, log=None) -> RunStart:
    """Decide between a fresh start and a resume; refuse to mix runs; check that the folder is writable.

    * ``resume`` true/"auto": the ``latest`` checkpoint, or the newest complete one by scanning when the pointer is
      missing (never a fresh start while checkpoints exist). Identity keys (:data:`IDENTITY_KEYS`) must match the
      stored run; :data:`SAFE_ON_RESUME` keys may change (returned in ``changes``, recorded in the history).
    * a folder whose only content is ``run_config.json`` (a run that stopped before its first step) starts fresh.
    """
    out = cfg.output_dir
    log = log or (lambda msg: print(f"depthbench train: {msg}", file=sys.stderr))
    record_path = os.path.join(out, "run_config.json")
    ckpt_root = os.path.join(out, "checkpoints")
    start, error = RunStart(), None
    try:
        record = None
        if os.path.exists(record_path):
            try:
                with open(record_path, encoding="utf-8") as f:
                    record = json.load(f)
            except (OSError, json.JSONDecodeError) as exc:
                raise RunConfigError(f"cannot read {record_path} ({exc}); use another output_dir or --overwrite"
                                     ) from None
        holds_work = _holds_work(out)
        if cfg.resume:
            latest = find_resume_checkpoint(ckpt_root, log=log if acc.is_main_process else None)
            if cfg.resume is True and latest is None:
                raise CheckpointError(f"--resume: no checkpoint to resume in {ckpt_root} (no 'latest' pointer, no "
                                      "checkpoint folder)")
            if latest is not None:
                start.checkpoint = latest
                start.previous = (record or {}).get("config")
                start.history = list((record or {}).get("history", []))
                start.resolved = (record or {}).get("resolved")
                if start.previous is not None:
                    start.changes = config_changes(start.previous, cfg.to_dict())
                    refused = [k for k in start.changes if k in IDENTITY_KEYS]
                    if refused:
                        lines = "; ".join(f"{k} ({start.changes[k][0]!r} in the run, {start.changes[k][1]!r} now): "
                                          f"{IDENTITY_KEYS[k]}" for k in refused)
                        raise RunConfigError(
                            f"cannot resume {out}: the run there differs in {lines}. On resume only "
                            f"{', '.join(SAFE_ON_RESUME)} and settings that do not change the result (micro-batch "
                            "size, number of processes, eval, logging, checkpoints, tracking) may change; use another "
                            "output_dir or --overwrite")
        elif holds_work and not cfg.overwrite:
            raise RunConfigError(f"output_dir {out} already holds a run (checkpoints/, metrics.jsonl or summary.json); "
                                 "pass --resume to continue it or --overwrite to start over")
        elif record is not None and not holds_work and acc.is_main_process and not cfg.overwrite:
            log(f"{record_path} is from a run that stopped before its first step; starting it again")
        if acc.is_main_process:
            _check_writable(out)
    except (RunConfigError, TrainingError) as exc:
        error = exc
    agree(acc, error)
    if acc.is_main_process and cfg.overwrite and start.checkpoint is None:
        for name in ("checkpoints", "final", "final.tmp", "tensorboard"):
            shutil.rmtree(os.path.join(out, name), ignore_errors=True)
        for name in ("metrics.jsonl", "summary.json", "run_config.json"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(out, name))
    acc.wait_for_everyone()
    return start


def truncate_metrics(path: str, step: int) -> None:
    """Drop metric rows logged after ``step`` (a resumed run re-logs them)."""
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        rows = [line for line in f if line.strip()]
    keep = []
    for line in rows:
        try:
            if json.loads(line).get("step", 0) <= step:
                keep.append(line)
        except json.JSONDecodeError:  # a line cut by a crash
            continue
    atomic.write_text(path, "".join(keep))


def latest_trainer_state(run_dir: str) -> dict[str, Any] | None:
    """``trainer_state.json`` of the newest complete checkpoint of ``run_dir`` as a dict (``None`` when there is
    none or it cannot be read); reads files only, loads no model."""
    root = os.path.join(run_dir, "checkpoints")
    try:
        path = find_resume_checkpoint(root)
        if path is None:
            return None
        with open(os.path.join(path, "trainer_state.json"), encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, json.JSONDecodeError, CheckpointError):
        return None
    return state if isinstance(state, dict) else None


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
    are removed by the next save. Only the newest ``keep_last`` checkpoints are kept.
    """

    def __init__(self, root: str, accelerator, keep_last: int = 2, hash_files: bool = True):
        self.root, self.acc, self.keep_last, self.hash_files = root, accelerator, keep_last, hash_files

    @staticmethod
    def read_latest(root: str) -> str | None:
        pointer = os.path.join(root, "latest")
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
        name = f"ckpt-{state.step:06d}"
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
                f"{os.path.join(out, 'run_config.json')} --resume")

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
        acc.save_state(os.path.join(tmp, "state"))
        if hf_export:
            self._save_hf(os.path.join(tmp, "hf"), model, tokenizer_dir)
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
            atomic.write_json(os.path.join(tmp, "trainer_state.json"), {**asdict(state), "manifest": manifest})
            if os.path.exists(final):  # re-saving the same step (e.g. stopped right after a resume)
                shutil.rmtree(final)
            os.replace(tmp, final)
            atomic.fsync_dir(self.root)
            atomic.write_text(os.path.join(self.root, "latest"), name)
            self._prune(keep=name)
        acc.wait_for_everyone()
        return final

    def _prune(self, keep: str) -> None:
        names = sorted(n for n in os.listdir(self.root) if n.startswith("ckpt-") and not n.endswith(".tmp"))
        for old in names[:-self.keep_last]:
            if old != keep:
                shutil.rmtree(os.path.join(self.root, old), ignore_errors=True)

    def _save_hf(self, path: str, model, tokenizer_dir: str | None) -> None:
        acc = self.acc
        state_dict = acc.get_state_dict(model)  # collective under FSDP: every rank calls it
        if acc.is_main_process:
            from transformers.utils import logging as hf_logging

            from depthbench.hub.cards import write_card

            unwrapped = acc.unwrap_model(model)
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

    def load(self, path: str) -> TrainerState:
        """Verify ``path`` against its manifest and load it into the accelerator; returns the trainer state."""
        state_file = os.path.join(path, "trainer_state.json")
        try:
            with open(state_file, encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(
                f"checkpoint {path} is incomplete or corrupt: cannot read {state_file}: {exc}") from exc
        for rel, entry in record.pop("manifest", {}).items():
            file = os.path.join(path, rel)
            if not os.path.isfile(file):
                raise CheckpointError(f"checkpoint {path} is incomplete: {file} is missing")
            if os.path.getsize(file) != entry["bytes"]:
                raise CheckpointError(f"checkpoint file {file} is corrupt: {os.path.getsize(file)} bytes, the "
                                      f"manifest in {state_file} says {entry['bytes']}")
            if "sha256" in entry and sha256_file(file) != entry["sha256"]:
                raise CheckpointError(f"checkpoint file {file} is corrupt: sha256 differs from {state_file}")
        try:
            self.acc.load_state(os.path.join(path, "state"))
        except Exception as exc:  # noqa: BLE001 - re-raised with the checkpoint named
            raise CheckpointError(f"cannot load checkpoint {path}/state: {type(exc).__name__}: {exc}") from exc
        known = {f for f in TrainerState.__dataclass_fields__}
        return TrainerState(**{k: v for k, v in record.items() if k in known})


