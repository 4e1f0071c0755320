"""Causal score (arXiv 2609.32534, layer analyses and Fig. 5): how much skipping block s changes the update of every
later block l.

With updates ``u_l = z_{l+1} - z_l`` (architecture-aware depth states, fp32) and ``u_l^{skip s}`` the same under
``skip_block(s)``::

    C(s, l) = mean_tokens ||u_l^{skip s} - u_l||_2 / max(||u_l||_2, eps)        (l > s; mean of per-token ratios)

The study's threshold statistic is the fraction of late-layer pairs (both blocks in the last three quarters of the
network) with C > 0.45. Skip groups share the unmodified prefix and run batched (``depthbench.analysis.state``).
"""

from __future__ import annotations

import numpy as np
import torch

from .common import AnalysisContext, MetricResult, heatmap, late_start
from .state import Group, chunked, run_groups

METRIC_ID = "causal"
THRESHOLD = 0.45
EPS = 1e-8


def _ratios(u_new: torch.Tensor, u: torch.Tensor, eps: float) -> torch.Tensor:
    num = torch.linalg.vector_norm((u_new.float() - u.float()).flatten(0, 1), dim=-1)
    den = torch.linalg.vector_norm(u.float().flatten(0, 1), dim=-1).clamp_min(eps)
    return num / den


def run(ctx: AnalysisContext, threshold: float = THRESHOLD, eps: float = EPS) -> MetricResult:
    a = ctx.adapter
    L = a.num_layers
    sums = np.zeros((L, L))
    count = 0
    skips = list(range(L - 1))
    for trace in ctx.traces("causal"):
        with torch.no_grad(), ctx.autocast():
            z = [s.float() for s in a.depth_states(trace)]
            u = [z[blk + 1] - z[blk] for blk in range(L)]
            for chunk in chunked(skips, ctx.group_batch):
                groups = [Group(s, {s}, (lambda s=s: a.skip(s)), s, "skip") for s in chunk]
                for res in run_groups(a, trace, groups, batched=ctx.batched, want_states=True):
                    s = res.key
                    zs = dict(res.states)
                    zs[s] = z[s]
                    for blk in range(s + 1, L):
                        sums[s, blk] += float(_ratios(zs[blk + 1].float() - zs[blk].float(), u[blk], eps).sum())
        count += trace.input_ids.numel()
    matrix = sums / count
    matrix[np.tril_indices(L)] = np.nan
    late = late_start(L)
    late_vals = [matrix[s, blk] for s in range(late, L) for blk in range(s + 1, L)]
    rows = [{"skipped": s, "layer": blk, "causal_score": matrix[s, blk]}
            for s in range(L - 1) for blk in range(s + 1, L)]
    values = {
        "matrix": matrix,
        "mean": float(np.nanmean(matrix)) if rows else None,
        "max": float(np.nanmax(matrix)) if rows else None,
        "threshold": threshold,
        "late_start": late,
        "late_pairs": len(late_vals),
        "late_fraction_above": float(np.mean(np.asarray(late_vals) > threshold)) if late_vals else None,
        "top": sorted(rows, key=lambda r: -r["causal_score"])[:10],
        "eps": eps,
    }
    return MetricResult(METRIC_ID, values, rows)


def plot(result: MetricResult, path: str) -> bool:
    m = np.asarray(result.values["matrix"], dtype=float)
    finite = m[np.isfinite(m)]
    vmax = float(np.percentile(finite, 99)) if finite.size else None
    v = result.values
    frac = v["late_fraction_above"]
    title = "causal score C(s, l)" + (f"; late pairs > {v['threshold']}: {frac:.0%}" if frac is not None else "")
    return heatmap(m, path, title, "affected block l", "skipped block s", cmap="magma", vmax=vmax)
