"""Angular distance between depth states (arXiv 2609.32534, layer analyses; Gromov et al., arXiv 2403.17887).

``d(i, j) = (1/pi) * mean_tokens arccos(cos(z_i[t], z_j[t]))`` for every pair i < j of depth states z_0..z_L
(architecture-aware states: hyper-connection streams concatenated, attention-residual boundary mixes), cosine
clamped to [-1, 1], accumulated in float64. The "subsequent" matrix re-indexes it as ``S[n-1, l] = d(l, l+n)``.

``tokens="all"`` (default) averages over every token of every window, as the study does; ``tokens="last"`` uses
only each window's final token, as Gromov et al. define it (their Eq. 7: the last token of the sequence, averaged
over samples).
"""

from __future__ import annotations

import numpy as np
import torch

from .common import AnalysisContext, MetricResult, heatmap

METRIC_ID = "angular"


def angular_matrix(states: list[torch.Tensor]) -> tuple[np.ndarray, int]:
    """Sum over tokens of arccos(cos)/pi for every pair (upper triangle) and the token count."""
    n = len(states)
    unit = [torch.nn.functional.normalize(s.double().flatten(0, 1), dim=-1) for s in states]
    total = np.full((n, n), np.nan)
    for i in range(n):
        for j in range(i + 1, n):
            cos = (unit[i] * unit[j]).sum(-1).clamp(-1.0, 1.0)
            total[i, j] = float(torch.arccos(cos).sum() / np.pi)
    return total, unit[0].shape[0]


def subsequent(matrix: np.ndarray) -> np.ndarray:
    """``S[n-1, l] = d(l, l+n)`` (NaN where l+n is past the last state)."""
    k = matrix.shape[0]
    out = np.full((k - 1, k - 1), np.nan)
    for n in range(1, k):
        for blk in range(k - n):
            out[n - 1, blk] = matrix[blk, blk + n]
    return out


TOKENS = ("all", "last")


def check(ctx: AnalysisContext, tokens: str = "all") -> None:
    if tokens not in TOKENS:
        raise ValueError(f"angular tokens={tokens!r}: choose 'all' (every token, the study) or 'last' (each "
                         "window's final token, Gromov et al.)")


def run(ctx: AnalysisContext, tokens: str = "all") -> MetricResult:
    check(ctx, tokens)
    total, count = None, 0
    for trace in ctx.traces("angular"):
        states = ctx.adapter.depth_states(trace)
        if tokens == "last":
            states = [z[:, -1:] for z in states]
        m, c = angular_matrix(states)
        total = m if total is None else total + m
        count += c
    matrix = total / count
    pairs = [(i, j, matrix[i, j]) for i in range(len(matrix)) for j in range(i + 1, len(matrix))]
    pairs.sort(key=lambda p: p[2])
    rows = [{"i": i, "j": j, "angular_distance": v} for i, j, v in pairs]
    values = {
        "tokens": tokens,
        "matrix": matrix,
        "subsequent": subsequent(matrix),
        "consecutive": [matrix[blk, blk + 1] for blk in range(len(matrix) - 1)],
        "smallest": rows[:10],
        "largest": rows[::-1][:10],
    }
    return MetricResult(METRIC_ID, values, sorted(rows, key=lambda r: (r["i"], r["j"])))


def plot(result: MetricResult, path: str) -> bool:
    sub = np.asarray(result.values["subsequent"], dtype=float)
    return heatmap(sub, path, "angular distance d(l, l+n) / pi", "start state l", "n (states apart)",
                   cmap="viridis_r", origin="lower")
