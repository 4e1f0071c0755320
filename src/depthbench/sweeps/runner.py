"""Aspect-ratio sweeps at a fixed parameter budget, the study's main experiment: definition, runner, job arrays.

    depthbench demo                                      # the offline CPU demo (a small real sweep)
    depthbench sweep --archs pre_ln,hc,attnres --grid 400m --depths 16,24,32 --data data/fineweb \\
        --lrs 1e-3,2e-3 --seeds 0 --config src/depthbench/configs/400m.yaml --out runs/400m
    depthbench sweep --archs pre_ln,hc --budget 20m --depths 4,8,16 --heads 8 --vocab-size 8192 \\
        --data runs/demo/data --out runs/20m  # explicit depths at a budget (design-rule shapes, no named grid)
    depthbench sweep ... --emit slurm                    # job array instead of running here
    depthbench report runs/400m                          # rebuild results.csv / plot / report.md

A sweep is the cross product (architecture x shape x learning rate x seed). Every point is one ordinary training
run (``depthbench.training.train``) in ``<out>/runs/<run id>/``; finished runs (``summary.json`` with status
``finished``, or ``diverged``: a non-finite loss is a result of that learning rate, not a crash) are skipped and
unfinished ones resume from their latest checkpoint, so an interrupted sweep continues where it stopped. The sweep
definition is stored in ``<out>/sweep.json``; re-running a different definition in the same folder is refused
(nothing is overwritten). One launcher per sweep folder: the launcher holds the folder's lease
(``depthbench.lease``, ``<out>/writer.lease``) while it runs, so a second launcher is refused naming it (or waits,
``--wait-for-writer``); each run's own folder is held by the process that trains it.

Shapes are named grid shapes (``tiny-L4``, resolved by ``depthbench.shapes.get_shape`` in the trainer) or, with
``--budget N --depths ...``, design-rule shapes from ``depthbench.shapes.shape_for_budget`` named
``budget<N>-L<depth>``; those are passed to the trainer as explicit ``model.fields`` (``SweepSpec.custom_shapes``).

Results (``results.csv``, ``results.jsonl``, ``loss_vs_aspect_ratio.png``, ``report.md``) are written by
``depthbench.sweeps.report`` after every run; ``depthbench report <out>`` rebuilds them.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable
from typing import Any

from depthbench import atomic, lease, runs
from depthbench.errors import Failed
from depthbench.procfs import usable_cores
from depthbench.sweeps.report import collect_results, write_report
from depthbench.sweeps.spec import SweepError, SweepSpec, claim_folder
from depthbench.sweeps.workers import CONSOLE_LOG, Job, run_in_workers


class SweepRunFailed(Failed, SweepError):
    """A run of the sweep failed while training (exit code 1; the message names the run and says why)."""


def run_sweep(
    spec: SweepSpec,
    out_dir: str,
    *,
    launcher: str = "local",
    accelerate_args: str = "",
    wait_for_writer: float = 0.0,
    workers: int = 1,
    threads: int | None = None,
    configs: list | None = None,
    log: Callable[..., None] = print,
) -> list[dict[str, Any]]:
    """Run (or continue) every point of ``spec`` into ``out_dir``; returns the result rows.

    ``launcher="local"`` trains in this process one run after another, or, with ``workers`` > 1, in that many
    spawned processes side by side (``depthbench.sweeps.workers``; ``threads`` torch threads each, default: this
    machine's cores shared out among them); ``"accelerate"`` runs each point as
    ``accelerate launch <accelerate_args> -m depthbench.cli train ...`` (DDP/FSDP2 per run). A run that diverges
    (non-finite loss) is recorded with status ``diverged`` and the sweep goes on; a run stopped by a signal
    (SIGTERM/SIGINT: checkpointed) stops the sweep, and the next invocation resumes it.

    Each run's config is built once (``configs``: :meth:`SweepSpec.run_configs` of ``out_dir``, built here unless
    the caller built them), before anything is written, and trained as built.

    The launcher holds ``out_dir``'s lease (:mod:`depthbench.lease`) from before the definition is claimed until
    it returns; with another live launcher there it waits up to ``wait_for_writer`` seconds.

    Raises:
        SweepError: Invalid definition, a folder of another sweep, missing data, or a failed run.
        depthbench.lease.LeaseHeld: Another live launcher runs this sweep folder (it is named).
    """
    if launcher not in ("local", "accelerate"):
        raise SweepError(f"launcher={launcher!r} is not allowed: launcher must be 'local' or 'accelerate'")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SweepError(f"workers={workers!r} is not allowed: workers must be a positive integer")
    if workers > 1 and launcher != "local":
        raise SweepError("workers > 1 needs launcher 'local' (under accelerate each run already has its processes)")
    configs = spec.run_configs(out_dir) if configs is None else configs
    data_dir = configs[0].data.data_dir or (spec.base.get("data") or {}).get("data_dir")
    if not data_dir or not os.path.isfile(os.path.join(data_dir, runs.DATA_META)):
        raise SweepError(f"data.data_dir={data_dir!r} is not a prepared data folder (no meta.json); prepare one with "
                         "`depthbench prepare-data` and pass it with --data (nothing was written)")
    hint = ("Wait for it to finish, or pass --wait-for-writer SECONDS to wait for it; a launcher that died does not "
            "block (its pid on its host, elsewhere its heartbeat: DEPTHBENCH_LEASE_TIMEOUT).")
    with lease.acquire(out_dir, what="depthbench sweep launcher", wait=wait_for_writer, hint=hint,
                       log=lambda msg: log(f"depthbench sweep: {msg}")):
        claim_folder(spec, out_dir)
        return _run_points(spec, configs, out_dir, launcher, accelerate_args, workers, threads, log)


def _run_points(spec: SweepSpec, configs: list, out_dir: str, launcher: str, accelerate_args: str, workers: int,
                threads: int | None, log: Callable[..., None]) -> list[dict[str, Any]]:
    """Every point of ``spec`` in turn (finished ones skipped), then the report; the sweep lease is held."""
    points = spec.runs()
    started = time.time()
    todo = []
    for k, (point, config) in enumerate(zip(points, configs, strict=True), 1):
        run_dir = spec.run_dir(out_dir, point)
        summary = runs.read_summary(run_dir)
        if summary and summary.get("status") in runs.DONE_STATUSES:
            log(f"[{k}/{len(points)}] {point.run_id}: {summary['status']} earlier, skipped")
            continue
        action = "resuming" if summary or runs.is_run(run_dir) else "training"
        todo.append(Job(f"[{k}/{len(points)}] {point.run_id}", config, run_dir, action,
                        spec.run_overrides(point, run_dir)))
    if workers > 1 and len(todo) > 1:
        status = _run_parallel(todo, out_dir, min(workers, len(todo)), threads, started, log)
    else:
        status = _run_sequential(todo, spec.base, out_dir, launcher, accelerate_args, started, log)
    if status == "stopped":
        log("sweep stopped (the runs in flight are checkpointed); run the same command again to continue")
    paths = write_report(out_dir, log=log)
    log(f"sweep done in {time.time() - started:.0f}s; results: {paths['csv']}")
    return collect_results(out_dir)


def _run_sequential(todo: list[Job], base: dict[str, Any], out_dir: str, launcher: str, accelerate_args: str,
                    started: float, log: Callable[..., None]) -> str:
    for job in todo:
        log(f"{job.label}: {job.action} ({time.time() - started:.0f}s into the sweep)")
        if launcher == "local":
            status = train_point(job.config, log, job.run_dir)
        else:  # each run's processes build its config again from the sweep's base config and the point's overrides
            status = _train_accelerate(base, list(job.overrides), out_dir, job.run_dir, accelerate_args, log)
        write_report(out_dir, log=lambda *_: None, plot=False)  # partial results stay visible while the sweep runs
        if status == "stopped":
            return "stopped"
    return "finished"


def _run_parallel(todo: list[Job], out_dir: str, workers: int, threads: int | None, started: float,
                  log: Callable[..., None]) -> str:
    threads = threads or max(1, usable_cores() // workers)
    log(f"{len(todo)} runs in {workers} worker processes, {threads} torch thread(s) each (output of each run: "
        f"<run>/{CONSOLE_LOG})")
    done: list[float] = []

    def on_done(job: Job, status: str, seconds: float) -> None:
        done.append(seconds)
        write_report(out_dir, log=lambda *_: None, plot=False)
        left = len(todo) - len(done)
        elapsed = time.time() - started
        eta = f", about {elapsed / len(done) * left:.0f}s left" if left and status != "stopped" else ""
        log(f"{job.label}: {status} in {seconds:.0f}s ({len(done)} of {len(todo)} done, {elapsed:.0f}s into the "
            f"sweep{eta})")

    return run_in_workers(todo, train_point, workers, threads=threads, on_done=on_done, log=log)


def train_point(config, log: Callable[..., None], run_dir: str = "") -> str:
    """Train one point (its built run config) in this process; returns its status (``finished``, ``diverged`` or
    ``stopped``)."""
    # imported here: the trainer loads torch and accelerate (import cost: `depthbench sweep --emit slurm` and
    # `--launcher accelerate` never train in this process)
    from depthbench.training.errors import CheckpointError, NonFiniteLossError, TrainingError
    from depthbench.training.trainer import train

    try:
        return train(config)["status"]
    except NonFiniteLossError as exc:
        log(f"  diverged: {exc}")
        return "diverged"
    except CheckpointError as exc:  # a corrupt checkpoint is bad input: the message, not a traceback
        raise SweepError(f"run {run_dir} cannot continue: {exc}. The sweep stopped here; repair or remove that run "
                         "folder and run the same command again (finished runs are skipped)") from None
    except (TrainingError, OSError) as exc:
        raise SweepRunFailed(f"run {run_dir} failed: {exc}. The sweep stopped here; run the same command again to "
                             "continue (finished runs are skipped)") from None


def _train_accelerate(base: dict[str, Any], overrides: list[str], out_dir: str, run_dir: str, accelerate_args: str,
                      log: Callable[..., None]) -> str:
    os.makedirs(run_dir, exist_ok=True)
    base_path = os.path.join(out_dir, runs.BASE_CONFIG)
    atomic.write_json(base_path, base)
    cmd = ["accelerate", "launch", *shlex.split(accelerate_args), "-m", "depthbench.cli", "train",
           "--config", base_path, *overrides]
    proc = subprocess.run(cmd, check=False)
    summary = runs.read_summary(run_dir) or {}
    if proc.returncode != 0 and summary.get("status") != "diverged":
        error = SweepError if proc.returncode == 2 else SweepRunFailed
        raise error(f"training run failed with exit code {proc.returncode}: {shlex.join(cmd)}")
    return summary.get("status", "stopped")
