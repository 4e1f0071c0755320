"""Layer analyses over a whole sweep folder: every finished run, resumable, plus comparisons across architectures
and depths (the study's late-layer fractions against L, logit-lens curves side by side; arXiv 2609.32534, Fig. 5).

Layout: ``<sweep>/analysis/<run id>/<metric>.{json,csv,png}`` per run; ``<sweep>/analysis/summary.csv`` (one row per
run and metric summary value); comparison figures ``<sweep>/analysis_late_fractions.png`` and
``<sweep>/analysis_logit_lens.png``; the analyses' section of ``report.md`` (``<sweep>/sections/analysis.md``,
assembled into ``report.md`` by ``depthbench.runs.write_report_section``; replaced, never duplicated, on every run).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable
from typing import Any

from depthbench import atomic, runs

LATE_FIGURE = "analysis_late_fractions.png"
LENS_FIGURE = "analysis_logit_lens.png"


def finished_runs(sweep_dir: str) -> list[dict[str, Any]]:
    """``{run_id, run_dir, model_dir, arch, shape, num_layers, hidden_size}`` of every finished run of the sweep
    (``depthbench.runs.sweep_runs``: finished, with its final export), depth and width from its ``config.json``."""
    out = []
    for run in runs.sweep_runs(sweep_dir, finished=True):
        config = atomic.read_json(os.path.join(run.model_dir, "config.json")) or {}
        out.append({"run_id": run.name, "run_dir": run.run_dir, "model_dir": run.model_dir, "arch": run.arch,
                    "shape": run.shape, "num_layers": config.get("num_hidden_layers"),
                    "hidden_size": config.get("hidden_size")})
    return out


def load_results(sweep_dir: str) -> list[dict[str, Any]]:
    """Per run and metric, the JSON values (``{run..., metric, values}``)."""
    out = []
    for run in finished_runs(sweep_dir):
        folder = os.path.join(sweep_dir, runs.ANALYSIS, run["run_id"])
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if name.endswith(".json"):
                payload = atomic.read_json(os.path.join(folder, name))
                out.append({**run, "metric": payload["metric"], "values": payload["values"],
                            "seconds": payload.get("seconds")})
    return out


SUMMARY_KEYS = {
    "angular": ["consecutive"],
    "causal": ["late_fraction_above", "mean"],
    "permutation": ["late_fraction_above", "mean", "base_loss"],
    "usefulness": ["significant_fraction", "mean_increase"],
    "jacobian": ["mean"],
    "logit_lens": ["final_loss"],
    "pruning": ["base"],
    "token_collapse": ["erank_final", "stable_rank_final"],
    "depth_mixing": ["dead_fraction"],
    "hc_transport": ["product_erank"],
}


def _column(row: dict[str, Any], results: list[dict[str, Any]]) -> str:
    """The report's column name of a summary value: ``metric.key``, with the threshold a fraction is counted
    against (``causal.late_fraction_above (> 0.45)``), so the number says what it counts."""
    name = f"{row['metric']}.{row['key']}"
    if row["key"] == "late_fraction_above":
        thr = next((r["values"].get("threshold") for r in results
                    if r["run_id"] == row["run_id"] and r["metric"] == row["metric"]), None)
        if thr is not None:
            name += f" (> {thr:g})"
    return name


def _scalar_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        for key in SUMMARY_KEYS.get(r["metric"], []):
            value = r["values"].get(key)
            if isinstance(value, list):
                value = sum(value) / len(value) if value else None
                key = f"{key}_mean"
            rows.append({"run_id": r["run_id"], "arch": r["arch"], "num_layers": r["num_layers"],
                         "metric": r["metric"], "key": key, "value": value, "seconds": r["seconds"]})
    return rows


def plot_late_fractions(results: list[dict[str, Any]], path: str) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(m, t) for m, t in (("causal", "causal score"), ("permutation", "permutation score"))
              if any(r["metric"] == m for r in results)]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for ax, (metric, title) in zip(axes[0], panels):
        by_arch: dict[str, list] = {}
        thr = None
        for r in results:
            if r["metric"] == metric and r["values"].get("late_fraction_above") is not None:
                by_arch.setdefault(r["arch"], []).append((r["num_layers"], r["values"]["late_fraction_above"]))
                thr = r["values"].get("threshold")
        depths = sorted({p[0] for pts in by_arch.values() for p in pts})
        if len(depths) == 1:  # one depth: a bar per architecture (lines of one point would hide one another)
            archs = sorted(by_arch)
            values = [sum(v for _, v in by_arch[a]) / len(by_arch[a]) for a in archs]
            colors = [plt.get_cmap("tab10")(i % 10) for i in range(len(archs))]
            bars = ax.bar(range(len(archs)), values, color=colors, width=0.6)
            ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=8)
            ax.set_xticks(range(len(archs)))
            ax.set_xticklabels(archs, fontsize=9)
            ax.set_xlabel(f"architecture (L = {depths[0]} blocks)")
        else:
            for arch, pts in sorted(by_arch.items()):
                pts.sort()
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=arch)
            if depths:  # ticks at the measured depths only
                ax.set_xticks(depths)
                ax.set_xlim(depths[0] - 1, depths[-1] + 1)
            ax.set_xlabel("L (blocks)")
            ax.legend(fontsize=8)
        ax.set_title(f"{title}: late pairs > {thr}", fontsize=10)
        ax.set_ylabel("fraction of late-layer pairs")
        ax.set_ylim(-0.02, 1.08)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_logit_lens(results: list[dict[str, Any]], path: str, key: str = "kl_to_final") -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lens = [r for r in results if r["metric"] == "logit_lens"]
    archs = sorted({r["arch"] for r in lens})
    if not archs:
        return False
    fig, axes = plt.subplots(1, len(archs), figsize=(3.8 * len(archs), 3.4), squeeze=False, sharey=True)
    for ax, arch in zip(axes[0], archs):
        for r in sorted((r for r in lens if r["arch"] == arch), key=lambda r: r["num_layers"] or 0):
            ys = r["values"][key]
            n = len(ys) - 1
            ax.plot([i / n for i in range(n + 1)], ys, marker="o", ms=3, label=f"L{n}")
        ax.set_title(arch, fontsize=10)
        ax.set_xlabel("relative depth l / L")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel(f"logit lens: {key}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def render_section(results: list[dict[str, Any]], figures: list[str]) -> str:
    """Markdown: the comparison figures and a table of the summary values per run."""
    lines = ["## Layer analyses (`depthbench analyze`)", ""]
    lines.append("Metrics of arXiv 2609.32534's layer analyses on every finished run (files under `analysis/<run>/`). "
                 "Late-layer pairs: both blocks in the last three quarters of the network.")
    lines.append("")
    for fig in figures:
        lines += [f"![{fig}]({fig})", ""]
    by_run: dict[str, dict[str, Any]] = {}
    for row in _scalar_rows(results):
        by_run.setdefault(row["run_id"], {"arch": row["arch"], "L": row["num_layers"]})[
            _column(row, results)] = row["value"]
    if by_run:
        cols = sorted({k for v in by_run.values() for k in v if k not in ("arch", "L")})
        lines.append("| run | arch | L | " + " | ".join(cols) + " |")
        lines.append("|---|---|---:|" + "---:|" * len(cols))
        for run_id, v in sorted(by_run.items(), key=lambda kv: (kv[1]["arch"], kv[1]["L"] or 0)):
            cells = [("" if v.get(c) is None else f"{v[c]:.3g}") for c in cols]
            lines.append(f"| {run_id} | {v['arch']} | {v['L']} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def write_comparison(sweep_dir: str, log: Callable[..., None] = print) -> dict[str, str]:
    """Comparison figures, ``analysis/summary.csv`` and the analyses' section of ``report.md``."""
    results = load_results(sweep_dir)
    paths: dict[str, str] = {}
    figures = []
    if plot_late_fractions(results, os.path.join(sweep_dir, LATE_FIGURE)):
        figures.append(LATE_FIGURE)
    if plot_logit_lens(results, os.path.join(sweep_dir, LENS_FIGURE)):
        figures.append(LENS_FIGURE)
    rows = _scalar_rows(results)
    os.makedirs(os.path.join(sweep_dir, runs.ANALYSIS), exist_ok=True)
    paths["summary"] = os.path.join(sweep_dir, runs.ANALYSIS, "summary.csv")
    with open(paths["summary"], "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["run_id", "arch", "num_layers", "metric", "key", "value", "seconds"])
        writer.writeheader()
        writer.writerows(rows)
    paths["report"] = runs.write_report_section(sweep_dir, "analysis", render_section(results, figures))
    paths["section"] = os.path.join(sweep_dir, runs.SECTIONS, "analysis.md")
    for fig in figures:
        paths[fig] = os.path.join(sweep_dir, fig)
    log("wrote " + ", ".join(paths.values()))
    return paths
