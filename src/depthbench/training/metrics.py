"""What ``depthbench train`` measures and logs: the rows of ``metrics.jsonl`` (loss, LR, gradient norm, tokens/s,
MFU), the trackers (TensorBoard, W&B), the progress-bar postfix and the ``--profile`` summary.

MFU = ``6 * N * tokens_per_s / (peak_flops * world_size)`` with N = parameters without the input embedding
(attention score FLOPs are ignored, as in the usual 6N rule). ``track.peak_flops`` sets the per-device peak; the
default is the dense bf16 peak of known GPUs (:data:`PEAK_FLOPS`); on CPU or an unknown device MFU is not reported
unless ``track.peak_flops`` is given.
"""

from __future__ import annotations

import json
import os

import torch

from depthbench import atomic
from depthbench.config import RunConfig, RunConfigError

#: Dense bf16 peak FLOP/s per device, matched by substring of ``torch.cuda.get_device_name()`` (first match wins).
PEAK_FLOPS = (
    ("GB200", 2.5e15), ("B200", 2.25e15), ("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12),
    ("H800", 989e12), ("A100", 312e12), ("A800", 312e12), ("L40S", 362e12), ("L40", 181e12), ("L4", 121e12),
    ("A10G", 70e12), ("A10", 125e12), ("RTX 4090", 165e12), ("RTX 3090", 71e12), ("V100", 125e12),
)


def default_peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_FLOPS if key in name), None)


class StepMetrics:
    """The metric row of an optimizer step: loss, LR, gradient norm, tokens, tokens/s, step time and (with a known
    peak) MFU; and the progress bar's short form of it."""

    def __init__(self, tokens_per_step: int, flops_per_token: float, peak_flops: float | None, world_size: int):
        self.tokens_per_step, self.flops_per_token = tokens_per_step, flops_per_token
        self.peak_flops, self.world_size = peak_flops, world_size

    def row(self, loss: float, lr: float, grad_norm: float, tokens: int, t_step: float) -> dict:
        tokens_per_s = self.tokens_per_step / max(t_step, 1e-9)
        row = {"train/loss": loss, "train/lr": lr, "train/grad_norm": grad_norm,
               "tokens": tokens, "perf/tokens_per_s": tokens_per_s, "perf/step_time_s": t_step}
        if self.peak_flops:
            row["perf/mfu"] = self.flops_per_token * tokens_per_s / (self.peak_flops * self.world_size)
        return row

    @staticmethod
    def postfix(row: dict) -> dict:
        out = {"loss": f"{row['train/loss']:.4f}", "tok/s": f"{row['perf/tokens_per_s']:.3g}"}
        if "perf/mfu" in row:
            out["mfu"] = f"{100 * row['perf/mfu']:.1f}%"
        return out


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


def log_row(path: str, row: dict, step: int) -> None:
    """Append one row to ``metrics.jsonl`` (non-finite numbers as ``null``)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(atomic.json_safe({"step": step, **row})) + "\n")


def trackers(cfg: RunConfig) -> list[str]:
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


def flat_hparams(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_hparams(value, f"{name}."))
        else:
            out[name] = value if isinstance(value, (int, float, str, bool)) else str(value)
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
