"""Checkpoints and run folders: the one owner of their on-disk layout (used by ``depthbench.train`` and the
sweep/report side).

Run folder (``output_dir``) of ``depthbench train``::

    run_config.json          {"config": RunConfig as dict, "resolved": world size, accumulation, steps, model config}
    metrics.jsonl            one JSON object per logged step
    checkpoints/latest       name of the newest complete checkpoint (replaced atomically)
    checkpoints/ckpt-000100/ state/ (accelerate save_state: model, optimizer, scheduler, RNG), hf/ (HF export +
                             tokenizer + README.md model card), trainer_state.json (step, tokens, data-loader
                             position, file manifest)
    final/                   HF export of the finished model (with its model card, depthbench.hub.cards)
    summary.json             the dict returned by ``depthbench.train.train``
    tensorboard/             with track.tensorboard=true

Owned here: :class:`TrainerState` (what ``trainer_state.json`` stores), :class:`Checkpointer` (atomic save,
verified load, pruning, HF export), :func:`prepare_output_dir` (fresh start, resume or refusal),
:func:`truncate_metrics` (drop rows a resumed run re-logs) and :func:`latest_trainer_state` (the newest
checkpoint's state of a run folder, read without loading anything).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any

from depthbench import atomic
from depthbench.config import RunConfig, RunConfigError

#: Keys of the run config that define a run; resuming with a different value is refused.
IDENTITY_KEYS = ("model", "data.data_dir", "data.seq_len", "optim", "train.global_batch_size", "train.seed")


class TrainingError(RuntimeError):
    """Training cannot continue (the message says why and what to do)."""


class CheckpointError(TrainingError):
    """A checkpoint is missing, incomplete or corrupt (the message names the file)."""


@dataclass
class TrainerState:
    """What ``trainer_state.json`` stores besides accelerate's state (model, optimizer, scheduler, RNG)."""

    step: int = 0
    tokens: int = 0
    loader: dict = field(default_factory=dict)
    last_train_loss: float | None = None
    last_eval: dict = field(default_factory=dict)
    train_time_s: float = 0.0  # summed over sessions


# ================================================================================================ run folder
def _dotted(tree: dict, key: str) -> Any:
    for part in key.split("."):
        tree = tree.get(part, {}) if isinstance(tree, dict) else {}
    return tree


def prepare_output_dir(cfg: RunConfig, acc) -> str | None:
    """Decide between a fresh start and a resume; refuse to mix runs. Returns the checkpoint to resume or None."""
    out = cfg.output_dir
    record_path = os.path.join(out, "run_config.json")
    ckpt_root = os.path.join(out, "checkpoints")
    has_run = os.path.exists(record_path) or os.path.isdir(ckpt_root)
    latest = Checkpointer.read_latest(ckpt_root)
    if cfg.resume and has_run and os.path.exists(record_path):
        with open(record_path, encoding="utf-8") as f:
            previous = json.load(f).get("config", {})
        current = cfg.to_dict()
        diff = [k for k in IDENTITY_KEYS if _dotted(previous, k) != _dotted(current, k)]
        if diff:
            raise RunConfigError(f"cannot resume {out}: the run there differs in {', '.join(diff)}; use another "
                                 "output_dir or --overwrite")
    if cfg.resume is True and latest is None:
        raise CheckpointError(f"--resume: no checkpoint to resume in {ckpt_root} (no 'latest' pointer)")
    if has_run and not cfg.resume and not cfg.overwrite:
        raise RunConfigError(f"output_dir {out} already holds a run (run_config.json / checkpoints/); pass --resume "
                             "to continue it or --overwrite to start over")
    acc.wait_for_everyone()
    if acc.is_main_process:
        os.makedirs(out, exist_ok=True)
        if cfg.overwrite and not cfg.resume:
            for name in ("checkpoints", "final", "final.tmp", "tensorboard"):
                shutil.rmtree(os.path.join(out, name), ignore_errors=True)
            for name in ("metrics.jsonl", "summary.json", "run_config.json"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(out, name))
    acc.wait_for_everyone()
    return latest if cfg.resume else None


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
        with open(os.path.join(root, "latest"), encoding="utf-8") as f:
            name = f.read().strip()
        with open(os.path.join(root, name, "trainer_state.json"), encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None
    return state if isinstance(state, dict) else None


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
        acc = self.acc
        name = f"ckpt-{state.step:06d}"
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
            write_card(path, run_dir=os.path.dirname(os.path.abspath(self.root)))  # README.md model card

    def export_hf(self, path: str, model, tokenizer_dir: str | None) -> None:
        """Atomic HF export (``path.tmp`` then rename) of the model + tokenizer."""
        tmp = path + ".tmp"
        if self.acc.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        self.acc.wait_for_everyone()
        self._save_hf(tmp, model, tokenizer_dir)
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


