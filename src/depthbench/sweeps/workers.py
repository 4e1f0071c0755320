"""Sweep points in parallel local processes (``depthbench sweep --workers N``, and the demo on a multi-core CPU).

Small models on a CPU use one core badly: their matrices are too small for torch's intra-op threads, so two runs
side by side, one thread each, finish sooner than the same two runs one after another with two threads each (the
measurement is in docs/benchmarks.md, "the demo at five tokens per parameter"). :func:`run_in_workers` keeps ``workers``
spawned processes busy, each training one point at a time with ``torch.set_num_threads(threads)``; every run is the
same ordinary training run as with ``--workers 1`` (the same folder, resume and summary), so the results do not depend
on how many workers trained them.

Each worker writes what the trainer prints (progress, as plain lines: :mod:`depthbench.progress`; warnings) to
``<run>/console.log``; the calling process
prints one line when a run starts and one when it ends. Stop signals: SIGINT or SIGTERM to the calling process (or
Ctrl-C, which reaches every process of the terminal's group) stops the runs in flight after their current step,
checkpointed, and starts no new one; running the same command again resumes them. A run that fails stops the others
the same way before its error is raised.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from depthbench.errors import Failed

TrainPoint = Callable[[Any, Callable[..., None], str], str]
"""How a worker trains a point: ``train(config, log, run_dir) -> status``
(``depthbench.sweeps.runner.train_point``; a module-level function, so that it pickles by name)."""

CONSOLE_LOG = "console.log"
"""What a worker's run printed, in its run folder."""


class WorkerFailed(Failed, RuntimeError):
    """A worker process failed outside the training function's own errors (it died, or raised something else);
    the message names the run and points at its ``console.log``."""


@dataclass(frozen=True)
class Job:
    """One point to train: its label (the run id), its run config (built once, by the launcher), its folder, what
    happens to it (``training`` or ``resuming``) and the overrides of the sweep's base config that make its config
    (what ``accelerate launch`` passes to each run's processes)."""

    label: str
    config: Any
    run_dir: str
    action: str = "training"
    overrides: tuple[str, ...] | list[str] = ()


def _init_worker(threads: int) -> None:
    """Worker start: ``threads`` torch threads, and stop signals ignored between runs (the trainer installs its own
    handler while it trains, so a signal reaches the run in flight and never kills an idle worker)."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import torch

    torch.set_num_threads(threads)


def _train_job(train: TrainPoint, job: Job) -> tuple[str, float]:
    """``train`` one job in a worker with its output in ``<run>/console.log``; returns ``(status, seconds)``."""
    os.makedirs(job.run_dir, exist_ok=True)
    t0 = time.perf_counter()
    with open(os.path.join(job.run_dir, CONSOLE_LOG), "a", encoding="utf-8") as log, _redirected(log):
        status = train(job.config, lambda *a: print(*a, file=sys.stderr), job.run_dir)
    return status, time.perf_counter() - t0


@contextlib.contextmanager
def _redirected(file):
    """Point file descriptors 1 and 2 (and ``sys.stdout`` / ``sys.stderr``) at ``file`` while the block runs."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(file.fileno(), 1)
        os.dup2(file.fileno(), 2)
        with contextlib.redirect_stdout(file), contextlib.redirect_stderr(file):
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        file.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def _stop_workers() -> None:
    """SIGTERM to every worker: the trainer checkpoints after its current step and returns ``stopped``."""
    for child in multiprocessing.active_children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGTERM)


@contextlib.contextmanager
def _forwarded_stop_signals(stopping: list[str]):
    """While the pool runs, SIGINT / SIGTERM to this process stop the workers' runs instead of raising here."""
    def handler(signum, frame):
        if not stopping:
            stopping.append(signal.Signals(signum).name)
            print(f"{stopping[0]} received: stopping the runs in flight after their current step (checkpointed)",
                  file=sys.stderr, flush=True)
        _stop_workers()

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run_in_workers(jobs: list[Job], train: TrainPoint, workers: int, *, threads: int = 1,
                   on_done: Callable[[Job, str, float], None] = lambda job, status, seconds: None,
                   log: Callable[..., None] = print) -> str:
    """``train`` every job, at most ``workers`` at a time in spawned processes; ``on_done(job, status, seconds)`` runs
    here after each. Returns ``"finished"`` when every job ran to its end (finished or diverged), ``"stopped"`` after
    a stop signal. The first error of a job is raised once the other runs in flight have stopped."""
    pending = list(jobs)
    running: dict[Future, Job] = {}
    stopping: list[str] = []
    error: BaseException | None = None
    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold torch's threads
    with _forwarded_stop_signals(stopping), ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_init_worker, initargs=(threads,)) as pool:
        while pending or running:
            while pending and len(running) < workers and not stopping and error is None:
                job = pending.pop(0)
                log(f"{job.label}: {job.action} (in a worker)")
                running[pool.submit(_train_job, train, job)] = job
            if not running:
                break
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                try:
                    status, seconds = future.result()
                except BaseException as exc:  # noqa: BLE001  (raised below, after the others stopped)
                    if error is None:  # bad input and failed runs (ValueErrors) carry their own message
                        error = exc if isinstance(exc, ValueError) else WorkerFailed(
                            f"{job.label} failed in its worker process ({type(exc).__name__}: {exc}); its output is "
                            f"in {os.path.join(job.run_dir, CONSOLE_LOG)}. Run the same command again to continue "
                            "(finished runs are skipped)")
                        _stop_workers()
                    continue
                if status == "stopped" and not stopping:
                    stopping.append("a stopped run")
                on_done(job, status, seconds)
    if error is not None:
        raise error
    return "stopped" if stopping else "finished"
