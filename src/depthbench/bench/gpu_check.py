"""The GPU check: one command that measures the study-scale targets on a CUDA machine and prints one JSON line per
figure (docs/benchmarks.md#the-gpu-check)::

    bash scripts/gpu_check.sh                  # = python -m depthbench.bench.gpu_check (CUDA)
    bash scripts/gpu_check.sh --cpu-smoke      # every part at tiny shapes on CPU (what CI runs)

Parts, in this order (``--parts`` picks some), each built from ``depthbench.bench`` (``Trainer``, ``interleave``,
``paired``, ``time_decode``, ``build_models``; the targets of ``depthbench.bench.summary``):

1. ``mfu``: ``pre_ln`` at the study's 400M-L24 shape (``depthbench shapes 400m``), batch 16 x 2048, bf16 autocast
   over fp32 master weights, eager then compiled (``depthbench.training.compiled``, the trainer's path): step time,
   tokens/s, peak memory and MFU, the trainer's (6 x non-embedding parameters per token, ``training/metrics.py``)
   and with attention's 12 L d T; target ``MFU_TARGET`` on an H100/H200-class GPU.
2. ``fsdp2``: the trainer's FSDP2 path in one process (world size 1, NCCL): 4 steps with a sharded checkpoint
   every 2, and the same run stopped at step 2 and resumed from its sharded checkpoint: the losses must agree.
3. ``decode``: greedy ``generate()`` tokens/s with the KV cache at batch 1 and 8, bf16, each architecture vs
   ``pre_ln`` (interleaved repeats).
4. ``ratios``: compiled train-step time / compiled ``pre_ln``'s at 400M-L24, then 400M-L32 (batch 4 x 2048, bf16;
   interleaved pairs, median of per-step ratios), each line with its target (``GPU_COMPILED_TARGETS``) and
   pass/fail.

Time: every measurement starts only while less than ``--budget-s`` (default 330 s) has passed; what does not fit is
printed as ``"status": "skipped"`` (run it with ``--parts`` / ``--archs`` / ``--ratio-shapes``), so the whole check
ends within 8 minutes. Each part first prints its plan line: the FLOPs of its steps and their time at
``ASSUMED_MFU`` of the GPU's peak (compile time comes on top: docs/benchmarks.md gives the estimate). The last line
(``"check": "summary"``) counts passed, failed, skipped and errored lines; the exit code is 1 when a part raised.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace

import torch

from depthbench import atomic, runs
from depthbench.bench.settings import REFERENCE, BenchSettings
from depthbench.bench.summary import GPU_COMPILED_TARGETS, MFU_TARGET
from depthbench.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from depthbench.training import checkpoint
from depthbench.training.model_state import SHARDED_DIR

PARTS = ("mfu", "fsdp2", "decode", "ratios")
ASSUMED_MFU = 0.4
"""Fraction of the GPU's peak the plan lines assume for their time estimates (not a measurement)."""


@dataclass
class Plan:
    """What the check measures (the defaults: the study's 400M shapes on one GPU; :data:`SMOKE`: tiny, on CPU)."""

    device: str = "cuda"
    mfu_shape: str = "400m-L24"
    mfu_batch: int = 16
    seq_len: int = 2048
    ratio_shapes: list[str] = field(default_factory=lambda: ["400m-L24", "400m-L32"])
    ratio_batch: int = 4
    archs: list[str] = field(default_factory=lambda: list(GPU_COMPILED_TARGETS))
    steps: int = 10
    warmup: int = 3
    decode_tokens: int = 32
    decode_batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    decode_repeats: int = 2
    prompt_len: int = 128
    fsdp_shape: str = "400m-L24"
    fsdp_seq_len: int = 512
    compile_backend: str = "inductor"
    budget_s: float = 330.0  # no measurement starts later (0: no limit)
    parts: list[str] = field(default_factory=lambda: list(PARTS))
    smoke: bool = False

    def settings(self, shape: str, batch: int) -> BenchSettings:
        return BenchSettings(shape=shape, batch_size=batch, seq_len=self.seq_len, steps=self.steps,
                             warmup=self.warmup, dtype="bfloat16", device=self.device, compile=True,
                             decode_tokens=self.decode_tokens, decode_batch_sizes=list(self.decode_batch_sizes),
                             prompt_len=self.prompt_len, decode_repeats=self.decode_repeats, memory=False)


SMOKE = Plan(device="cpu", mfu_shape="tiny-L4", mfu_batch=2, seq_len=32, ratio_shapes=["tiny-L2", "tiny-L4"],
             ratio_batch=2, steps=2, warmup=1, decode_tokens=4, decode_repeats=1, prompt_len=8, fsdp_shape="tiny-L2",
             fsdp_seq_len=32, compile_backend="eager", budget_s=0, smoke=True)
"""``--cpu-smoke``: every part at tiny shapes on CPU, compiled with Dynamo's ``eager`` backend (traced graphs, no
Inductor codegen): it exercises the check, it measures nothing."""


class Report:
    """The JSON lines (stdout), the clock and the budget."""

    def __init__(self, plan: Plan, stream=None):
        self.plan, self.stream, self.t0 = plan, stream or sys.stdout, time.perf_counter()
        self.lines: list[dict] = []

    def emit(self, **line) -> dict:
        line = {**line, "smoke": self.plan.smoke, "elapsed_s": round(time.perf_counter() - self.t0, 1)}
        self.lines.append(line)
        print(json.dumps(line), file=self.stream, flush=True)
        return line

    def over_budget(self) -> bool:
        return bool(self.plan.budget_s) and time.perf_counter() - self.t0 > self.plan.budget_s

    def skip(self, check: str, **what) -> None:
        self.emit(check=check, status="skipped", reason=f"time budget ({self.plan.budget_s:.0f} s) used up", **what)


# ================================================================================================ accounting
def flops_per_token(config, seq_len: int) -> tuple[float, float]:
    """(6 x non-embedding parameters: the trainer's MFU numerator, ``training/metrics.py``; + attention's
    12 L (heads x head_dim) T per token, PaLM's count) of one training token."""
    counts = config.parameter_counts()
    dense = 6.0 * (counts["total"] - counts["embedding"])
    attention = 12.0 * config.num_hidden_layers * config.num_attention_heads * config.head_dim * seq_len
    return dense, dense + attention


def plan_line(report: Report, part: str, shape: str, batch: int, steps: int, models: int) -> None:
    """The part's FLOPs and their time at :data:`ASSUMED_MFU` of the device's peak (``None`` without a peak)."""
    from depthbench.registry import build_config
    from depthbench.shapes import get_shape
    from depthbench.training.metrics import default_peak_flops

    config = build_config(REFERENCE, **get_shape(shape).config_fields())
    flops = flops_per_token(config, report.plan.seq_len)[1] * batch * report.plan.seq_len * steps * models
    peak = default_peak_flops(torch.device(report.plan.device))
    report.emit(check="plan", part=part, shape=shape, train_flops=flops,
                compute_estimate_s=None if not peak else round(flops / (ASSUMED_MFU * peak), 1),
                assumed_mfu=ASSUMED_MFU, peak_flops=peak)


@contextlib.contextmanager
def cuda_peak(device: str):
    """``peak["bytes"]``: the CUDA memory allocated at the peak of the block beyond what was allocated before it
    (``None`` on CPU)."""
    peak: dict = {"bytes": None}
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    yield peak
    if cuda:
        torch.cuda.synchronize()
        peak["bytes"] = torch.cuda.max_memory_allocated() - base


def _free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _trainer(name: str, settings: BenchSettings, compiled: bool):
    from depthbench.bench.models import build_models, shape_fields
    from depthbench.bench.timing import Trainer, random_batch

    model = build_models([name], settings)[name]
    batch = random_batch(settings, shape_fields(settings)["vocab_size"], settings.batch_size, settings.seq_len)
    return Trainer(model, settings, batch, compiled=compiled)


# ================================================================================================ the parts
def check_mfu(report: Report) -> None:
    """``pre_ln`` at the MFU shape, eager then compiled: step time, tokens/s, peak memory, MFU."""
    from depthbench.bench.timing import interleave, median
    from depthbench.training.metrics import default_peak_flops

    plan = report.plan
    settings = plan.settings(plan.mfu_shape, plan.mfu_batch)
    plan_line(report, "mfu", plan.mfu_shape, plan.mfu_batch, 2 * (plan.steps + plan.warmup), 1)
    peak_flops = default_peak_flops(torch.device(plan.device))
    for compiled in (False, True):
        if report.over_budget():
            report.skip("mfu", model=REFERENCE, compiled=compiled)
            continue
        with cuda_peak(plan.device) as memory:
            trainer = _trainer(REFERENCE, settings, compiled)
            step = median(interleave({REFERENCE: trainer}, plan.steps, plan.warmup)[REFERENCE])
        dense, with_attention = flops_per_token(trainer.model.config, plan.seq_len)
        tokens_per_s = plan.mfu_batch * plan.seq_len / step
        mfu = None if not peak_flops else dense * tokens_per_s / peak_flops
        report.emit(check="mfu", model=REFERENCE, shape=plan.mfu_shape, compiled=compiled,
                    batch=[plan.mfu_batch, plan.seq_len], dtype="bf16 autocast over fp32", step_s_median=step,
                    tokens_per_s=round(tokens_per_s, 1), peak_mem_bytes=memory["bytes"], mfu=mfu,
                    mfu_with_attention=None if not peak_flops else with_attention * tokens_per_s / peak_flops,
                    target=MFU_TARGET, status="measured", **{"pass": None if mfu is None else mfu >= MFU_TARGET})
        del trainer
        _free()


def _fsdp2_runs(plan: Plan, root: str) -> tuple[dict, dict]:
    """An uninterrupted 4-step FSDP2 run and the same run stopped at step 2 and resumed; their summaries."""
    from depthbench.config import load_run_config
    from depthbench.data import make_tiny_tokenizer, prepare_data
    from depthbench.data.synthetic import pydoc_documents
    from depthbench.training import train

    docs = pydoc_documents()
    with open(os.path.join(root, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(" ".join(d.split()) for d in docs) + "\n")
    data = os.path.join(root, "data")
    prepare_data([os.path.join(root, "corpus.txt")], make_tiny_tokenizer(docs, vocab_size=512), data,
                 eval_fraction=0.0, progress=False)
    base = {"model": {"arch": REFERENCE, "shape": plan.fsdp_shape},
            "data": {"data_dir": data, "seq_len": plan.fsdp_seq_len, "eval_sequences": 0},
            "train": {"global_batch_size": 8, "micro_batch_size": 4, "max_steps": 4, "parallelism": "fsdp2",
                      "progress": False, "mixed_precision": "auto"},
            "checkpoint": {"every": 2, "hf_export": False}}
    full = train(load_run_config({**base, "output_dir": os.path.join(root, "full")}))
    resumed_dir = os.path.join(root, "resumed")
    train(load_run_config({**base, "output_dir": resumed_dir}, ["train.stop_at_step=2"]))
    resumed = train(load_run_config({**base, "output_dir": resumed_dir, "resume": True}))
    return full, resumed


def _losses(out: str) -> dict[int, float]:
    rows = runs.read_metrics(out)
    return {r["step"]: r["train/loss"] for r in rows if "train/loss" in r}


def check_fsdp2(report: Report) -> None:
    """The trainer's FSDP2 path at world size 1 with a sharded checkpoint save and load."""
    plan = report.plan
    plan_line(report, "fsdp2", plan.fsdp_shape, 8, 8, 1)
    if report.over_budget():
        report.skip("fsdp2")
        return
    with tempfile.TemporaryDirectory() as root:
        full, resumed = _fsdp2_runs(plan, root)
        a, b = _losses(full["output_dir"]), _losses(resumed["output_dir"])
        resolved = atomic.read_json(os.path.join(resumed["output_dir"], runs.RUN_CONFIG))["resolved"]
        step2 = os.path.join(resumed["output_dir"], runs.CHECKPOINTS, f"{runs.CHECKPOINT_PREFIX}000002")
        sharded = os.path.isfile(os.path.join(step2, checkpoint.STATE, SHARDED_DIR, ".metadata"))
    diff = max(abs(a[s] - b[s]) for s in a) if sorted(a) == sorted(b) else float("inf")
    tolerance = 1e-3 if plan.device != "cpu" else 1e-5  # GPU kernels (attention backward) may be nondeterministic
    report.emit(check="fsdp2", shape=plan.fsdp_shape, world_size=resolved["world_size"],
                parallelism=resolved["parallelism"], mixed_precision=resolved["mixed_precision"],
                steps=resumed["steps"], sharded_checkpoint=sharded, resumed_loss_max_abs_diff=diff,
                tolerance=tolerance, tokens_per_s=full["tokens_per_s"], status="measured",
                **{"pass": sharded and resolved["parallelism"] == "fsdp2" and diff <= tolerance})


def check_decode(report: Report) -> None:
    """Greedy decode tokens/s at each batch size, every architecture vs ``pre_ln`` (interleaved)."""
    from depthbench.bench.models import build_models, shape_fields
    from depthbench.bench.timing import median, time_decode

    plan = report.plan
    if report.over_budget():
        report.skip("decode")
        return
    settings = plan.settings(plan.mfu_shape, 1)
    names = [REFERENCE, *[a for a in plan.archs if a != REFERENCE]]
    models = build_models(names, settings)
    times = time_decode(models, settings, shape_fields(settings)["vocab_size"])
    del models
    _free()
    for name in names:
        for bs, ts in times[name].items():
            speed = bs * plan.decode_tokens / median(ts)
            reference = bs * plan.decode_tokens / median(times[REFERENCE][bs])
            report.emit(check="decode", model=name, shape=plan.mfu_shape, batch_size=bs,
                        new_tokens=plan.decode_tokens, prompt_len=plan.prompt_len, tokens_per_s=round(speed, 2),
                        ratio_vs_pre_ln=round(speed / reference, 4), status="measured")


def _ratio_line(report: Report, shape: str, arch: str, reference, settings: BenchSettings) -> None:
    from depthbench.bench.timing import interleave, median, paired

    trainer = _trainer(arch, settings, compiled=True)
    times = interleave({REFERENCE: reference, arch: trainer}, settings.steps, settings.warmup)
    ratio, target = paired(times[arch], times[REFERENCE]), GPU_COMPILED_TARGETS.get(arch)
    report.emit(check="train_time_ratio", model=arch, shape=shape, compiled=True,
                batch=[settings.batch_size, settings.seq_len], dtype="bf16 autocast over fp32",
                step_s_median=median(times[arch]), pre_ln_step_s_median=median(times[REFERENCE]),
                ratio_vs_pre_ln=ratio, target=target, status="measured",
                **{"pass": None if target is None or ratio is None else ratio <= target})


def check_ratios(report: Report) -> None:
    """Compiled train-step time vs compiled ``pre_ln`` at each ratio shape, per architecture."""
    plan = report.plan
    for shape in plan.ratio_shapes:
        plan_line(report, f"ratios {shape}", shape, plan.ratio_batch, plan.steps + plan.warmup,
                  2 * len(plan.archs))
        if report.over_budget():
            for arch in plan.archs:
                report.skip("train_time_ratio", model=arch, shape=shape)
            continue
        settings = plan.settings(shape, plan.ratio_batch)
        reference = _trainer(REFERENCE, settings, compiled=True)
        for arch in plan.archs:
            if report.over_budget():
                report.skip("train_time_ratio", model=arch, shape=shape)
                continue
            try:
                _ratio_line(report, shape, arch, reference, settings)
            except torch.cuda.OutOfMemoryError as exc:  # the next architecture may fit
                report.emit(check="train_time_ratio", model=arch, shape=shape, status="error",
                            error=f"out of memory: {str(exc).splitlines()[0]}")
            _free()
        del reference
        _free()


CHECKS = {"mfu": check_mfu, "fsdp2": check_fsdp2, "decode": check_decode, "ratios": check_ratios}


# ================================================================================================ the command
def run_check(plan: Plan, stream=None) -> list[dict]:
    """Run ``plan.parts`` in order; every line printed, returned too (the summary last)."""
    from depthbench.training import compiled

    report = Report(plan, stream)
    device = torch.device(plan.device)
    report.emit(check="environment", device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                torch=torch.__version__, cuda=torch.version.cuda, compile_backend=plan.compile_backend,
                budget_s=plan.budget_s, parts=plan.parts)
    saved = dict(compiled.COMPILE_OPTIONS)
    compiled.COMPILE_OPTIONS["backend"] = plan.compile_backend
    try:
        for part in plan.parts:
            try:
                CHECKS[part](report)
            except Exception as exc:  # noqa: BLE001 - one part's failure is reported; the others still run
                report.emit(check=part, status="error", error=f"{type(exc).__name__}: {exc}")
                _free()
    finally:
        compiled.COMPILE_OPTIONS.clear()
        compiled.COMPILE_OPTIONS.update(saved)
    lines = [x for x in report.lines if x["check"] not in ("plan", "environment")]
    report.emit(check="summary", passed=sum(x.get("pass") is True for x in lines),
                failed=sum(x.get("pass") is False for x in lines),
                skipped=sum(x.get("status") == "skipped" for x in lines),
                errors=sum(x.get("status") == "error" for x in lines))
    return report.lines


def _plan(args: argparse.Namespace) -> Plan:
    plan = replace(SMOKE) if args.cpu_smoke else Plan()
    for name in ("archs", "ratio_shapes", "parts"):
        value = getattr(args, name)
        if value:
            setattr(plan, name, [v.strip() for v in value.split(",") if v.strip()])
    unknown = sorted(set(plan.parts) - set(PARTS))
    if unknown:
        raise ValueError(f"--parts: {unknown} are not parts of the check (use {', '.join(PARTS)})")
    for name in ("budget_s", "mfu_batch", "ratio_batch"):
        if getattr(args, name) is not None:
            setattr(plan, name, getattr(args, name))
    if plan.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("the GPU check needs CUDA, which is not available here (use --cpu-smoke for the CPU run)")
    return plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="every part at tiny shapes on CPU (measures nothing)")
    parser.add_argument("--parts", help=f"comma-separated subset of {', '.join(PARTS)} (default: all, in order)")
    parser.add_argument("--archs", help="architectures of the decode and ratio parts (default: the six with targets)")
    parser.add_argument("--ratio-shapes", help="shapes of the ratio part (default 400m-L24,400m-L32)")
    parser.add_argument("--budget-s", type=float, help="start no measurement after this many seconds (0: no limit)")
    parser.add_argument("--mfu-batch", type=int, help="sequences per MFU step (default 16)")
    parser.add_argument("--ratio-batch", type=int, help="sequences per ratio step (default 4)")
    args = parser.parse_args(argv)
    try:
        plan = _plan(args)
    except ValueError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    lines = run_check(plan)
    return EXIT_FAILED if lines[-1]["errors"] else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
