"""Depth-mixing weights of Full / Block AttnRes per consumer (arXiv 2609.32534, Fig. 9; residual-path weights of
AttnRes models, Fig. 7), and the "dead segment" statistic.

For every consumer (each sublayer's input mix and the final mix), the softmax weights over its depth sources
(embedding first, then sublayer outputs or block sums, oldest first) averaged over all tokens: a matrix consumer x
source. A source is *dead* when no later consumer gives it a mean weight above ``dead_threshold``; the statistic is
the fraction of dead sources and the longest run of consecutive dead sources (the study reports segments of depth
that later layers stop reading; the exact thresholding is not in its code, so it is defined here).
Architectures other than attention residuals are refused.
"""

from __future__ import annotations

import numpy as np
import torch

from .common import AnalysisContext, MetricResult, NotApplicable, heatmap
from .hooks import sublayer_streams

METRIC_ID = "depth_mixing"
DEAD_THRESHOLD = 0.02


def check(ctx: AnalysisContext, **_) -> None:
    a = ctx.adapter
    if not a.native or not hasattr(a.wiring, "mixing_weights"):
        raise NotApplicable(f"depth-mixing weights exist only for attention-residual models, not {a.name}")


def run(ctx: AnalysisContext, dead_threshold: float = DEAD_THRESHOLD) -> MetricResult:
    check(ctx)
    a = ctx.adapter
    wiring = a.wiring
    sums, count = None, 0
    for ids in ctx.bar(ctx.batches(), "depth mixing", ctx.num_batches):
        with torch.no_grad(), ctx.autocast(), sublayer_streams(a) as seen:
            trace = a.trace(ids)
        with torch.no_grad():
            per_consumer = [wiring.mixing_weights(mod, stream).mean(dim=(1, 2)) for mod, stream in seen]
            per_consumer.append(wiring.mixing_weights(wiring, trace.output).mean(dim=(1, 2)))
        n_src = max(len(w) for w in per_consumer)
        m = np.full((len(per_consumer), n_src), np.nan)
        for j, w in enumerate(per_consumer):
            m[j, : len(w)] = w.double().cpu().numpy()
        b = ids.shape[0] * ids.shape[1]
        sums = m * b if sums is None else sums + m * b
        count += b
    matrix = sums / count
    n_src = matrix.shape[1]
    best = [np.nanmax(matrix[:, i]) if np.isfinite(matrix[:, i]).any() else np.nan for i in range(n_src)]
    dead = [bool(b < dead_threshold) for b in best]
    longest, run_len = 0, 0
    for d in dead:
        run_len = run_len + 1 if d else 0
        longest = max(longest, run_len)
    rows = [{"consumer": j if j < len(matrix) - 1 else "final", "source": i, "weight": matrix[j, i]}
            for j in range(len(matrix)) for i in range(n_src) if np.isfinite(matrix[j, i])]
    values = {"matrix": matrix, "max_weight_per_source": best, "dead": dead, "dead_threshold": dead_threshold,
              "dead_fraction": float(np.mean(dead)), "longest_dead_segment": longest,
              "consumers": [f"sublayer {j}" for j in range(len(matrix) - 1)] + ["final"]}
    return MetricResult(METRIC_ID, values, rows)


def plot(result: MetricResult, path: str) -> bool:
    v = result.values
    return heatmap(np.asarray(v["matrix"], dtype=float), path,
                   f"AttnRes depth-mixing weights (dead sources: {v['dead_fraction']:.0%})", "source (oldest first)",
                   "consumer (sublayer, last = final)", cmap="viridis")
