"""Residual transport of hyper-connections (HC / mHC; arXiv 2609.32534, Fig. 10) and their residual-path weight
maps (Fig. 7).

Each sublayer k applies an n x n transport ``T_k`` to the streams (HC: the carried part of its width connection;
mHC: the Sinkhorn matrix H_res), reads its branch input with ``pre_k`` and writes the branch output with ``post_k``.
Per token (fp64, then averaged over tokens):

* ``product_erank``: effective rank (Roy & Vetterli) of the whole transport ``P = T_{2L-1} ... T_0`` (the study
  reports 1.44-1.65 for mHC vs 2.53-2.81 for HC);
* ``cumulative_erank``: the same for ``T_k ... T_0`` after every sublayer; ``sublayer_erank`` for each ``T_k``;
* ``spectrum``: mean singular values of P;
* ``direction_overlap``: ``|<v_1(P), 1/sqrt(n)>|`` with ``v_1(P)`` the top right singular vector of P (the input
  direction P amplifies most): 1 when it is the stream average, 0 when it is orthogonal to it (defined here; the
  study's figure has no code in its repository);
* ``path_weights[j, i] = pre_j^T T_{j-1} ... T_{i+1} post_i``: how strongly sublayer j reads sublayer i's output
  (Pre-LN: all ones).
Architectures other than hyper-connections are refused.
"""

from __future__ import annotations

import numpy as np
import torch

from .common import AnalysisContext, MetricResult, NotApplicable
from .hooks import sublayer_streams

METRIC_ID = "hc_transport"


def erank(s: torch.Tensor) -> torch.Tensor:
    p = s.square() / s.square().sum(-1, keepdim=True).clamp_min(1e-300)
    return torch.exp(-(p * torch.log(p.clamp_min(1e-300))).sum(-1))


def direction_overlap(v: torch.Tensor) -> torch.Tensor:
    """``|<v, 1/sqrt(n)>|`` per unit vector ``v`` [..., n]: 1 when v is the stream average direction, 0 when it is
    orthogonal to it (the absolute value because a singular vector's sign is arbitrary)."""
    return v.sum(-1).abs() / v.shape[-1] ** 0.5


def check(ctx: AnalysisContext, **_) -> None:
    a = ctx.adapter
    if not a.native or not hasattr(a.wiring, "stream_maps"):
        raise NotApplicable(f"residual transport exists only for hyper-connection models, not {a.name}")


def run(ctx: AnalysisContext) -> MetricResult:
    check(ctx)
    a = ctx.adapter
    wiring = a.wiring
    acc: dict[str, object] = {}
    count = 0
    for ids in ctx.bar(ctx.batches(), "hc transport", ctx.num_batches):
        with torch.no_grad(), ctx.autocast(), sublayer_streams(a) as seen:
            a.trace(ids)
        with torch.no_grad():
            maps = []
            for mod, stream in seen:
                width, depth = wiring.stream_maps(mod, stream)
                lead = stream.shape[:2]
                n = stream.shape[-2]
                width = width.double().expand(*lead, n + 1, n).reshape(-1, n + 1, n)
                depth = depth.double().expand(*lead, n).reshape(-1, n)
                maps.append((width[:, 0], width[:, 1:], depth))
            k, N = len(maps), maps[0][0].shape[0]
            n = maps[0][1].shape[-1]
            prod = torch.eye(n, dtype=torch.float64).expand(N, n, n)
            cum = []
            for _, t, _ in maps:
                prod = t @ prod
                cum.append(erank(torch.linalg.svdvals(prod)).sum().item())
            s = torch.linalg.svdvals(prod)
            _, _, vh = torch.linalg.svd(prod)
            overlap = direction_overlap(vh[:, 0, :]).sum().item()
            path = np.full((k, k), np.nan)
            for i in range(k):
                v = maps[i][2]
                for j in range(i + 1, k):
                    path[j, i] = (maps[j][0] * v).sum(-1).sum().item()
                    v = (maps[j][1] @ v.unsqueeze(-1)).squeeze(-1)
            parts = {"cumulative": np.array(cum), "sublayer": np.array([erank(torch.linalg.svdvals(t)).sum().item()
                                                                          for _, t, _ in maps]),
                     "spectrum": s.sum(0).numpy(), "product_erank": erank(s).sum().item(), "overlap": overlap,
                     "path": path}
        for key, val in parts.items():
            acc[key] = val if key not in acc else acc[key] + val
        count += N
    mean = {k: v / count for k, v in acc.items()}
    rows = [{"sublayer": k, "transport_erank": mean["sublayer"][k], "cumulative_erank": mean["cumulative"][k]}
            for k in range(len(mean["sublayer"]))]
    values = {"product_erank": float(mean["product_erank"]), "cumulative_erank": mean["cumulative"],
              "sublayer_erank": mean["sublayer"], "spectrum": mean["spectrum"],
              "direction_overlap": float(mean["overlap"]), "path_weights": mean["path"]}
    return MetricResult(METRIC_ID, values, rows)


def plot(result: MetricResult, path: str) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    v = result.values
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
    axes[0].plot(v["cumulative_erank"], marker="o", ms=3, label="T_k...T_0")
    axes[0].plot(v["sublayer_erank"], marker="s", ms=3, label="T_k")
    axes[0].set_title(f"transport erank (full product {v['product_erank']:.2f})", fontsize=10)
    axes[0].set_xlabel("sublayer k")
    axes[0].legend(fontsize=8)
    axes[1].bar(range(len(v["spectrum"])), v["spectrum"])
    axes[1].set_title(f"spectrum of P (overlap with mean {v['direction_overlap']:.2f})", fontsize=10)
    im = axes[2].imshow(np.ma.masked_invalid(np.asarray(v["path_weights"], dtype=float)), cmap="viridis")
    axes[2].set_title("residual-path weights (reader j, writer i)", fontsize=10)
    fig.colorbar(im, ax=axes[2])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
