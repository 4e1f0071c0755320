"""Layer analyses over a whole sweep folder: every finished run, resumable, plus comparisons across architectures
and depths (the study's late-layer fractions against L, logit-lens curves side by side; arXiv 2609.32534, Fig. 5).

Layout: ``<sweep>/analysis/<run id>/<metric>.{json,csv,png}`` per run; ``<sweep>/analysis/summary.csv`` (one row per
run and metric summary value); comparison figures ``<sweep>/analysis_late_fractions.png`` and
``<sweep>/analysis_logit_lens.png``; ``<sweep>/analysis.md``, whose text is also the ``analysis`` section of
``report.md`` (:func:`depthbench.runs.write_report_section`: replaced, never duplicated, on every run).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
from typing import Any

from depthbench.runs import write_report_section

LATE_FIGURE = "analysis_late_fractions.png"
LENS_FIGURE = "analysis_logit_lens.png"


def is_sweep(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "sweep.json")) and os.path.isdir(os.path.join(path, "runs"))


def finished_runs(sweep_dir: str) -> list[dict[str, Any]]:
    """``{run_id, run_dir, model_dir, arch, num_layers, shape}`` of every run with a loadable ``final/`` export."""
    root = os.path.join(sweep_dir, "runs")
    runs = []
    for run_id in sorted(os.listdir(root)):
        run_dir = os.path.join(root, run_id)
        model_dir = os.path.join(run_dir, "final")
        if not os.path.isfile(os.path.join(model_dir, "config.json")):
            continue
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        parts = run_id.split("__")
        runs.append({"run_id": run_id, "run_dir": run_dir, "model_dir": model_dir,
                     "arch": parts[0], "shape": parts[1] if len(parts) > 1 else None,
                     "num_layers": config.get("num_hidden_layers"), "hidden_size": config.get("hidden_size")})
    return runs


def sweep_data_dir(sweep_dir: str) -> str | None:
    """The data folder recorded in ``sweep.json`` (absolute, or relative to the sweep's parent / the cwd)."""
    with open(os.path.join(sweep_dir, "sweep.json"), encoding="utf-8") as f:
        spec = json.load(f).get("spec") or {}
    data = spec.get("data") or ((spec.get("base") or {}).get("data") or {}).get("data_dir")
    if not data:
        return None
    for cand in (data, os.path.join(sweep_dir, data), os.path.join(os.path.dirname(sweep_dir.rstrip("/")), data)):
        if os.path.isdir(cand):
            return cand
    return data


def load_results(sweep_dir: str) -> list[dict[str, Any]]:
    """Per run and metric, the JSON values (``{run..., metric, values}``)."""
    out = []
    for run in finished_runs(sweep_dir):
        folder = os.path.join(sweep_dir, "analysis", run["run_id"])
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if name.endswith(".json"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    payload = json.load(f)
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
        for arch, pts in sorted(by_arch.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=arch)
        depths = sorted({p[0] for pts in by_arch.values() for p in pts})
        if depths:  # ticks at the measured depths only (one depth: a labelled column, not a fractional axis)
            ax.set_xticks(depths)
            ax.set_xlim(depths[0] - 1, depths[-1] + 1)
        ax.set_title(f"{title}: late pairs > {thr}", fontsize=10)
        ax.set_xlabel("L (blocks)")
        ax.set_ylabel("fraction of late-layer pairs")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
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
            f"{row['metric']}.{row['key']}"] = row["value"]
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
    """Comparison figures, ``analysis/summary.csv``, ``analysis.md`` and the ``analysis`` section of
    ``report.md``."""
    results = load_results(sweep_dir)
    paths: dict[str, str] = {}
    figures = []
    if plot_late_fractions(results, os.path.join(sweep_dir, LATE_FIGURE)):
        figures.append(LATE_FIGURE)
    if plot_logit_lens(results, os.path.join(sweep_dir, LENS_FIGURE)):
        figures.append(LENS_FIGURE)
    rows = _scalar_rows(results)
    os.makedirs(os.path.join(sweep_dir, "analysis"), exist_ok=True)
    paths["summary"] = os.path.join(sweep_dir, "analysis", "summary.csv")
    with open(paths["summary"], "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["run_id", "arch", "num_layers", "metric", "key", "value", "seconds"])
        writer.writeheader()
        writer.writerows(rows)
    section = render_section(results, figures)
    paths["markdown"] = os.path.join(sweep_dir, "analysis.md")
    with open(paths["markdown"], "w", encoding="utf-8") as f:
        f.write(section + "\n")
    paths["report"] = write_report_section(sweep_dir, "analysis", section)
    for fig in figures:
        paths[fig] = os.path.join(sweep_dir, fig)
    log("wrote " + ", ".join(paths.values()))
    return paths

