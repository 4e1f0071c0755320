"""Token collapse (arXiv 2609.32534, layer analyses): how many directions the tokens of a window span at each depth.

For every architecture-aware depth state and every window, the token matrix H in R^{T x D} (not centred) and its
singular values s (fp32 SVD)::

    stable_rank = sum s^2 / s_max^2,   erank = exp(-sum p_i log p_i) with p_i = s_i^2 / sum s^2 (Roy & Vetterli 2007),
    l1_l2_ratio = sum s / sqrt(sum s^2)          (at most sqrt(min(T, D)); the reference docstring said min(T, D))

averaged over windows per state.
"""

from __future__ import annotations

import numpy as np
import torch

from .common import AnalysisContext, MetricResult, line_plot

METRIC_ID = "token_collapse"
KEYS = ("stable_rank", "erank", "l1_l2_ratio")


def spectrum_stats(s: torch.Tensor) -> dict[str, torch.Tensor]:
    """The three statistics from singular values ``s`` [..., k] (fp32/fp64)."""
    sq = s.square()
    total = sq.sum(-1).clamp_min(torch.finfo(s.dtype).tiny)
    p = sq / total.unsqueeze(-1)
    entropy = -(p * torch.log(p.clamp_min(torch.finfo(s.dtype).tiny))).sum(-1)
    return {
        "stable_rank": total / s.amax(-1).square().clamp_min(torch.finfo(s.dtype).tiny),
        "erank": torch.exp(entropy),
        "l1_l2_ratio": s.sum(-1) / total.sqrt(),
    }


def run(ctx: AnalysisContext) -> MetricResult:
    sums: dict[str, np.ndarray] | None = None
    windows = 0
    for trace in ctx.traces("token collapse"):
        states = ctx.adapter.depth_states(trace)
        if sums is None:
            sums = {k: np.zeros(len(states)) for k in KEYS}
        for blk, z in enumerate(states):
            s = torch.linalg.svdvals(z.float())  # [B, min(T, D)]
            for k, v in spectrum_stats(s).items():
                sums[k][blk] += float(v.sum())
        windows += trace.input_ids.shape[0]
    per_layer = {k: v / windows for k, v in sums.items()}
    rows = [{"state": blk, **{k: per_layer[k][blk] for k in KEYS}} for blk in range(len(per_layer["erank"]))]
    summary = {f"{k}_{agg}": float(getattr(np, agg)(per_layer[k])) for k in KEYS for agg in ("mean", "min", "max")}
    summary.update({f"{k}_final": float(per_layer[k][-1]) for k in KEYS})
    return MetricResult(METRIC_ID, {**per_layer, **summary}, rows)


def plot(result: MetricResult, path: str) -> bool:
    v = result.values
    xs = list(range(len(v["erank"])))
    return line_plot(xs, {k: v[k] for k in KEYS}, path, "token collapse per depth state", "state l", "rank measure")
