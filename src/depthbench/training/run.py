"""One training run, assembled from its config: accelerator, data, model, optimizer, schedule, checkpoints, metrics;
and what the loop (``depthbench.training.trainer``) does with it each step: optimizer step, evaluation, logging,
checkpointing, the summary.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
import warnings

import torch

from depthbench import atomic, registry, runs
from depthbench.config import RunConfig, RunConfigError
from depthbench.data import TokenShards, TokenWindows, WindowLoader, verify_data
from depthbench.model_config import init_folder, resolve_model_config
from depthbench.training.checkpoint import Checkpointer, TrainerState
from depthbench.training.errors import NonFiniteLossError, TrainingError
from depthbench.training.layer_stats import LayerStats
from depthbench.training.metrics import (
    StepMetrics,
    default_peak_flops,
    flat_hparams,
    log_row,
    profile_summary,
    trackers,
    truncate_metrics,
)
from depthbench.training.model_state import ModelState
from depthbench.training.optim import lr_lambda, param_groups
from depthbench.training.run_folder import agree, apply_resume_changes, prepare_output_dir
from depthbench.training.sharding import Fsdp2, accelerate_fsdp_off, requested


def forward_loss(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of one micro-batch (a module-level function so tests can inject NaNs)."""
    return model(input_ids=input_ids, labels=input_ids, use_cache=False).loss


def _say(msg: str) -> None:
    print(f"depthbench train: {msg}", file=sys.stderr)


class Run:
    """Everything the loop needs, built from the config: accelerator, model, optimizer, data, checkpoints."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.t_start = time.perf_counter()
        if cfg.data.data_dir is None:
            raise RunConfigError("data.data_dir is required (a folder made by `depthbench prepare-data`)")
        trackers_used = self._setup_accelerator()
        self.start = prepare_output_dir(cfg, self.accelerator)
        self.resume_from = self.start.checkpoint
        self._setup_data()
        self._setup_model()
        self._setup_state()
        if trackers_used:
            run_name = cfg.track.run_name or os.path.basename(os.path.abspath(cfg.output_dir))
            self.accelerator.init_trackers(cfg.track.project, config=flat_hparams(cfg.to_dict()),
                                           init_kwargs={"wandb": {"name": run_name}} if cfg.track.wandb else {})
        self.accelerator.wait_for_everyone()

    # ------------------------------------------------------------------------------------------------ assembly
    def _setup_accelerator(self) -> list[str]:
        """The accelerator (fresh settings per run; the process group is kept) and the gradient accumulation of
        the world size; returns the trackers it logs to."""
        from accelerate import Accelerator, PartialState
        from accelerate.state import AcceleratorState, GradientState
        from accelerate.utils import ProjectConfiguration

        cfg = self.cfg
        cpu = cfg.train.cpu or not torch.cuda.is_available()
        fsdp2 = requested(cfg.train.parallelism)
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
        used = trackers(cfg)
        with accelerate_fsdp_off() if fsdp2 else contextlib.nullcontext():
            self.accelerator = Accelerator(
                cpu=cpu, mixed_precision=_mixed_precision(cfg, cpu), gradient_accumulation_steps=self.accum,
                log_with=used or None, step_scheduler_with_optimizer=False,
                project_config=ProjectConfiguration(project_dir=cfg.output_dir,
                                                    logging_dir=os.path.join(cfg.output_dir, runs.TENSORBOARD)))
        self.main = self.accelerator.is_main_process
        self.fsdp = None if fsdp2 is None else Fsdp2(fsdp2, self.accelerator.device, self.accelerator.mixed_precision)
        return used

    def _setup_data(self) -> None:
        """The training split, its loader (this rank's share of every global batch), the eval splits and the run
        length in steps."""
        cfg, acc = self.cfg, self.accelerator
        self.shards = _open_split(cfg.data.data_dir, "train")
        if not os.path.isdir(self.shards.tokenizer_dir):
            raise RunConfigError(
                f"the data folder {cfg.data.data_dir} has no tokenizer ({self.shards.tokenizer_dir} is missing): the "
                "checkpoints' hf/ exports and final/ would have no tokenizer and could not be evaluated; copy the "
                f"tokenizer used by prepare-data (meta.json: {self.shards.meta.get('tokenizer')!r}) there with "
                "tokenizer.save_pretrained, or re-run depthbench prepare-data")
        self.windows = TokenWindows(self.shards, cfg.data.seq_len)
        self.loader = WindowLoader(self.windows, cfg.train.micro_batch_size, cfg.train.seed, rank=acc.process_index,
                                   world_size=acc.num_processes, grad_accum=self.accum, prefetch=cfg.data.prefetch)
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

    def _setup_model(self) -> None:
        """The model (from the resolved config), its optimizer and LR schedule, prepared by the accelerator; layer
        statistics and the MFU accounting."""
        from accelerate.utils import set_seed

        cfg, acc = self.cfg, self.accelerator
        set_seed(cfg.train.seed)
        self.init_from = None  # provenance of model.init_from (depthbench.training.init_from)
        if cfg.model.init_from and self.resume_from and (self.start.resolved or {}).get("model_config"):
            # a resumed run never reads the init folder again: its model config is its own record, its weights
            # come from its checkpoint
            self.arch_id, self.model_config = _recorded_model_config(self.start.resolved)
            self.init_from = self.start.resolved.get("init_from")
        else:
            self.arch_id, self.model_config = resolve_model_config(cfg.model, self.shards, seq_len=cfg.data.seq_len)
        self.check_data()
        model = registry.build_model(self.arch_id, config=self.model_config)
        if cfg.model.init_from and not self.resume_from:
            from depthbench.training import init_from

            folder = init_folder(cfg.model.init_from)
            init_from.check_tokenizer(folder, self.shards.tokenizer_dir)
            init_from.load_weights(model, folder)
            self.init_from = init_from.provenance(folder) if self.main else None
        model.set_attn_implementation(cfg.model.attn_implementation)
        if cfg.model.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        self.num_parameters = sum(p.numel() for p in model.parameters())
        flops_per_token = 6 * (self.num_parameters - model.get_input_embeddings().weight.numel())
        if self.fsdp is not None:  # before the optimizer: its parameters are the shards
            self.fsdp.shard(model)
        groups = param_groups(model, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay, eps=cfg.optim.eps,
                              betas=tuple(cfg.optim.betas), decay_all=cfg.optim.decay_norms_and_biases)
        optimizer = torch.optim.AdamW(groups, lr=cfg.optim.lr, betas=tuple(cfg.optim.betas), eps=cfg.optim.eps)
        self.warmup = (cfg.optim.warmup_steps if cfg.optim.warmup_steps is not None
                       else round(cfg.optim.warmup_fraction * self.max_steps))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_lambda(self.warmup, self.max_steps, cfg.optim.min_lr_ratio))
        if cfg.model.compile:  # in place: same module and parameter names (depthbench.training.compiled)
            from depthbench.training.compiled import compile_model

            compile_model(model, scope=cfg.model.compile_scope)  # FSDP2: after sharding (its hooks stay eager)
        if self.fsdp is not None:  # sharded by the trainer, not by accelerate (depthbench.training.sharding)
            self.model, self.optimizer = model, optimizer
        else:
            self.model, self.optimizer = acc.prepare(model, optimizer)
        acc.register_for_checkpointing(self.scheduler)  # stepped by us once per optimizer step (not per process)
        self.stats = None
        if cfg.train.layer_stats_every:
            self.stats = LayerStats(acc.unwrap_model(self.model),
                                    grad_scale=cfg.train.micro_batch_size * (cfg.data.seq_len - 1) * self.accum)
        self.metrics = StepMetrics(self.tokens_per_step, flops_per_token,
                                   cfg.track.peak_flops or default_peak_flops(acc.device), acc.num_processes)

    def _setup_state(self) -> None:
        """A fresh trainer state or the resumed checkpoint's (model, optimizer, schedule, RNG, data position), then
        the run folder's records (``metrics.jsonl`` cut to the resumed step, ``run_config.json``)."""
        cfg, acc = self.cfg, self.accelerator
        self.checkpoints = Checkpointer(os.path.join(cfg.output_dir, runs.CHECKPOINTS), acc, cfg.checkpoint.keep_last,
                                        cfg.checkpoint.hash_files,
                                        ModelState(acc, self.model, self.optimizer, sharded=self.fsdp is not None),
                                        arch=self.arch_id)
        self.state = TrainerState()
        if self.resume_from:
            self.state = self.checkpoints.load(self.resume_from, log=_say if self.main else None)
            # the restored micro-step counter belongs to the saved accumulation; a checkpoint is always taken at an
            # optimizer-step boundary, so counting from 0 is right for any micro-batch size / world size
            acc.step = 0
            self.loader.load_state_dict(self.state.loader)
            apply_resume_changes(self.start, self.optimizer, self.scheduler, lr=self.cfg.optim.lr,
                                 max_steps=self.max_steps, warmup=self.warmup, step=self.state.step,
                                 say=_say if self.main else None)
        self.metrics_path = os.path.join(cfg.output_dir, runs.METRICS)
        if self.main:
            truncate_metrics(self.metrics_path, self.state.step)
            atomic.write_json(os.path.join(cfg.output_dir, runs.RUN_CONFIG), self.run_config_record())

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
                "parallelism": "ddp" if self.fsdp is None else "fsdp2",
                "tokens_per_step": self.tokens_per_step, "mixed_precision": self.accelerator.mixed_precision,
                "distributed_type": self.distributed_type(), "num_parameters": self.num_parameters,
                "parameter_counts": self.model_config.parameter_counts(),
                "model_config": self.model_config.to_dict(),
                "init_from": self.init_from,
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            },
        }

    def distributed_type(self) -> str:
        """How the run is distributed, in accelerate's names: ``FSDP`` for the trainer's own FSDP2 (accelerate
        itself sees a plain multi-process run, ``MULTI_CPU`` / ``MULTI_GPU``, because it does not shard the model:
        :mod:`depthbench.training.sharding`), else accelerate's ``distributed_type``."""
        from accelerate.utils import DistributedType

        if self.fsdp is not None:
            return DistributedType.FSDP.value
        return str(self.accelerator.distributed_type.value)

    # ------------------------------------------------------------------------------------------------ step
    def forward_context(self):
        """bf16 autocast around an FSDP2 model's forward (accelerate wraps a prepared model's forward itself)."""
        return self.accelerator.autocast() if self.fsdp is not None else contextlib.nullcontext()

    def clip_grad_norm(self) -> torch.Tensor:
        max_norm = self.cfg.optim.grad_clip or math.inf
        if self.fsdp is not None:
            self.fsdp.sync_replicated_grads()
            return self.fsdp.clip_grad_norm_(self.model.parameters(), max_norm)
        return self.accelerator.clip_grad_norm_(self.model.parameters(), max_norm)

    def optimizer_step(self, micro_batches: list[torch.Tensor]) -> tuple[float, float, float]:
        """Forward/backward every micro-batch, clip, step; returns (global mean loss, grad norm, seconds)."""
        acc, t0 = self.accelerator, time.perf_counter()
        self.model.train()
        losses, grad_norm = [], torch.tensor(float("nan"))
        for batch in micro_batches:
            batch = batch.to(acc.device, non_blocking=True)
            with acc.accumulate(self.model):
                if self.fsdp is not None:  # FSDP2's no_sync: reduce-scatter only in the step's last backward
                    self.fsdp.set_gradient_sync(self.model, acc.sync_gradients)
                with self.forward_context():
                    loss = forward_loss(self.model, batch)
                acc.backward(loss)  # divides by the accumulation steps
                losses.append(loss.detach().float())
                if acc.sync_gradients:  # the step's last micro-batch (accelerate counts them)
                    grad_norm = self.clip_grad_norm()
                    self.optimizer.step()
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

    def collect_layer_stats(self) -> dict:
        self.stats.all_reduce(lambda t: self.accelerator.reduce(t, reduction="sum"))
        metrics = self.stats.metrics()
        self.stats.reset()
        return metrics

    def log(self, row: dict, step: int) -> None:
        if self.main:
            log_row(self.metrics_path, row, step)
        if self.accelerator.trackers:
            self.accelerator.log(row, step=step)

    @contextlib.contextmanager
    def progress_bar(self):
        from depthbench.progress import progress_bar  # plain lines when stderr is a file (a worker's console.log)

        bar = progress_bar(total=self.max_steps, initial=self.state.step, desc="train", unit="step", dynamic_ncols=True,
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
                with self.forward_context():
                    loss = forward_loss(self.model, ids).double()
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
            atomic.write_json(os.path.join(self.cfg.output_dir, runs.SUMMARY), summary)
        raise NonFiniteLossError(
            f"non-finite training loss ({loss}) at step {step}: stopping; {where}. Check the data, or continue from "
            f"the checkpoint with a lower learning rate: depthbench train -c "
            f"{os.path.join(self.cfg.output_dir, runs.RUN_CONFIG)} --resume optim.lr=<lower>")

    # ------------------------------------------------------------------------------------------------ finish
    def finished_summary(self) -> dict | None:
        """The stored summary of this run if it already finished (``None`` otherwise); closes the trackers."""
        summary = runs.read_summary(self.cfg.output_dir)
        if summary is None or summary.get("status") != "finished":
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
            final_dir = os.path.join(self.cfg.output_dir, runs.FINAL)
            self.checkpoints.export_hf(final_dir, self.model, self.shards.tokenizer_dir)
        summary = self.summary(status, session_time, timings, final_dir)
        if signal_name:
            summary["stopped_by"] = signal_name
        if self.main:
            atomic.write_json(os.path.join(self.cfg.output_dir, runs.SUMMARY), summary)
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
        if self.init_from:
            out["init_from"] = {"path": self.init_from["path"], "sha256": self.init_from["sha256"]}
        if self.cfg.train.profile:
            out["profile"] = profile_summary(timings)
        return out

def _recorded_model_config(resolved: dict):
    """``(architecture id, HF config)`` from a run's own ``run_config.json`` ``resolved`` entry."""
    fields = dict(resolved["model_config"])
    for key in ("model_type", "architectures", "auto_map", "transformers_version", "torch_dtype", "dtype"):
        fields.pop(key, None)
    arch = resolved["arch"]
    return arch, registry.get(arch).config_class(**fields)


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


def _mixed_precision(cfg: RunConfig, cpu: bool) -> str:
    mp = cfg.train.mixed_precision
    if mp == "auto":
        return "bf16" if not cpu and torch.cuda.is_bf16_supported() else "no"
    return mp
