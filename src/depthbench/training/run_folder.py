"""The run folder of ``depthbench train``: a fresh start, a resume or a refusal, decided before anything is written.

:func:`prepare_output_dir` decides; :data:`IDENTITY_KEYS` are the settings a resume may not change (each with the
reason), :data:`SAFE_ON_RESUME` the ones it may, and :func:`apply_resume_changes` applies those to the resumed
optimizer and schedule. The folder's layout is described in :mod:`depthbench.runs`,
checkpoints in :mod:`depthbench.training.checkpoint`.

One writer per run folder: before deciding anything the main process takes the folder's lease
(``depthbench.lease``: ``writer.lease``, refreshed while the run trains, released when ``train()`` returns or
raises), so a second process training into the same folder is refused naming the holder, or waits with
``wait_for_writer`` seconds; a holder that died does not block it. Every rank agrees on the outcome.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any

from depthbench import atomic, lease, runs
from depthbench.config import RunConfig, RunConfigError
from depthbench.training.checkpoint import checkpoint_names, find_resume_checkpoint
from depthbench.training.errors import CheckpointError, OtherRankBadInput, OtherRankError, TrainingError

#: Keys of the run config that define a run, with the reason a resume may not change them (refused with it).
IDENTITY_KEYS = {
    "model.arch": "the model's weights in the checkpoint belong to it",
    "model.shape": "the model's weights in the checkpoint have its sizes",
    "model.config_path": "the model's weights in the checkpoint were built from it",
    "model.fields": "the model's weights in the checkpoint were built from them",
    "model.vocab_size": "the model's embeddings in the checkpoint have it",
    "model.init_from": "the model's weights in the checkpoint started from it",
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
_FREE_KEYS = ("resume", "overwrite", "output_dir", "wait_for_writer")


@dataclass
class RunStart:
    """What :func:`prepare_output_dir` decided: the checkpoint to resume (``None``: fresh start), the previous
    run config (``None`` when there is none) and the keys changed since (``{key: [old, new]}``)."""

    checkpoint: str | None = None
    previous: dict | None = None
    changes: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    resolved: dict | None = None  # the previous session's "resolved" entry (max_steps, warmup_steps, ...)


# ================================================================================================ changes
def apply_resume_changes(start: RunStart, optimizer, scheduler, *, lr: float, max_steps: int, warmup: int,
                         step: int, say=None) -> None:
    """Apply to the resumed optimizer and LR schedule what :data:`SAFE_ON_RESUME` let change (a new ``optim.lr``
    rescales the schedule's base LRs; a new ``train.max_steps`` recomputes the LR of the current step) and say
    through ``say`` (the main process only) what changes."""
    changes = start.changes
    old_max = (start.resolved or {}).get("max_steps")
    lr_changed = "optim.lr" in changes
    if lr_changed:
        ratio = lr / changes["optim.lr"][0]
        scheduler.base_lrs = [b * ratio for b in scheduler.base_lrs]
        for group, base in zip(optimizer.param_groups, scheduler.base_lrs):
            group["initial_lr"] = base
    if lr_changed or (old_max is not None and old_max != max_steps):
        factor = scheduler.lr_lambdas[0](scheduler.last_epoch)
        for group, base in zip(optimizer.param_groups, scheduler.base_lrs):
            group["lr"] = base * factor
        scheduler._last_lr = [g["lr"] for g in optimizer.param_groups]
    if say is None:
        return
    if changes:
        listed = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())
        say(f"resuming at step {step} with changed settings: {listed} (recorded in run_config.json history)")
    if old_max is not None and old_max != max_steps:
        old_warmup = (start.resolved or {}).get("warmup_steps")
        say(f"the run length changes from {old_max} to {max_steps} steps: the LR schedule changes from step "
            f"{step + 1} on (warmup {old_warmup} -> {warmup} steps, cosine decay now ends at step "
            f"{max_steps}); the result equals neither a {old_max}- nor a {max_steps}-step run")


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


# ================================================================================================ start or resume
def _holds_work(out: str) -> bool:
    """Whether run folder ``out`` holds anything a fresh start would lose (checkpoints, metrics, results)."""
    metrics = os.path.join(out, runs.METRICS)
    return bool(checkpoint_names(os.path.join(out, runs.CHECKPOINTS))
                or os.path.exists(os.path.join(out, runs.SUMMARY)) or os.path.isdir(os.path.join(out, runs.FINAL))
                or (os.path.exists(metrics) and os.path.getsize(metrics) > 0))


def _check_writable(out: str) -> None:
    """Create ``out`` and write a probe file there (and in ``out/checkpoints`` when a run left one), or raise a clear
    error. ``checkpoints/`` itself is created by the first checkpoint: a run that fails before it leaves none."""
    ckpt_root = os.path.join(out, runs.CHECKPOINTS)
    try:
        os.makedirs(out, exist_ok=True)
        for folder in (out, ckpt_root) if os.path.isdir(ckpt_root) else (out,):
            probe = os.path.join(folder, f".write-probe-{os.getpid()}")
            with open(probe, "wb") as f:
                f.write(b"ok")
            os.remove(probe)
    except OSError as exc:
        raise RunConfigError(f"output_dir {out} is not writable ({exc.strerror or exc}): choose another --output "
                             "or fix its permissions / free space (nothing was written)") from None


def hold_output_dir(cfg: RunConfig, log) -> None:
    """Take the run folder's lease for this process (main process only), waiting up to ``cfg.wait_for_writer``
    seconds for a live holder; :class:`depthbench.lease.LeaseHeld` names the holder."""
    hint = (f"Wait for it to finish, or pass --wait-for-writer SECONDS (wait_for_writer=SECONDS) to wait for it. A "
            f"holder that died does not block: on its own host its pid is checked, from other hosts it counts as "
            f"dead {lease.stale_after():.0f} s after its last heartbeat (DEPTHBENCH_LEASE_TIMEOUT).")
    try:
        lease.acquire(cfg.output_dir, what="depthbench train", wait=cfg.wait_for_writer, hint=hint, log=log)
    except OSError as exc:
        raise RunConfigError(f"output_dir {cfg.output_dir} is not writable ({exc.strerror or exc}): choose another "
                             "--output or fix its permissions / free space (nothing was written)") from None


def release_output_dir(out: str) -> None:
    """Release this process's lease on run folder ``out`` (if it holds one): ``train()`` calls it when done."""
    lease.release(out)


def agree(acc, error: BaseException | None) -> None:
    """Raise ``error`` on every rank when any rank has one, so that a check done on the main process cannot leave
    the other ranks waiting in a collective: a rank without an error raises the first failing rank's message with
    its exit code (:class:`OtherRankBadInput` / :class:`OtherRankError`), which rank 0 then prints
    (``depthbench.errors.run_command``: one message per launch)."""
    if acc.num_processes > 1:
        import torch.distributed as dist

        from depthbench.errors import EXIT_USAGE, exit_code

        everyone: list = [None] * acc.num_processes
        dist.all_gather_object(everyone, None if error is None else (exit_code(error), str(error)))
        failed = [(rank, report) for rank, report in enumerate(everyone) if report is not None]
        if failed and error is None:
            rank, (code, message) = failed[0]
            error = (OtherRankBadInput if code == EXIT_USAGE else OtherRankError)(f"rank {rank}: {message}")
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
    record_path = os.path.join(out, runs.RUN_CONFIG)
    ckpt_root = os.path.join(out, runs.CHECKPOINTS)
    start, error = RunStart(), None
    try:
        if acc.is_main_process:
            hold_output_dir(cfg, log)
            _check_writable(out)
        try:
            record = atomic.read_json(record_path)
        except (OSError, ValueError) as exc:
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
    except (RunConfigError, TrainingError, lease.LeaseHeld) as exc:
        error = exc
    if error is not None and acc.is_main_process:
        release_output_dir(out)  # also removes out/ when the lease created it and it is empty
    agree(acc, error)
    if acc.is_main_process and cfg.overwrite and start.checkpoint is None:
        for name in (runs.CHECKPOINTS, runs.FINAL, runs.FINAL_STAGING, runs.TENSORBOARD):
            shutil.rmtree(os.path.join(out, name), ignore_errors=True)
        for name in (runs.METRICS, runs.SUMMARY, runs.RUN_CONFIG):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(out, name))
    acc.wait_for_everyone()
    return start
