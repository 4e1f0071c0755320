"""Pretraining with Accelerate: ``depthbench train`` and the :func:`train` API used by sweeps.

The same command runs on CPU, one GPU, or under ``accelerate launch`` / ``torchrun`` with DDP or FSDP2::

    depthbench train -c src/depthbench/configs/demo.yaml --arch pre_ln --shape tiny-L4 --data runs/demo-data \\
        --output runs/demo train.max_steps=200 track.tensorboard=true
    depthbench train -c runs/demo/run_config.json --resume            # continue the latest checkpoint
    accelerate launch --config_file src/depthbench/configs/fsdp2.yaml -m depthbench.training -c 400m.yaml ...
    torchrun --nproc_per_node 8 -m depthbench.training -c 400m.yaml ...   # DDP
    torchrun --nproc_per_node 8 -m depthbench.training -c 400m.yaml train.parallelism=fsdp2   # FSDP2 as well

FSDP2 is the trainer's own sharding (``depthbench.training.sharding``), the same code on CPU and GPU.

Python API (stable; the sweep runner builds on it)::

    from depthbench.config import load_run_config
    from depthbench.training import train
    cfg = load_run_config("run.yaml", ["train.max_steps=100", "model.shape=tiny-L4"])
    summary = train(cfg)   # dict, also written to <output_dir>/summary.json

``summary`` keys: ``status`` ("finished" | "stopped"), ``final_train_loss``, ``eval`` ({split: loss}), ``tokens``,
``steps``, ``wall_time_s`` (this session), ``tokens_per_s``, ``parameters`` (config counts incl. ``total``),
``num_parameters`` (counted on the model), ``output_dir``, ``final_dir``, ``profile`` (with ``train.profile``).
A non-finite loss raises :class:`NonFiniteLossError` (the last good checkpoint is kept, summary status
"diverged"); bad inputs raise ``ValueError`` subclasses whose messages name the file or key.

Stop signals (SIGTERM, SIGINT, ``train.preempt_signal`` = SIGUSR1 by default) to any or all ranks: every rank
finishes the current step, one checkpoint is written by all, status "stopped", exit 0. Resume continues from
``checkpoints/latest`` (or the newest complete checkpoint when the pointer is missing), also with another number of
processes or micro-batch size. What exactly is guaranteed: docs/reliability.md#what-is-guaranteed.

The run folder (``output_dir``) and its files: :mod:`depthbench.runs`.

Recipe (the study's pretraining recipe): AdamW (0.9, 0.95), eps 1e-8, weight decay 0.1 except norm gains, biases
and each architecture's ``no_decay`` parameters (static mixing, pseudo-queries; the reference code decayed all of
these except HC statics, which pulls zero-initialised pseudo-queries towards uniform mixing --
``optim.decay_norms_and_biases=true`` restores that), LR linear warmup over 10 % of the steps (step s of the warmup
uses ``lr*(s+1)/warmup``) then cosine to ``0.1*lr`` at the last step, global-norm clip 1.0, mixed precision through
``Accelerator(mixed_precision="bf16")``: fp32 master weights + bf16 autocast (the reference code's bf16-only
weights, updated by AdamW without an fp32 master copy, are deliberately not reproduced). Gradient accumulation =
``global_batch_size / (micro_batch_size * world_size)`` (must divide). The data order depends only on the seed and
the global batch, so 1 process and N processes see the same sequences per optimizer step.

MFU and the ``--profile`` overhead: ``depthbench.training.metrics``.
"""

from __future__ import annotations

import contextlib
import math
import time

from depthbench.config import RunConfig
from depthbench.training.run import Run
from depthbench.training.run_folder import release_output_dir
from depthbench.training.signals import StopFlag


def train(cfg: RunConfig) -> dict:
    """Train ``cfg`` (resuming when ``cfg.resume``) and return the run summary (see the module docstring)."""
    stop = StopFlag(cfg.train.preempt_signal)
    with stop.installed():  # from the start: a stop signal during setup stops after the first step
        try:
            run = Run(cfg)
            stop.acc = run.accelerator
            return _loop(run, stop)
        finally:
            release_output_dir(cfg.output_dir)  # the run folder's lease (taken in Run: run_folder.prepare_output_dir)


def _loop(run: Run, stop: StopFlag) -> dict:
    state, cfg = run.state, run.cfg
    if state.step >= run.max_steps:  # resuming a run that already finished: keep its summary and export as they are
        previous = run.finished_summary()
        if previous is not None:
            return previous
    batches = run.loader.global_micro_batches()
    status, t_session, timings = "finished", time.perf_counter(), []
    with run.progress_bar() as bar:
        for step in range(state.step + 1, run.max_steps + 1):
            t0 = time.perf_counter()
            micro_batches = next(batches)
            t_data = time.perf_counter() - t0
            capture = run.stats is not None and step % cfg.train.layer_stats_every == 0
            with run.stats.capture() if capture else contextlib.nullcontext():
                loss, grad_norm, t_model = run.optimizer_step(micro_batches)
            state.step, state.tokens, state.loader = step, state.tokens + run.tokens_per_step, run.loader.state_dict()
            state.last_train_loss = loss
            if not math.isfinite(loss):
                run.diverged(step, loss)
            row = run.metrics.row(loss, run.lr, grad_norm, state.tokens, t_step=time.perf_counter() - t0)
            if capture:
                row.update(run.collect_layer_stats())
            if step % cfg.train.log_every == 0 or capture or step == run.max_steps:
                run.log(row, step)
            bar.set_postfix(run.metrics.postfix(row), refresh=False)  # before update: a line shows this step's loss
            bar.update(1)
            timings.append((time.perf_counter() - t0, t_model, t_data))
            if run.eval_sets and (step == run.max_steps or (cfg.train.eval_every and step % cfg.train.eval_every == 0)):
                state.last_eval = run.evaluate()
                run.log({f"eval/{k}/loss": v for k, v in state.last_eval.items()}, step)
            stopping = stop.requested() or step == cfg.train.stop_at_step
            if step == run.max_steps or stopping or (cfg.checkpoint.every and step % cfg.checkpoint.every == 0):
                run.save_checkpoint(time.perf_counter() - t_session)
            if stopping:
                status = "stopped"
                break
    return run.finish(status, time.perf_counter() - t_session, timings, stop.signal_name)
