"""The sweep's figure: held-out loss against the aspect ratio d/L at a fixed budget (``loss_vs_aspect_ratio.png``)."""

from __future__ import annotations

from typing import Any

from depthbench.sweeps.results import best_points, metric_label


def plot_loss_vs_aspect_ratio(rows: list[dict[str, Any]], path: str, metrics: list[str]) -> bool:
    """One panel per metric: held-out loss (best LR; mean over seeds, their min-max as band and bars) against d/L,
    one line per architecture, wide-shallow on the left, deep-narrow on the right (log axis). Returns False when
    matplotlib is missing or nothing finished yet."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullLocator
    except ImportError:
        return False
    per_metric = {m: best_points(rows, m) for m in metrics}
    if not any(per_metric.values()):
        return False
    archs = sorted({a for pts in per_metric.values() for a in pts})
    colors = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(archs)}
    markers = "osD^vP*Xh<>"
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.8 * len(metrics), 4.4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        ticks: dict[float, int] = {}
        for i, arch in enumerate(archs):
            points = per_metric[metric].get(arch, [])
            if not points:
                continue
            xs = [p["aspect_ratio"] for p in points]
            seeds = max(p["seeds"] for p in points)
            label = arch + (f" (n={seeds} seeds)" if seeds > 1 else "")
            means = [p["mean"] for p in points]
            ax.plot(xs, means, marker=markers[i % len(markers)], color=colors[arch], label=label, lw=1.6, ms=5)
            if seeds > 1:  # the seeds' min-max: a band between the points and a bar at each
                lows, highs = [p["min"] for p in points], [p["max"] for p in points]
                ax.fill_between(xs, lows, highs, color=colors[arch], alpha=0.15, lw=0)
                ax.errorbar(xs, means, yerr=[[m - lo for m, lo in zip(means, lows)],
                                             [hi - m for m, hi in zip(means, highs)]],
                            fmt="none", ecolor=colors[arch], elinewidth=1.0, capsize=3, alpha=0.8)
            for p in points:
                ticks[p["aspect_ratio"]] = p["num_layers"]
        ax.set_xscale("log")
        ax.set_xticks(sorted(ticks))
        ax.set_xticklabels([f"{x:.3g}\nL{ticks[x]}" for x in sorted(ticks)], fontsize=8)
        ax.xaxis.set_minor_locator(NullLocator())  # only the shapes' d/L as ticks
        ax.invert_xaxis()
        ax.set_xlabel("aspect ratio d/L (depth L below)\nwide-shallow  \u2192  deep-narrow", fontsize=9)
        ax.set_ylabel("held-out loss (nats/token)", fontsize=9)
        ax.set_title(f"{metric_label(metric)}\n({metric})", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    n_seeds = max((p["seeds"] for pts in per_metric.values() for ps in pts.values() for p in ps), default=1)
    band = f"mean of {n_seeds} seeds, band and bars = their min-max" if n_seeds > 1 else "one seed per point"
    fig.suptitle(f"Held-out loss vs aspect ratio at a fixed parameter budget (best LR per point; {band})",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return True
