"""Pretraining with Accelerate: ``depthbench train`` and the :func:`train` API used by sweeps.

The same command runs on CPU, one GPU, or under ``accelerate launch`` / ``torchrun`` with DDP or FSDP2::

    depthbench train -c src/depthbench/configs/demo.yaml --arch pre_ln --shape tiny-L4 --data runs/demo-data \\
        --output runs/demo train.max_steps=200 track.tensorboard=true
    depthbench train -c runs/demo/run_config.json --resume            # continue the latest checkpoint
    accelerate launch --config_file src/depthbench/configs/fsdp2.yaml -m depthbench.training -c 400m.yaml ...
    torchrun --nproc_per_node 8 -m depthbench.training -c 400m.yaml ...   # DDP

Python API (stable; the sweep runner builds on it)::

    from depthbench.config import load_run_config
    from depthbench.training.trainer import train
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
processes or micro-batch size. What exactly is guaranteed: the README's "Safety and reliability" section.

Run directory (``output_dir``)::

    run_config.json          {"config": RunConfig as dict, "resolved": world size, accumulation, steps, model config}
    metrics.jsonl            one JSON object per logged step: step, tokens, train/loss, train/lr, train/grad_norm,
                             perf/tokens_per_s, perf/mfu, eval/<split>/loss, layer_stats/block_XX/...
    checkpoints/latest       name of the newest complete checkpoint (replaced atomically)
    checkpoints/ckpt-000100/ state/ (accelerate save_state: model, optimizer, scheduler, RNG), hf/ (HF export +
                             tokenizer), trainer_state.json (step, tokens, data-loader position, file manifest)
    final/                   HF export of the finished model (AutoModelForCausalLM.from_pretrained(final))
    summary.json             the dict returned by train()
    tensorboard/             with track.tensorboard=true

Recipe (the study's pretraining recipe): AdamW (0.9, 0.95), eps 1e-8, weight decay 0.1 except norm gains, biases
and each architecture's ``no_decay`` parameters (static mixing, pseudo-queries; the reference code decayed all of
these except HC statics, which pulls zero-initialised pseudo-queries towards uniform mixing --
``optim.decay_norms_and_biases=true`` restores that), LR linear warmup over 10 % of the steps (step s of the warmup
uses ``lr*(s+1)/warmup``) then cosine to ``0.1*lr`` at the last step, global-norm clip 1.0, mixed precision through
``Accelerator(mixed_precision="bf16")``: fp32 master weights + bf16 autocast (the reference code's bf16-only
weights, updated by AdamW without an fp32 master copy, are deliberately not reproduced). Gradient accumulation =
``global_batch_size / (micro_batch_size * world_size)`` (must divide). The data order depends only on the seed and
the global batch, so 1 process and N processes see the same sequences per optimizer step.

MFU = ``6 * N * tokens_per_s / (peak_flops * world_size)`` with N = parameters without the input embedding
(attention score FLOPs are ignored, as in the usual 6N rule). ``track.peak_flops`` sets the per-device peak;
the default is the dense bf16 peak of known GPUs (A100 312, H100/H200 989, B200 2250 TFLOP/s, ...); on CPU or an
unknown device MFU is not reported unless ``track.peak_flops`` is given.

Overhead (``train.profile=true`` / ``--profile``; summary["profile"]): the share of step time outside
forward/backward/optimizer and the data wait (first step excluded); measured figures are in the README's benchmark
section.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
import warnings
from typing import Any

import torch

from depthbench import atomic
from depthbench.config import RunConfig, RunConfigError, load_run_config, signal_number
from depthbench.data import TokenShards, TokenWindows, WindowLoader, verify_data
from depthbench.errors import run_command
from depthbench.training.checkpoint import (  # noqa: F401 - IDENTITY_KEYS: re-exported, moved from here
    IDENTITY_KEYS,
    Checkpointer,
    CheckpointError,
    CheckpointWriteError,
    TrainerState,
    TrainingError,
    agree,
    prepare_output_dir,
    truncate_metrics,
)
from depthbench.training.layer_stats import LayerStats
from depthbench.training.optim import param_groups as shared_param_groups

#: Dense bf16 peak FLOP/s per device, matched by substring of ``torch.cuda.get_device_name()`` (first match wins).
PEAK_FLOPS = (
    ("GB200", 2.5e15), ("B200", 2.25e15), ("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12),
    ("H800", 989e12), ("A100", 312e12), ("A800", 312e12), ("L40S", 362e12), ("L40", 181e12), ("L4", 121e12),
    ("A10G", 70e12), ("A10", 125e12), ("RTX 4090", 165e12), ("RTX 3090", 71e12), ("V100", 125e12),
)


class NonFiniteLossError(TrainingError):
    """The training loss became NaN/inf; the run stopped and kept its last good checkpoint."""


# ================================================================================================ the loop
def train(cfg: RunConfig) -> dict:
    """Train ``cfg`` (resuming when ``cfg.resume``) and return the run summary (see the module docstring)."""
    stop = _StopFlag(cfg.train.preempt_signal)
    with stop.installed():  # from the start: a stop signal during setup stops after the first step
        run = _Run(cfg)
        stop.acc = run.accelerator
        return _loop(run, stop)


def _loop(run: _Run, stop: _StopFlag) -> dict:
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
            row = run.train_metrics(step, loss, grad_norm, t_step=time.perf_counter() - t0)
            if capture:
                row.update(run.collect_layer_stats())
            if step % cfg.train.log_every == 0 or capture or step == run.max_steps:
                run.log(row, step)
            bar.update(1)
            bar.set_postfix(run.postfix(row), refresh=False)
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


def _forward_loss(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of one micro-batch (a module-level function so tests can inject NaNs)."""
    return model(input_ids=input_ids, labels=input_ids, use_cache=False).loss


# ================================================================================================ run setup
class _Run:
    """Everything the loop needs, built from the config: accelerator, model, optimizer, data, checkpoints."""

    def __init__(self, cfg: RunConfig):
        from accelerate import Accelerator, PartialState
        from accelerate.state import AcceleratorState, GradientState
        from accelerate.utils import ProjectConfiguration, set_seed

        self.cfg = cfg
        self.t_start = time.perf_counter()
        if cfg.data.data_dir is None:
            raise RunConfigError("data.data_dir is required (a folder made by `depthbench prepare-data`)")
        cpu = cfg.train.cpu or not torch.cuda.is_available()
        AcceleratorState._reset_state()  # fresh settings per train() call (partial state keeps the process group)
        GradientState._reset_state()
        world = PartialState(cpu=cpu).num_processes
        group = cfg.train.micro_batch_size * world
        if cfg.train.global_batch_size % group:
            raise RunConfigError(
                f"train.global_batch_size={cfg.train.global_batch_size} is not divisible by train.micro_batch_size * "
                f"world_size = {cfg.train.micro_batch_size} * {world}; choose a global batch that is a multiple "
                f"of {group}")
        self.accum = cfg.train.global_batch_size // group
        trackers = _trackers(cfg)
        self.accelerator = acc = Accelerator(
            cpu=cpu, mixed_precision=_mixed_precision(cfg, cpu), gradient_accumulation_steps=self.accum,
            log_with=trackers or None, step_scheduler_with_optimizer=False,
            project_config=ProjectConfiguration(project_dir=cfg.output_dir,
                                                logging_dir=os.path.join(cfg.output_dir, "tensorboard")))
        self.main = acc.is_main_process
        self.start = prepare_output_dir(cfg, acc)
        self.resume_from = self.start.checkpoint

        # ---- data
        self.shards = _open_split(cfg.data.data_dir, "train")
        if not os.path.isdir(self.shards.tokenizer_dir):
            raise RunConfigError(
                f"the data folder {cfg.data.data_dir} has no tokenizer ({self.shards.tokenizer_dir} is missing): the "
                "checkpoints' hf/ exports and final/ would have no tokenizer and could not be evaluated; copy the "
                f"tokenizer used by prepare-data (meta.json: {self.shards.meta.get('tokenizer')!r}) there with "
                "tokenizer.save_pretrained, or re-run depthbench prepare-data")
        self.windows = TokenWindows(self.shards, cfg.data.seq_len)
        self.loader = WindowLoader(self.windows, cfg.train.micro_batch_size, cfg.train.seed, rank=acc.process_index,
                                   world_size=world, grad_accum=self.accum, prefetch=cfg.data.prefetch)
        self.eval_sets = {}
        for split in _eval_splits(cfg, self.shards.meta):
            windows = TokenWindows(_open_split(cfg.data.data_dir, split, allow_empty=True), cfg.data.seq_len)
            if len(windows) == 0:
                warnings.warn(f"eval split {split!r} has fewer than data.seq_len={cfg.data.seq_len} tokens; skipped",
                              stacklevel=2)
                continue
            self.eval_sets[split] = windows
        self.tokens_per_step = cfg.train.global_batch_size * cfg.data.seq_len
        self.max_steps = cfg.train.max_steps or (
            math.ceil(cfg.train.max_tokens / self.tokens_per_step) if cfg.train.max_tokens else None)
        if self.max_steps is None:
            raise RunConfigError("give train.max_steps or train.max_tokens (the run length)")

        # ---- model and optimizer
        set_seed(cfg.train.seed)
        self.arch_id, self.model_config = build_model_config(cfg, self.shards)
        self.check_data()
        # imported here: the registry loads torch, transformers and every architecture (import cost)
        from depthbench import registry

        model = registry.build_model(self.arch_id, config=self.model_config)
        model.set_attn_implementation(cfg.model.attn_implementation)
        if cfg.model.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        self.num_parameters = sum(p.numel() for p in model.parameters())
        self.flops_per_token = 6 * (self.num_parameters - model.get_input_embeddings().weight.numel())
        optimizer = torch.optim.AdamW(param_groups(model, cfg.optim), lr=cfg.optim.lr, betas=tuple(cfg.optim.betas),
                                      eps=cfg.optim.eps)
        self.warmup = (cfg.optim.warmup_steps if cfg.optim.warmup_steps is not None
                       else round(cfg.optim.warmup_fraction * self.max_steps))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_lambda(self.warmup, self.max_steps, cfg.optim.min_lr_ratio))
        if cfg.model.compile:  # in place: same module and parameter names (depthbench.training.compiled)
            from depthbench.training.compiled import compile_model

            compile_model(model, scope=cfg.model.compile_scope)
        self.model, self.optimizer = acc.prepare(model, optimizer)
        acc.register_for_checkpointing(self.scheduler)  # stepped by us once per optimizer step (not per process)
        self.stats = None
        if cfg.train.layer_stats_every:
            self.stats = LayerStats(acc.unwrap_model(self.model),
                                    grad_scale=cfg.train.micro_batch_size * (cfg.data.seq_len - 1) * self.accum)
        self.peak_flops = cfg.track.peak_flops or _default_peak_flops(acc.device)

        # ---- state: fresh or resumed
        self.checkpoints = Checkpointer(os.path.join(cfg.output_dir, "checkpoints"), acc, cfg.checkpoint.keep_last,
                                        cfg.checkpoint.hash_files)
        self.state = TrainerState()
        if self.resume_from:
            self.state = self.checkpoints.load(self.resume_from)
            # the restored micro-step counter belongs to the saved accumulation; a checkpoint is always taken at an
            # optimizer-step boundary, so counting from 0 is right for any micro-batch size / world size
            acc.step = 0
            self.loader.load_state_dict(self.state.loader)
            self.apply_resume_changes()
        self.metrics_path = os.path.join(cfg.output_dir, "metrics.jsonl")
        if self.main:
            truncate_metrics(self.metrics_path, self.state.step)
            atomic.write_json(os.path.join(cfg.output_dir, "run_config.json"), self.run_config_record())
        if trackers:
            run_name = cfg.track.run_name or os.path.basename(os.path.abspath(cfg.output_dir))
            acc.init_trackers(cfg.track.project, config=_flat_hparams(cfg.to_dict()),
                              init_kwargs={"wandb": {"name": run_name}} if cfg.track.wandb else {})
        acc.wait_for_everyone()

    def check_data(self) -> None:
        """Verify the shards' content against meta.json (``data.verify``; on the main process, every rank stops on
        a failure) and refuse token ids outside the model's vocabulary (also per batch, naming shard and offset)."""
        cfg, acc = self.cfg, self.accelerator
        vocab = self.model_config.vocab_size
        for shards in [self.shards, *(w.shards for w in self.eval_sets.values())]:
            shards.vocab_limit = vocab
        error = None
        if self.main and cfg.data.verify != "off":
            try:
                verify_data(cfg.data.data_dir, ["train", *self.eval_sets], force=cfg.data.verify == "always",
                            vocab_size=vocab, progress=cfg.train.progress)
            except (ValueError, OSError) as exc:
                error = exc
        agree(acc, error)

    def apply_resume_changes(self) -> None:
        """Apply what may change on resume (a new ``optim.lr`` rescales the schedule's base LRs; a new
        ``train.max_steps`` recomputes the LR of the current step) and say what changes."""
        changes = self.start.changes
        old_max = (self.start.resolved or {}).get("max_steps")
        lr_changed = "optim.lr" in changes
        if lr_changed:
            ratio = self.cfg.optim.lr / changes["optim.lr"][0]
            self.scheduler.base_lrs = [b * ratio for b in self.scheduler.base_lrs]
            for group, base in zip(self.optimizer.param_groups, self.scheduler.base_lrs):
                group["initial_lr"] = base
        if lr_changed or (old_max is not None and old_max != self.max_steps):
            factor = self.scheduler.lr_lambdas[0](self.scheduler.last_epoch)
            for group, base in zip(self.optimizer.param_groups, self.scheduler.base_lrs):
                group["lr"] = base * factor
            self.scheduler._last_lr = [g["lr"] for g in self.optimizer.param_groups]
        if not self.main:
            return
        say = lambda msg: print(f"depthbench train: {msg}", file=sys.stderr)  # noqa: E731
        if changes:
            listed = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())
            say(f"resuming at step {self.state.step} with changed settings: {listed} (recorded in run_config.json "
                "history)")
        if old_max is not None and old_max != self.max_steps:
            old_warmup = (self.start.resolved or {}).get("warmup_steps")
            say(f"the run length changes from {old_max} to {self.max_steps} steps: the LR schedule changes from step "
                f"{self.state.step + 1} on (warmup {old_warmup} -> {self.warmup} steps, cosine decay now ends at step "
                f"{self.max_steps}); the result equals neither a {old_max}- nor a {self.max_steps}-step run")

    def run_config_record(self) -> dict:
        import transformers

        history = list(self.start.history)
        if self.resume_from:
            history.append({"resumed_at_step": self.state.step, "checkpoint": os.path.basename(self.resume_from),
                            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            "world_size": self.accelerator.num_processes, "changes": self.start.changes})
        config = self.cfg.to_dict()
        config["data"]["data_dir"] = os.path.abspath(config["data"]["data_dir"])  # a later resume may use another cwd
        return {
            "history": history,
            "config": config,
            "resolved": {
                "arch": self.arch_id, "world_size": self.accelerator.num_processes,
                "grad_accum_steps": self.accum, "max_steps": self.max_steps, "warmup_steps": self.warmup,
                "tokens_per_step": self.tokens_per_step, "mixed_precision": self.accelerator.mixed_precision,
                "distributed_type": str(self.accelerator.distributed_type), "num_parameters": self.num_parameters,
                "parameter_counts": self.model_config.parameter_counts(),
                "model_config": self.model_config.to_dict(),
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            },
        }

    # ------------------------------------------------------------------------------------------------ step
    def optimizer_step(self, micro_batches: list[torch.Tensor]) -> tuple[float, float, float]:
        """Forward/backward every micro-batch, clip, step; returns (global mean loss, grad norm, seconds)."""
        acc, t0 = self.accelerator, time.perf_counter()
        self.model.train()
        losses, grad_norm = [], torch.tensor(float("nan"))
        for batch in micro_batches:
            batch = batch.to(acc.device, non_blocking=True)
            with acc.accumulate(self.model):
                loss = _forward_loss(self.model, batch)
                acc.backward(loss)  # divides by the accumulation steps
                losses.append(loss.detach().float())
                if acc.sync_gradients:
                    grad_norm = acc.clip_grad_norm_(self.model.parameters(), self.cfg.optim.grad_clip or math.inf)
                self.optimizer.step()  # no-op on non-sync micro-steps
                self.optimizer.zero_grad(set_to_none=True)
        if not acc.sync_gradients:
            raise TrainingError("internal error: gradient accumulation fell out of step with the optimizer steps")
        self.lr = self.scheduler.get_last_lr()[0]  # the LR this step used
        self.scheduler.step()
        if self.cfg.train.profile and acc.device.type == "cuda":
            torch.cuda.synchronize()
        t_model = time.perf_counter() - t0
        loss = acc.reduce(torch.stack(losses).mean(), reduction="mean")
        return float(loss), float(grad_norm), t_model

    def train_metrics(self, step: int, loss: float, grad_norm: float, t_step: float) -> dict:
        tokens_per_s = self.tokens_per_step / max(t_step, 1e-9)
        row = {"train/loss": loss, "train/lr": self.lr, "train/grad_norm": grad_norm,
               "tokens": self.state.tokens, "perf/tokens_per_s": tokens_per_s, "perf/step_time_s": t_step}
        if self.peak_flops:
            row["perf/mfu"] = self.flops_per_token * tokens_per_s / (self.peak_flops * self.accelerator.num_processes)
        return row

    def postfix(self, row: dict) -> dict:
        out = {"loss": f"{row['train/loss']:.4f}", "tok/s": f"{row['perf/tokens_per_s']:.3g}"}
        if "perf/mfu" in row:
            out["mfu"] = f"{100 * row['perf/mfu']:.1f}%"
        return out

    def collect_layer_stats(self) -> dict:
        self.stats.all_reduce(lambda t: self.accelerator.reduce(t, reduction="sum"))
        metrics = self.stats.metrics()
        self.stats.reset()
        return metrics

    def log(self, row: dict, step: int) -> None:
        if self.main:
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(atomic.json_safe({"step": step, **row})) + "\n")
        if self.accelerator.trackers:
            self.accelerator.log(row, step=step)

    @contextlib.contextmanager
    def progress_bar(self):
        from tqdm.auto import tqdm

        bar = tqdm(total=self.max_steps, initial=self.state.step, desc="train", unit="step", dynamic_ncols=True,
                   disable=not (self.main and self.cfg.train.progress))
        try:
            yield bar
        finally:
            bar.close()

    # ------------------------------------------------------------------------------------------------ eval
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Mean next-token loss per eval split over its first ``data.eval_sequences`` windows.

        Windows are taken in order (no shuffling) and strided over ranks, so the result does not depend on the
        world size; every rank runs the same number of forwards (empty slots are filled with window 0 at weight 0),
        so FSDP collectives stay matched.
        """
        acc, mb, world = self.accelerator, self.cfg.train.micro_batch_size, self.accelerator.num_processes
        self.model.eval()
        results = {}
        for split, windows in self.eval_sets.items():
            n = min(len(windows), self.cfg.eval_sequences)
            mine = list(range(acc.process_index, n, world))
            num_batches = math.ceil(math.ceil(n / world) / mb)
            total = torch.zeros(2, dtype=torch.float64, device=acc.device)  # [sum of losses * tokens, tokens]
            for b in range(num_batches):
                idx = mine[b * mb:(b + 1) * mb]
                ids = windows.get_batch(idx or [0]).to(acc.device)
                loss = _forward_loss(self.model, ids).double()
                tokens = len(idx) * (ids.shape[1] - 1)
                total += torch.stack([loss * tokens, torch.tensor(float(tokens), device=acc.device).double()])
            total = acc.reduce(total, reduction="sum")
            results[split] = float(total[0] / total[1]) if float(total[1]) > 0 else math.nan
        self.model.train()
        return results

    # ------------------------------------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, session_time: float) -> None:
        self.state.train_time_s += session_time - getattr(self, "_time_saved", 0.0)
        self._time_saved = session_time
        tokenizer_dir = self.shards.tokenizer_dir
        self.checkpoints.save(self.state, self.model, tokenizer_dir if os.path.isdir(tokenizer_dir) else None,
                              hf_export=self.cfg.checkpoint.hf_export)

    def diverged(self, step: int, loss: float) -> None:
        latest = self.checkpoints.latest_path()
        where = f"the last good checkpoint is {latest}" if latest else "no checkpoint was written before it"
        summary = self.summary("diverged", time.perf_counter() - self.t_start, [], None)
        if self.main:
            atomic.write_json(os.path.join(self.cfg.output_dir, "summary.json"), summary)
        raise NonFiniteLossError(
            f"non-finite training loss ({loss}) at step {step}: stopping; {where}. Check the data, or continue from "
            f"the checkpoint with a lower learning rate: depthbench train -c "
            f"{os.path.join(self.cfg.output_dir, 'run_config.json')} --resume optim.lr=<lower>")

    # ------------------------------------------------------------------------------------------------ finish
    def finished_summary(self) -> dict | None:
        """The stored summary of this run if it already finished (``None`` otherwise); closes the trackers."""
        path = os.path.join(self.cfg.output_dir, "summary.json")
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
        if summary.get("status") != "finished":
            return None
        if self.main:
            print(f"depthbench train: {self.cfg.output_dir} already finished at step {summary.get('steps')}; "
                  "nothing to do (summary.json and final/ left unchanged)", file=sys.stderr)
        for tracker in self.accelerator.trackers:
            tracker.finish()
        self.accelerator.wait_for_everyone()
        return summary

    def finish(self, status: str, session_time: float, timings: list, signal_name: str | None) -> dict:
        acc = self.accelerator
        final_dir = None
        if status == "finished":
            final_dir = os.path.join(self.cfg.output_dir, "final")
            self.checkpoints.export_hf(final_dir, self.model, self.shards.tokenizer_dir)
        summary = self.summary(status, session_time, timings, final_dir)
        if signal_name:
            summary["stopped_by"] = signal_name
        if self.main:
            atomic.write_json(os.path.join(self.cfg.output_dir, "summary.json"), summary)
        for tracker in acc.trackers:  # not acc.end_training(): it destroys the process group (train() may run again)
            tracker.finish()
        acc.wait_for_everyone()
        return summary

    def summary(self, status: str, session_time: float, timings: list, final_dir: str | None) -> dict:
        trained = sum(1 for _ in timings) * self.tokens_per_step
        out = {
            "status": status, "arch": self.arch_id, "final_train_loss": self.state.last_train_loss,
            "eval": dict(self.state.last_eval), "tokens": self.state.tokens, "steps": self.state.step,
            "max_steps": self.max_steps, "wall_time_s": session_time,
            "tokens_per_s": trained / max(sum(t for t, _, _ in timings), 1e-9) if timings else None,
            "parameters": self.model_config.parameter_counts(), "num_parameters": self.num_parameters,
            "world_size": self.accelerator.num_processes, "output_dir": os.path.abspath(self.cfg.output_dir),
            "final_dir": os.path.abspath(final_dir) if final_dir else None,
        }
        if self.cfg.train.profile:
            out["profile"] = profile_summary(timings)
        return out


def profile_summary(timings: list[tuple[float, float, float]]) -> dict:
    """Share of step time spent outside forward/backward/optimizer (first step = warm-up, excluded)."""
    rows = timings[1:] or timings
    if not rows:
        return {}
    step = sum(t for t, _, _ in rows)
    model = sum(m for _, m, _ in rows)
    data = sum(d for _, _, d in rows)
    return {"steps": len(rows), "step_time_s": step / len(rows), "model_time_s": model / len(rows),
            "data_wait_s": data / len(rows), "overhead_fraction": (step - model) / step if step else 0.0,
            "data_wait_fraction": data / step if step else 0.0}


# ================================================================================================ helpers
def build_model_config(cfg: RunConfig, shards) -> tuple[str, Any]:
    """``(architecture id, HF config)`` of the model to train, from ``model.config_path`` or ``model.arch`` +
    ``model.shape`` + ``model.fields``. The vocabulary size is ``model.vocab_size``, else the one of the config
    file / shape / fields, else the data's tokenizer size; the tokenizer must fit into it.

    Raises:
        ValueError: Unknown architecture/shape, the tokenizer's vocabulary exceeds the model's, or
            ``data.seq_len`` exceeds the model's ``max_position_embeddings``.
    """
    # imported here: the registry and the shapes load transformers and every architecture (import cost)
    from depthbench import registry
    from depthbench.shapes import get_shape

    m = cfg.model
    fields: dict[str, Any] = {}
    arch = m.arch
    if m.config_path:
        path = os.path.join(m.config_path, "config.json") if os.path.isdir(m.config_path) else m.config_path
        if not os.path.isfile(path):
            raise RunConfigError(f"model.config_path: {path} does not exist")
        with open(path, encoding="utf-8") as f:
            fields = json.load(f)
        model_type = fields.pop("model_type", None)
        for key in ("architectures", "auto_map", "transformers_version", "torch_dtype", "dtype"):
            fields.pop(key, None)
        if arch is None:
            matches = [a.id for a in registry.ARCHITECTURES.values() if a.model_type == model_type]
            if not matches:
                raise RunConfigError(f"model.config_path {path}: model_type {model_type!r} is not a depthbench "
                                     f"architecture; set model.arch (one of {', '.join(registry.arch_ids())})")
            arch = matches[0]
    elif m.shape:
        fields = dict(get_shape(m.shape).config_fields())
    if arch is None:
        raise RunConfigError("model.arch is required unless model.config_path names a depthbench config")
    registry.get(arch)
    _check_field_names(registry.get(arch).config_class, m.fields)
    fields.update(m.fields)
    data_vocab = shards.vocab_size
    vocab = m.vocab_size or fields.get("vocab_size") or data_vocab
    if vocab < data_vocab:
        raise RunConfigError(
            f"the tokenizer's vocabulary ({data_vocab} tokens, {os.path.join(shards.data_dir, 'meta.json')}) exceeds "
            f"the model's vocab_size={vocab}; use a model with vocab_size >= {data_vocab} or re-tokenize the data")
    fields["vocab_size"] = vocab
    fields.setdefault("eos_token_id", shards.eos_token_id)
    fields.setdefault("pad_token_id", shards.pad_token_id)
    try:
        config = registry.build_config(arch, **fields)
    except (TypeError, ValueError) as exc:
        raise RunConfigError(f"invalid model config for {arch!r}: {exc}") from exc
    if cfg.data.seq_len > config.max_position_embeddings:
        raise RunConfigError(
            f"data.seq_len={cfg.data.seq_len} exceeds the model's max_position_embeddings="
            f"{config.max_position_embeddings}; lower data.seq_len or set model.fields.max_position_embeddings")
    return arch, config


def _check_field_names(config_class, fields: dict) -> None:
    """Refuse ``model.fields`` keys the architecture's config class does not know (a typo would otherwise be
    stored as an unused attribute and the default size trained)."""
    import difflib
    import inspect

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


def param_groups(model: torch.nn.Module, optim) -> list[dict]:
    """AdamW parameter groups from ``depthbench.training.optim.param_groups`` (no decay on
    ``model.no_weight_decay_names()``:
    norm gains, biases, static mixing, pseudo-queries; per-architecture LR/eps rules). With
    ``optim.decay_norms_and_biases`` the no-decay groups get the base weight decay too (the reference's recipe).
    """
    groups = shared_param_groups(model, lr=optim.lr, weight_decay=optim.weight_decay, eps=optim.eps,
                                 betas=tuple(optim.betas))
    if optim.decay_norms_and_biases:
        for group in groups:
            if group["name"].endswith("/no_decay"):
                group["weight_decay"] = optim.weight_decay
    return groups


def lr_lambda(warmup: int, total: int, min_ratio: float):
    """LR multiplier for optimizer step ``s`` (0-based): ``(s+1)/warmup`` during warmup, then cosine from 1 at
    ``s = warmup`` to ``min_ratio`` at the last step ``s = total - 1``."""

    def factor(s: int) -> float:
        if s < warmup:
            return (s + 1) / warmup
        progress = min(max((s - warmup) / max(total - 1 - warmup, 1), 0.0), 1.0)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def _mixed_precision(cfg: RunConfig, cpu: bool) -> str:
    mp = cfg.train.mixed_precision
    if mp == "auto":
        return "bf16" if not cpu and torch.cuda.is_bf16_supported() else "no"
    return mp


def _trackers(cfg: RunConfig) -> list[str]:
    from accelerate.utils import is_tensorboard_available, is_wandb_available

    out = []
    for name, wanted, available in (("tensorboard", cfg.track.tensorboard, is_tensorboard_available),
                                    ("wandb", cfg.track.wandb, is_wandb_available)):
        if wanted and not available():
            raise RunConfigError(f"track.{name}=true but the {name!r} package is not installed: "
                                 f"`pip install {name}` or set track.{name}=false (metrics.jsonl is always written)")
        if wanted:
            out.append(name)
    return out


def _default_peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_FLOPS if key in name), None)


def _open_split(data_dir: str, split: str, allow_empty: bool = False):
    if not os.path.isdir(data_dir):
        raise RunConfigError(f"data.data_dir={data_dir!r} does not exist (prepare it with `depthbench prepare-data`)")
    try:
        shards = TokenShards(data_dir, split)
    except KeyError as exc:
        raise RunConfigError(f"{data_dir} has no {split!r} split: {exc}") from exc
    if shards.num_tokens == 0 and not allow_empty:
        raise RunConfigError(f"the {split!r} split of {data_dir} is empty (0 tokens)")
    return shards


def _eval_splits(cfg: RunConfig, meta: dict) -> list[str]:
    available = [s for s in meta["splits"] if s != "train"]
    if cfg.eval_sequences == 0:
        return []
    if cfg.data.eval_splits == "auto":
        return available
    missing = [s for s in cfg.data.eval_splits if s not in meta["splits"]]
    if missing:
        raise RunConfigError(f"data.eval_splits: {missing} not in {cfg.data.data_dir} (available: {available})")
    return list(cfg.data.eval_splits)


def _flat_hparams(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat_hparams(value, f"{name}."))
        else:
            out[name] = value if isinstance(value, (int, float, str, bool)) else str(value)
    return out


# ================================================================================================ signals
class _StopFlag:
    """Stop signals (SIGTERM, SIGINT and ``train.preempt_signal``) set a flag; the loop checkpoints and stops after
    the current step, on all ranks together (the flag is summed over ranks every step, so a signal to any one rank
    stops them all at the same step and every rank takes part in the one checkpoint).

    The handler stays installed until training ends: further copies of a stop signal (a scheduler signals every
    process of the job and ``torchrun`` forwards another copy to its workers) are counted and ignored, so nothing
    interrupts the checkpoint. Only SIGKILL ends the process before it.
    """

    def __init__(self, preempt_signal: str | None = None):
        self.acc = None
        self.signal_name: str | None = None
        self.received = 0
        self.signals = [signal.SIGTERM, signal.SIGINT]
        extra = signal_number(preempt_signal) if preempt_signal else None
        if extra is not None and extra not in self.signals:
            self.signals.append(signal.Signals(extra))

    @contextlib.contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.getsignal(s) for s in self.signals}

        def handler(signum, frame):
            self.received += 1
            if self.signal_name is None:
                self.signal_name = signal.Signals(signum).name
                print(f"depthbench train: {self.signal_name} received: checkpointing after the current step, then "
                      "exiting (further stop signals are ignored until then)", file=sys.stderr, flush=True)

        for s in previous:
            signal.signal(s, handler)
        try:
            yield self
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    def requested(self) -> bool:
        flag = self.signal_name is not None
        if self.acc is not None and self.acc.num_processes > 1:
            t = torch.tensor([1.0 if flag else 0.0], device=self.acc.device)
            flag = bool(self.acc.reduce(t, reduction="sum").item() > 0)
            if flag and self.signal_name is None:
                self.signal_name = "peer"
        return flag


# ================================================================================================ CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``depthbench train`` arguments (shared by ``python -m depthbench.training``)."""
    parser.add_argument("-c", "--config", help="run file (YAML or JSON; a saved run_config.json works too)")
    parser.add_argument("--arch", help="architecture id (model.arch)")
    parser.add_argument("--shape", help="named grid shape, e.g. tiny-L4 (model.shape)")
    parser.add_argument("--model-config", help="HF config.json to build the model from (model.config_path)")
    parser.add_argument("--data", help="prepared data folder (data.data_dir)")
    parser.add_argument("-o", "--output", help="run folder (output_dir)")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output")
    parser.add_argument("--overwrite", action="store_true", help="start over in an --output that holds a run")
    parser.add_argument("--layer-stats-every", type=int, help="log per-block statistics every N steps")
    parser.add_argument("--profile", action="store_true", help="report the share of step time outside the model")
    parser.add_argument("--verify-data", action="store_true",
                        help="hash every data shard against meta.json before training, ignoring the cache "
                             "(data.verify=always)")
    parser.add_argument("--preempt-signal", metavar="SIGNAL",
                        help="extra stop signal, e.g. SIGUSR1 for Slurm's --signal=USR1@90 (train.preempt_signal; "
                             "default SIGUSR1; 'none' to disable)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="dotted overrides, e.g. train.max_steps=100 optim.lr=1e-3")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Run config = file, then flags, then dotted overrides (later wins)."""
    flags = []
    for attr, key in (("arch", "model.arch"), ("shape", "model.shape"), ("model_config", "model.config_path"),
                      ("data", "data.data_dir"), ("output", "output_dir"),
                      ("layer_stats_every", "train.layer_stats_every")):
        value = getattr(args, attr, None)
        if value is not None:
            flags.append(f"{key}={json.dumps(value)}")
    if args.resume:
        flags.append("resume=true")
    if args.overwrite:
        flags.append("overwrite=true")
    if args.profile:
        flags.append("train.profile=true")
    if getattr(args, "verify_data", False):
        flags.append("data.verify=always")
    if getattr(args, "preempt_signal", None) is not None:
        value = None if args.preempt_signal.lower() in ("none", "null", "") else args.preempt_signal
        flags.append(f"train.preempt_signal={json.dumps(value)}")
    return load_run_config(args.config, flags + list(args.overrides))


def run_cli(args: argparse.Namespace) -> int:
    """Entry point of ``depthbench train`` (0 also when stopped by a signal after checkpointing; errors and their
    exit codes: ``depthbench.errors``)."""
    try:
        summary = train(config_from_args(args))
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    evals = ", ".join(f"{k} {v:.4f}" for k, v in summary["eval"].items())
    print(f"depthbench train: {summary['status']} at step {summary['steps']}/{summary['max_steps']}, "
          f"train loss {summary['final_train_loss']:.4f}" + (f", eval {evals}" if evals else "")
          + (f" ({summary['stopped_by']}; continue with --resume)" if summary.get("stopped_by") else ""),
          file=sys.stderr)
    if summary.get("profile"):
        print(f"depthbench train: profile {json.dumps(summary['profile'])}", file=sys.stderr)
    return 0


def register_cli(subparsers) -> None:
    """Add the ``train`` sub-command to a ``depthbench`` argparse sub-parser set."""
    parser = subparsers.add_parser("train", help="pretrain a model (Accelerate: CPU, GPU, DDP, FSDP2)",
                                   description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.set_defaults(func=run_cli)


def main(argv: list[str] | None = None) -> int:
    """``python -m depthbench.training`` (what ``torchrun`` / ``accelerate launch -m`` run): ``depthbench train``."""
    parser = argparse.ArgumentParser(prog="depthbench train", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run_command("train", run_cli, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
