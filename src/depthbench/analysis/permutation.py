"""Permutation score (arXiv 2609.32534, layer analyses and Fig. 5): the relative loss change when two blocks trade
places, ``P(i, j) = |L_swap(i,j) - L| / L`` (``swap_blocks(i, j)``: the architecture decides which parameters move).

All pairs i < j by default, or only pairs containing an anchor layer. Reports the pair scores, their mean, the
per-layer mean over the pairs containing the layer, and the study's threshold statistic: the fraction of late-layer
pairs (both blocks in the last three quarters) with P > 0.15. Swap groups share the unmodified prefix up to block i
and run batched (``depthbench.analysis.state``): a swap evaluation costs the blocks from i on, not a full pass.
"""

from __future__ import annotations

import numpy as np
import torch

from .common import AnalysisContext, MetricResult, heatmap, late_start
from .state import Group, chunked, run_groups, token_losses

METRIC_ID = "permutation"
THRESHOLD = 0.15


def pairs_for(num_layers: int, anchors: list[int] | None = None) -> list[tuple[int, int]]:
    pairs = [(i, j) for i in range(num_layers) for j in range(i + 1, num_layers)]
    if anchors:
        bad = [k for k in anchors if not 0 <= k < num_layers]
        if bad:
            raise ValueError(f"--anchor-layer {', '.join(map(str, bad))} out of range: the model has blocks "
                             f"0..{num_layers - 1}")
        pairs = [p for p in pairs if p[0] in anchors or p[1] in anchors]
    return pairs


def check(ctx: AnalysisContext, anchors: list[int] | None = None, **_) -> None:
    """ValueError for anchor layers the model does not have (before anything is computed)."""
    pairs_for(ctx.adapter.num_layers, anchors)


def swap_losses(ctx: AnalysisContext, pairs: list[tuple[int, int]]) -> tuple[float, dict]:
    """Mean next-token loss of the unmodified model and under every swap (sum of token losses / token count)."""
    a = ctx.adapter
    base_sum, sums, count = 0.0, dict.fromkeys(pairs, 0.0), 0
    for trace in ctx.traces("permutation"):
        base_sum += float(token_losses(trace.logits, trace.input_ids).sum())
        count += trace.input_ids.shape[0] * (trace.input_ids.shape[1] - 1)
        with torch.no_grad(), ctx.autocast():
            for chunk in chunked(pairs, ctx.group_batch):
                groups = [Group(i, a.swap_depths(i, j), (lambda i=i, j=j: a.swap(i, j)), (i, j), "swap")
                          for i, j in chunk]
                for res in run_groups(a, trace, groups, batched=ctx.batched):
                    sums[res.key] += float(token_losses(res.logits, trace.input_ids).sum())
    return base_sum / count, {p: s / count for p, s in sums.items()}


def run(ctx: AnalysisContext, anchors: list[int] | None = None, threshold: float = THRESHOLD) -> MetricResult:
    L = ctx.adapter.num_layers
    pairs = pairs_for(L, anchors)
    base, losses = swap_losses(ctx, pairs)
    matrix = np.full((L, L), np.nan)
    rows = []
    for (i, j), loss in losses.items():
        score = abs(loss - base) / base
        matrix[i, j] = score
        rows.append({"i": i, "j": j, "loss_swapped": loss, "permutation_score": score})
    per_layer = [float(np.mean([r["permutation_score"] for r in rows if k in (r["i"], r["j"])]))
                 if any(k in (r["i"], r["j"]) for r in rows) else None for k in range(L)]
    late = late_start(L)
    late_vals = [r["permutation_score"] for r in rows if r["i"] >= late]
    values = {
        "base_loss": base,
        "matrix": matrix,
        "mean": float(np.mean([r["permutation_score"] for r in rows])) if rows else None,
        "per_layer_mean": per_layer,
        "anchors": anchors or [],
        "threshold": threshold,
        "late_start": late,
        "late_pairs": len(late_vals),
        "late_fraction_above": float(np.mean(np.asarray(late_vals) > threshold)) if late_vals else None,
    }
    return MetricResult(METRIC_ID, values, rows)


def plot(result: MetricResult, path: str) -> bool:
    v = result.values
    frac = v["late_fraction_above"]
    title = "permutation score P(i, j)" + (f"; late pairs > {v['threshold']}: {frac:.0%}" if frac is not None else "")
    return heatmap(np.asarray(v["matrix"], dtype=float), path, title, "block j", "block i", cmap="magma")
