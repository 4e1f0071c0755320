"""A sweep's downstream evaluation: one row per (run, task, metric) from the finished runs' ``eval/results.json``,
``eval_results.csv``, plots of the metrics against aspect ratio and the ``evaluation`` section of the sweep's
``report.md`` (stored and assembled by :func:`depthbench.runs.write_report_section`)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from depthbench import atomic, runs
from depthbench.evaluation.results import DOMAIN_GROUPS, fmt_value, metric_rows

SECTION = "evaluation"
"""The name of this module's section of the sweep's report (one of :data:`depthbench.runs.REPORT_SECTIONS`)."""
DOMAIN_PLOT = "domain_nll_vs_aspect_ratio.png"
SYNTHETIC_PLOT = "synthetic_acc_vs_aspect_ratio.png"
SYNTHETIC_FAMILY = "depthbench_synthetic_mc_"
"""Prefix of the synthetic depth tasks' per-family tasks (one panel each)."""

def sweep_eval_rows(sweep_dir: str) -> list[dict[str, Any]]:
    """One row per (run, task or group, metric) from the ``eval/results.json`` of every finished run
    (:func:`depthbench.runs.sweep_runs`), with the run's architecture, shape and aspect ratio (from its
    ``final/config.json``)."""
    rows = []
    for run in runs.sweep_runs(sweep_dir, finished=True):
        results = atomic.read_json(Path(run.run_dir) / runs.EVAL / runs.EVAL_RESULTS)
        if results is None:
            continue
        cfg = atomic.read_json(Path(run.model_dir) / "config.json")
        layers, width = cfg.get("num_hidden_layers"), cfg.get("hidden_size")
        for name, metric, value in metric_rows(results):
            rows.append({"run": run.name, "arch": run.arch, "L": layers, "d": width,
                         "aspect_ratio": round(width / layers, 3) if layers and width else None,
                         "task": name, "metric": metric, "value": value})
    return rows


# ============================================================================================ plots
def _plot_panel(ax, rows: list[dict[str, Any]], task: str, metric: str, title: str, ylabel: str) -> None:
    """The metric against d/L (log scale, deeper to the right), one line per architecture (mean over the runs at
    the same shape, e.g. seeds, with their min-max as a band); ticks at the measured shapes, labelled d/L and L."""
    from matplotlib.ticker import NullFormatter

    sel = [r for r in rows if r["task"] == task and r["metric"] == metric and r["aspect_ratio"]]
    for arch in sorted({r["arch"] for r in sel}):
        pts: dict[float, list[float]] = {}
        for r in sel:
            if r["arch"] == arch:
                pts.setdefault(r["aspect_ratio"], []).append(r["value"])
        xs = sorted(pts)
        n = max(len(v) for v in pts.values())
        line, = ax.plot(xs, [sum(pts[x]) / len(pts[x]) for x in xs], marker="o",
                        label=arch + (f" (n={n})" if n > 1 else ""))
        if n > 1:
            ax.fill_between(xs, [min(pts[x]) for x in xs], [max(pts[x]) for x in xs], color=line.get_color(),
                            alpha=0.15, lw=0)
    ticks = sorted({(r["aspect_ratio"], r["L"]) for r in sel})
    ax.set_xscale("log")
    ax.set_xticks([x for x, _ in ticks])
    ax.set_xticklabels([f"{x:g}\nL{L}" for x, L in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.invert_xaxis()
    ax.set_title(title)
    ax.set_xlabel("d / L (deeper to the right)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def _plot_panels(rows: list[dict[str, Any]], panels: list[tuple[str, str, str]], path: Path, ylabel: str) -> None:
    """One panel per ``(task, metric, title)`` (:func:`_plot_panel`), three to a row, saved as ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 3.6 * nrows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (task, metric, title) in zip(axes.flat, panels):
        _plot_panel(ax, rows, task, metric, title, ylabel)
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _write_plots(rows: list[dict[str, Any]], root: Path) -> list[str]:
    """``domain_nll_vs_aspect_ratio.png`` (one panel per domain, when the NLL groups were run) and
    ``synthetic_acc_vs_aspect_ratio.png`` (when the synthetic tasks were run) in ``root``; returns their names."""
    have = {(r["task"], r["metric"]) for r in rows}
    plots = []
    domains = [(g, "nll", f"{label} NLL") for g, label in DOMAIN_GROUPS.items() if (g, "nll") in have]
    if domains:
        _plot_panels(rows, domains, root / DOMAIN_PLOT, "NLL per target token (nats)")
        plots.append(DOMAIN_PLOT)
    synth = sorted(t for t, m in have if t.startswith(SYNTHETIC_FAMILY) and m == "acc")
    if synth:
        panels = [(t, "acc", t.removeprefix(SYNTHETIC_FAMILY)) for t in synth]
        if ("depthbench_synthetic", "acc") in have:
            panels.append(("depthbench_synthetic", "acc", "mean of families"))
        _plot_panels(rows, panels, root / SYNTHETIC_PLOT, "accuracy (chance 0.25)")
        plots.append(SYNTHETIC_PLOT)
    return plots


# ============================================================================================ report section
def _metric_table(rows: list[dict[str, Any]], task: str, metric: str, depths: list[int], archs: list[str]) -> list[str]:
    """One task and metric as a table of architecture x L (mean over the runs at each cell, e.g. seeds, and their
    min-max in brackets when there are several)."""
    sel = [r for r in rows if r["task"] == task and r["metric"] == metric]
    better = "lower" if metric.split(" ")[0] in ("nll", "ppl", "bits_per_byte") else "higher"
    lines = [f"**{task}** `{metric}` ({better} is better)", "",
             "| arch | " + " | ".join(f"L{L}" for L in depths) + " |",
             "|---|" + "---:|" * len(depths)]
    for arch in archs:
        cells = []
        for L in depths:
            vals = [r["value"] for r in sel if r["arch"] == arch and r["L"] == L]
            spread = f" ({fmt_value(min(vals))}\u2013{fmt_value(max(vals))})" if len(vals) > 1 else ""
            cells.append(fmt_value(sum(vals) / len(vals)) + spread if vals else "")
        lines.append(f"| {arch} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def synthetic_chance() -> dict[str, float]:
    """Chance accuracy of the synthetic multiple-choice tasks, from their questions (read by the task's own
    ``read_rows``, the installed ``depthbench_synthetic/data/test.jsonl``): per family task the mean of
    1 / (number of options), and for the group ``depthbench_synthetic`` the unweighted mean over the families (as the
    group aggregates them)."""
    from depthbench.eval_tasks.depthbench_synthetic.utils import read_rows

    per_family: dict[str, list[float]] = {}
    for row in read_rows("test"):
        per_family.setdefault(f"{SYNTHETIC_FAMILY}{row['task']}", []).append(1 / len(row["choices"]))
    chance = {task: sum(v) / len(v) for task, v in per_family.items()}
    if chance:
        chance["depthbench_synthetic"] = sum(chance.values()) / len(chance)
    return chance


def sample_counts(sweep_dir: str) -> dict[str, int]:
    """Per task or group, the fewest questions any evaluated run answered (lm-eval's ``sample_len``)."""
    counts: dict[str, int] = {}
    for run in runs.sweep_runs(sweep_dir, finished=True):
        results = atomic.read_json(Path(run.run_dir) / runs.EVAL / runs.EVAL_RESULTS) or {}
        for table in (results.get("results") or {}, results.get("groups") or {}):
            for task, row in table.items():
                n = row.get("sample_len") if isinstance(row, dict) else None
                if isinstance(n, int) and n > 0:
                    counts[task] = min(counts.get(task, n), n)
    return counts


def _same_values(rows: list[dict[str, Any]], task: str, a: str, b: str) -> bool:
    """Whether metric ``b`` of ``task`` equals metric ``a`` on every run (e.g. ``acc_norm`` on one-token answers)."""
    first = {r["run"]: r["value"] for r in rows if r["task"] == task and r["metric"] == a}
    second = {r["run"]: r["value"] for r in rows if r["task"] == task and r["metric"] == b}
    return bool(first) and first.keys() == second.keys() and all(first[k] == second[k] for k in first)


def _chance_notes(rows: list[dict[str, Any]], task: str, metric: str, chance: float | None, n: int | None
                  ) -> list[str]:
    """Under an accuracy table: chance and one run's sampling error at chance (binomial, ``sqrt(c (1 - c) / n)``),
    and a remark when every point is below chance."""
    if chance is None or metric not in ("acc", "acc_norm"):
        return []
    se = math.sqrt(chance * (1 - chance) / n) if n else None
    text = f"Chance is {chance:.2f}" + (
        f"; with {n} questions per run, one run's accuracy has a sampling error of \u00b1{se:.3f} near chance "
        f"(a model that only guesses lands within \u00b1{2 * se:.2f} of chance 95 % of the time)." if se else ".")
    cells: dict[tuple, list[float]] = {}
    for r in rows:
        if r["task"] == task and r["metric"] == metric:
            cells.setdefault((r["arch"], r["L"]), []).append(r["value"])
    means = [sum(v) / len(v) for v in cells.values()]
    if means and max(means) < chance:
        far = sum(m < chance - 2 * se for m in means) if se else None
        text += (f" **Below chance at every point** (means {min(means):.3f}\u2013{max(means):.3f}): "
                 + ("the models prefer a wrong option systematically; "
                    if far == len(means) else "")
                 + (f"{far} of {len(means)} points are more than two sampling errors below chance."
                    if far is not None else "the sampling error is unknown (no question count)."))
    return [text, ""]


def render_sweep_eval_section(rows: list[dict[str, Any]], plots: list[str], counts: dict[str, int] | None = None
                              ) -> str:
    """The report section: plots, then per task and metric a table of architecture x L (an ``acc_norm`` equal to
    ``acc`` on every run is said once, not shown twice), under each accuracy table its chance level and sampling
    error (``counts``: questions per run, :func:`sample_counts`)."""
    counts = counts or {}
    lines = ["## Downstream evaluation (`depthbench eval`)", ""]
    for plot in plots:
        lines += [f"![{plot}]({plot})", ""]
    keys = sorted({(r["task"], r["metric"]) for r in rows},
                  key=lambda k: (k[0] not in DOMAIN_GROUPS and k[0] != "depthbench_nll", k))
    duplicates = sorted({task for task, metric in keys if metric == "acc_norm"
                         and _same_values(rows, task, "acc", "acc_norm")})
    if duplicates:
        lines += ["`acc_norm` equals `acc` on every run of " + ", ".join(f"`{t}`" for t in duplicates)
                  + " (the length normalisation changes no answer), so only `acc` is shown for them.", ""]
    chance = synthetic_chance() if any(t.startswith("depthbench_synthetic") for t, _ in keys) else {}
    depths = sorted({r["L"] for r in rows if r["L"]})
    archs = sorted({r["arch"] for r in rows})
    for task, metric in keys:
        if metric == "acc_norm" and task in duplicates:
            continue
        lines += _metric_table(rows, task, metric, depths, archs)
        lines += _chance_notes(rows, task, metric, chance.get(task), counts.get(task))
    return "\n".join(lines).rstrip("\n") + "\n"


def _write_csv(rows: list[dict[str, Any]], path: str) -> None:
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic.write_text(path, table.getvalue())


def write_sweep_eval_report(sweep_dir: str, log=print) -> dict[str, str]:
    """``eval_results.csv``, the plots against aspect ratio (:func:`_write_plots`) and the ``evaluation`` section
    of the sweep's report (:func:`depthbench.runs.write_report_section`; the section is removed when no finished
    run was evaluated). Returns the paths written, ``"report"`` being ``report.md``."""
    root = Path(sweep_dir)
    rows = sweep_eval_rows(sweep_dir)
    paths: dict[str, str] = {}
    section = None
    if rows:
        paths["csv"] = str(root / runs.EVAL_TABLE)
        _write_csv(rows, paths["csv"])
        plots = _write_plots(rows, root)
        paths.update({plot: str(root / plot) for plot in plots})
        section = render_sweep_eval_section(rows, plots, sample_counts(sweep_dir))
        log(f"eval: sweep report section {SECTION}; {', '.join(plots) or 'no plot'}")
    paths["report"] = runs.write_report_section(sweep_dir, SECTION, section)
    return paths
