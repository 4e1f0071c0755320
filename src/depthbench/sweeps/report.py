"""Results of a sweep folder: ``results.csv`` / ``results.jsonl``, the loss-vs-aspect-ratio plot, ``report.md``,
the closing terminal table, and the ``depthbench report`` command.

    depthbench report runs/400m                          # rebuild results.csv / plot / report.md

Reads only files: ``<out>/sweep.json`` (the definition written by ``depthbench.sweeps.runner``), and per run folder
``<out>/runs/<run id>/`` its ``summary.json``, ``run_config.json`` and the newest checkpoint's trainer state
(``depthbench.training.checkpoint.latest_trainer_state``). Nothing here trains or imports the trainer.

Results: ``results.csv`` / ``results.jsonl`` (one row per run: architecture, L, d, d/L, parameters, tokens, final
train loss, held-out losses, learning rate, the best learning rate of its (architecture, shape), seed, wall time,
tokens/s), ``loss_vs_aspect_ratio.png`` (held-out loss against d/L, one line per architecture at its best learning
rate, mean and min-max over seeds; one panel per eval split plus their mean) and ``report.md`` (the setup, the
plot, the best-LR table and each architecture's loss change from the shallowest to the deepest shape).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable
from typing import Any

from depthbench import atomic, runs
from depthbench.training.checkpoint import latest_trainer_state


class ReportError(ValueError):
    """A sweep folder cannot be reported (the message says what is missing)."""


def read_json(path: str) -> Any:
    """The JSON content of ``path``, or ``None`` when it is missing or unreadable (a run still being written)."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def read_summary(run_dir: str) -> dict[str, Any] | None:
    """``summary.json`` of a run folder as a dict (``None`` when the run has not written one)."""
    summary = read_json(os.path.join(run_dir, "summary.json"))
    return summary if isinstance(summary, dict) else None


# ================================================================================================ results
_COLUMNS = [
    "arch", "shape", "num_layers", "hidden_size", "aspect_ratio", "params_total", "params_backbone", "params_extra",
    "lr", "seed", "tokens", "steps", "final_train_loss", "eval_loss", "best_lr", "at_best_lr", "wall_time_s",
    "tokens_per_s", "status",
]


def _split_column(split: str) -> str:
    """Result column of an eval split: ``eval_text`` -> ``eval_text``, ``val`` -> ``eval_val``, ``eval`` ->
    ``eval_heldout`` (``eval_loss`` is reserved for the mean over splits)."""
    if split == "eval":
        return "eval_heldout"
    return split if split.startswith("eval_") and split != "eval_loss" else f"eval_{split}"


def _row(run_dir: str, summary: dict[str, Any]) -> dict[str, Any]:
    record = read_json(os.path.join(run_dir, "run_config.json")) or {}
    cfg = record.get("config") or {}
    resolved = record.get("resolved") or {}
    model_cfg = resolved.get("model_config") or {}
    arch = summary.get("arch") or (cfg.get("model") or {}).get("arch")
    shape_name = (cfg.get("model") or {}).get("shape") or os.path.basename(run_dir).split("__")[1:2]
    if isinstance(shape_name, list):
        shape_name = shape_name[0] if shape_name else None
    num_layers, hidden = model_cfg.get("num_hidden_layers"), model_cfg.get("hidden_size")
    params = summary.get("parameters") or resolved.get("parameter_counts") or {}
    evals = summary.get("eval") or {}
    wall = summary.get("wall_time_s")
    state = latest_trainer_state(run_dir)
    if state and state.get("train_time_s"):  # summed over sessions (summary.json holds the last session only)
        wall = max(wall or 0.0, state["train_time_s"])
    row: dict[str, Any] = {
        "arch": arch,
        "shape": shape_name,
        "num_layers": num_layers,
        "hidden_size": hidden,
        "aspect_ratio": round(hidden / num_layers, 3) if num_layers and hidden else None,
        "params_total": params.get("total"),
        "params_backbone": params.get("backbone"),
        "params_extra": params.get("extra"),
        "lr": (cfg.get("optim") or {}).get("lr"),
        "seed": (cfg.get("train") or {}).get("seed"),
        "tokens": summary.get("tokens"),
        "steps": summary.get("steps"),
        "final_train_loss": summary.get("final_train_loss"),
        "wall_time_s": round(wall, 2) if isinstance(wall, (int, float)) else None,
        "tokens_per_s": round(summary["tokens_per_s"], 1) if summary.get("tokens_per_s") else None,
        "status": summary.get("status"),
        "run_dir": run_dir,
    }
    for split, loss in sorted(evals.items()):
        row[_split_column(split)] = loss
    row["eval_loss"] = _main_eval(evals)
    return row


def _main_eval(evals: dict[str, float]) -> float | None:
    """The selection metric: the mean over the eval splits (each split is also reported on its own)."""
    vals = [v for v in evals.values() if isinstance(v, (int, float)) and math.isfinite(v)]
    return sum(vals) / len(vals) if vals and len(vals) == len(evals) else None


def collect_results(out_dir: str) -> list[dict[str, Any]]:
    """One row per run found under ``<out>/runs`` (finished or not), with ``best_lr`` / ``at_best_lr`` marked."""
    runs_root = os.path.join(out_dir, "runs")
    rows = []
    for name in sorted(os.listdir(runs_root)) if os.path.isdir(runs_root) else []:
        summary = read_summary(os.path.join(runs_root, name))
        if summary is not None:
            rows.append(_row(os.path.join(runs_root, name), summary))
    _mark_best_lr(rows)
    return rows


def _mark_best_lr(rows: list[dict[str, Any]]) -> None:
    """Per (arch, shape), the learning rate with the lowest mean (over seeds) ``eval_loss`` among finished runs is
    ``best_lr``; ``at_best_lr`` marks the rows trained at it."""
    by_point: dict[tuple, dict[float, list[float]]] = {}
    for r in rows:
        if r["eval_loss"] is not None and r["status"] == "finished":
            by_point.setdefault((r["arch"], r["shape"]), {}).setdefault(r["lr"], []).append(r["eval_loss"])
    best = {k: min(sorted(v), key=lambda lr: sum(v[lr]) / len(v[lr])) for k, v in by_point.items()}
    for r in rows:
        r["best_lr"] = best.get((r["arch"], r["shape"]))
        r["at_best_lr"] = r["best_lr"] is not None and r["best_lr"] == r["lr"] and r["status"] == "finished"


def best_points(rows: list[dict[str, Any]], metric: str = "eval_loss") -> dict[str, list[dict[str, Any]]]:
    """Per architecture, one entry per shape at its best learning rate: mean, min and max of ``metric`` over
    seeds; sorted from the shallowest (widest, largest d/L) to the deepest shape."""
    out: dict[str, list[dict[str, Any]]] = {}
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("at_best_lr") and isinstance(r.get(metric), (int, float)) and math.isfinite(r[metric]):
            groups.setdefault((r["arch"], r["shape"]), []).append(r)
    for (arch, shape), rs in groups.items():
        vals = [r[metric] for r in rs]
        out.setdefault(arch, []).append({
            "shape": shape, "num_layers": rs[0]["num_layers"], "hidden_size": rs[0]["hidden_size"],
            "aspect_ratio": rs[0]["aspect_ratio"], "lr": rs[0]["lr"], "seeds": len(vals),
            "params_total": rs[0]["params_total"], "mean": sum(vals) / len(vals), "min": min(vals),
            "max": max(vals),
        })
    for arch in out:
        out[arch].sort(key=lambda p: (p["num_layers"] or 0, -(p["aspect_ratio"] or 0)))
    return out


def result_metrics(rows: list[dict[str, Any]]) -> list[str]:
    """The held-out metrics to report: each eval split's column, then their mean ``eval_loss`` (only the mean when
    there is a single split). Synthetic splits come first, as they are the ones meant to measure depth."""
    splits = sorted({k for r in rows for k in r if k.startswith("eval_") and k != "eval_loss"},
                    key=lambda k: (0 if "synthetic" in k else 1, k))
    return [*splits, "eval_loss"] if len(splits) > 1 else ["eval_loss"]


def metric_label(metric: str) -> str:
    """Human-readable name of a result metric."""
    if metric == "eval_loss":
        return "mean of the eval splits"
    name = metric.removeprefix("eval_")
    return {"synthetic": "synthetic depth tasks", "text": "held-out text", "heldout": "held-out"}.get(name, name)


def write_report(out_dir: str, *, log: Callable[..., None] = print, plot: bool = True) -> dict[str, str]:
    """(Re)build ``results.csv``, ``results.jsonl``, the plot (unless ``plot=False``: the previous one stays) and
    ``report.md`` from the run summaries; returns ``{"csv", "jsonl", "plot", "report"}`` paths (no ``plot`` when
    none exists)."""
    rows = collect_results(out_dir)
    if not rows:
        raise ReportError(f"no finished or started runs under {os.path.join(out_dir, 'runs')}: nothing to report")
    metrics = result_metrics(rows)
    columns = _COLUMNS[:_COLUMNS.index("eval_loss")] + [m for m in metrics if m != "eval_loss"] + \
        _COLUMNS[_COLUMNS.index("eval_loss"):] + ["run_dir"]
    paths = {k: os.path.join(out_dir, name) for k, name in
             [("csv", "results.csv"), ("jsonl", "results.jsonl"), ("plot", "loss_vs_aspect_ratio.png"),
              ("report", "report.md")]}
    order = sorted(rows, key=_row_order)
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(order)
    atomic.write_text(paths["csv"], table.getvalue())
    atomic.write_text(paths["jsonl"], "".join(json.dumps(r, default=str) + "\n" for r in order))
    plotted = (plot_loss_vs_aspect_ratio(rows, paths["plot"], metrics=metrics) if plot
               else os.path.exists(paths["plot"]))
    definition = (read_json(os.path.join(out_dir, "sweep.json")) or {}).get("spec")
    text = render_report(rows, metrics, plot_name=os.path.basename(paths["plot"]) if plotted else None,
                         spec=definition)
    paths["report"] = runs.write_report_section(out_dir, "results", text)
    if not plotted:
        paths.pop("plot")
    # eval_results.csv and the plots of `depthbench eval` (if any run was evaluated) follow the runs; its section of
    # report.md is rebuilt with them
    from depthbench.evaluation.sweep import write_sweep_eval_report

    paths.update({f"eval:{k}": v for k, v in write_sweep_eval_report(out_dir, log=lambda *a: None).items()
                  if k != "report"})
    log("wrote " + ", ".join(paths.values()))
    return paths


def _row_order(r: dict[str, Any]) -> tuple:
    return (str(r["arch"]), r["num_layers"] or 0, r["lr"] or 0, r["seed"] or 0)


def plot_loss_vs_aspect_ratio(rows: list[dict[str, Any]], path: str, metrics: list[str]) -> bool:
    """One panel per metric: held-out loss (best LR; mean over seeds, min-max band) against d/L, one line per
    architecture, wide-shallow on the left, deep-narrow on the right (log axis). Returns False when matplotlib is
    missing or nothing finished yet."""
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
            ax.plot(xs, [p["mean"] for p in points], marker=markers[i % len(markers)], color=colors[arch],
                    label=label, lw=1.6, ms=5)
            if seeds > 1:
                ax.fill_between(xs, [p["min"] for p in points], [p["max"] for p in points], color=colors[arch],
                                alpha=0.15, lw=0)
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
    band = "; band = min-max over seeds" if n_seeds > 1 else "; one seed per point"
    fig.suptitle(f"Held-out loss vs aspect ratio at a fixed parameter budget (best LR per point{band})",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return True


def loss_changes(rows: list[dict[str, Any]], metrics: list[str]) -> list[dict[str, Any]]:
    """Per architecture and metric: best-LR loss at the shallowest and the deepest shape and the change."""
    out = []
    for metric in metrics:
        for arch, points in sorted(best_points(rows, metric).items()):
            if len(points) < 2:
                continue
            a, b = points[0], points[-1]
            out.append({"arch": arch, "metric": metric, "shallow": a, "deep": b, "change": b["mean"] - a["mean"],
                        "relative": (b["mean"] - a["mean"]) / a["mean"] if a["mean"] else None})
    return out


def render_report(rows: list[dict[str, Any]], metrics: list[str], plot_name: str | None,
                  spec: dict[str, Any] | None = None) -> str:
    """The markdown report: setup, plot, best-LR table, loss change shallow -> deep, all runs."""
    spec = spec or {}
    lines = [f"# Aspect-ratio sweep{': ' + spec['name'] if spec.get('name') else ''}", ""]
    n_done = sum(r["status"] == "finished" for r in rows)
    n_div = sum(r["status"] == "diverged" for r in rows)
    n_planned = len(spec.get("archs", [])) * len(spec.get("shapes", [])) * len(spec.get("lrs", [])) * len(
        spec.get("seeds", [])) or len(rows)
    lines += [f"{n_done} of {n_planned} runs finished" + (f", {n_div} diverged" if n_div else "")
              + (f", {n_planned - len(rows)} not started" if n_planned > len(rows) else "") + ". "
              "Each (architecture, shape) is shown at its best learning rate (lowest mean held-out loss over seeds, "
              "`eval_loss`). Losses are mean next-token cross-entropy in nats/token on held-out data; lower is "
              "better.", ""]
    if spec.get("notes"):
        lines += [spec["notes"].strip(), ""]
    if spec:
        base = spec.get("base") or {}
        train, data, optim = base.get("train") or {}, base.get("data") or {}, base.get("optim") or {}
        finished = [r for r in rows if r["status"] == "finished"]
        tokens = sorted({r["tokens"] for r in finished if r.get("tokens")})
        lines += ["## Setup", "",
                  f"- architectures: {', '.join(spec.get('archs', []))}",
                  f"- shapes: {', '.join(spec.get('shapes', []))}",
                  f"- learning rates: {', '.join(f'{lr:g}' for lr in spec.get('lrs', []))}; "
                  f"seeds: {', '.join(map(str, spec.get('seeds', [])))}",
                  f"- recipe: {train.get('max_steps') or _common([r.get('steps') for r in finished]) or '?'} steps of "
                  f"{train.get('global_batch_size', '?')} x "
                  f"{data.get('seq_len', '?')} tokens"
                  + (f" ({tokens[0]:,} tokens per run)" if len(tokens) == 1 else "")
                  + f", AdamW wd {optim.get('weight_decay', 0.1)}, warmup {optim.get('warmup_fraction', 0.1):g}, "
                  f"cosine to {optim.get('min_lr_ratio', 0.1):g} x peak, clip {optim.get('grad_clip', 1.0):g}",
                  f"- data: `{data.get('data_dir', '?')}`",
                  *([f"- overrides: `{' '.join(spec['overrides'])}`"] if spec.get("overrides") else []),
                  ""]
    if plot_name:
        lines += [f"![held-out loss vs aspect ratio]({plot_name})", ""]
    lines += ["## Best learning rate per shape", "",
              "| arch | shape | L | d | d/L | params | best lr | seeds | "
              + " | ".join(f"{metric_label(m)} (`{m}`)" for m in metrics) + " |",
              "|---|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(metrics)]
    per_metric = {m: best_points(rows, m) for m in metrics}
    for arch, points in sorted(per_metric[metrics[-1]].items()):
        for p in points:
            cells = []
            for m in metrics:
                q = next((q for q in per_metric[m].get(arch, []) if q["shape"] == p["shape"]), None)
                cells.append("" if q is None else f"{q['mean']:.4f}" + (
                    f" ({q['min']:.4f}-{q['max']:.4f})" if q["seeds"] > 1 else ""))
            lines.append(f"| {arch} | {p['shape']} | {p['num_layers']} | {p['hidden_size']} | "
                         f"{p['aspect_ratio']:.1f} | {_fmt_params(p['params_total'])} | {p['lr']:g} | {p['seeds']} | "
                         + " | ".join(cells) + " |")
    lines += ["", "## Loss change from the shallowest to the deepest shape", "",
              "Negative = the deepest shape reached a lower held-out loss than the shallowest at the same "
              "parameter budget.", "",
              "| arch | metric | shallowest (L, d/L) | deepest (L, d/L) | loss (shallow \u2192 deep) | change | "
              "relative |", "|---|---|---|---|---|---:|---:|"]
    for c in loss_changes(rows, metrics):
        a, b = c["shallow"], c["deep"]
        lines.append(f"| {c['arch']} | {metric_label(c['metric'])} | L{a['num_layers']}, {a['aspect_ratio']:.1f} | "
                     f"L{b['num_layers']}, {b['aspect_ratio']:.1f} | {a['mean']:.4f} \u2192 {b['mean']:.4f} | "
                     f"{c['change']:+.4f} | {100 * c['relative']:+.1f}% |")
    lines += ["", "## All runs", ""]
    cols = ["arch", "shape", "num_layers", "hidden_size", "aspect_ratio", "params_total", "lr", "seed", "steps",
            "tokens", "final_train_loss", *metrics, "at_best_lr", "wall_time_s", "tokens_per_s", "status"]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in sorted(rows, key=_row_order):
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _common(values: list[Any]) -> Any:
    """The value shared by all ``values`` (None when they differ or are empty)."""
    return values[0] if values and all(v == values[0] for v in values) else None


def _fmt_params(n: int | None) -> str:
    return "" if n is None else f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n / 1e3:.1f}k"


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"
    return "" if v is None else str(v)


def print_table(rows: list[dict[str, Any]], metrics: list[str] | None = None, log: Callable[..., None] = print
                ) -> None:
    """The closing terminal table: per architecture and shape, the best-LR held-out losses, then each
    architecture's change from the shallowest to the deepest shape."""
    metrics = metrics or result_metrics(rows)
    names = [m.removeprefix("eval_") if m != "eval_loss" else "mean" for m in metrics]
    header = f"{'arch':<12}{'shape':<12}{'L':>4}{'d':>6}{'d/L':>8}{'params':>9}{'lr':>9}" + "".join(
        f"{n:>12}" for n in names)
    log(header)
    log("-" * len(header))
    per_metric = {m: best_points(rows, m) for m in metrics}
    for arch, points in sorted(per_metric[metrics[-1]].items()):
        for p in points:
            vals = []
            for m in metrics:
                match = [q for q in per_metric[m].get(arch, []) if q["shape"] == p["shape"]]
                vals.append(f"{match[0]['mean']:>12.4f}" if match else f"{'':>12}")
            log(f"{arch:<12}{p['shape']:<12}{p['num_layers']:>4}{p['hidden_size']:>6}{p['aspect_ratio']:>8.1f}"
                f"{_fmt_params(p['params_total']):>9}{p['lr']:>9.1e}" + "".join(vals))
    changes = loss_changes(rows, metrics)
    if changes:
        log("")
        log("loss change, shallowest -> deepest shape (best LR; negative = deeper is better):")
        for arch in sorted({c["arch"] for c in changes}):
            parts = [f"{(c['metric'].removeprefix('eval_') if c['metric'] != 'eval_loss' else 'mean')} "
                     f"{c['change']:+.4f}" for c in changes if c["arch"] == arch]
            first = next(c for c in changes if c["arch"] == arch)
            log(f"  {arch:<12}L{first['shallow']['num_layers']} -> L{first['deep']['num_layers']}: "
                + ", ".join(parts))
    not_done = [r for r in rows if r["status"] != "finished"]
    if not_done:
        log(f"({len(not_done)} run(s) not finished: " + ", ".join(
            f"{os.path.basename(r['run_dir'])} {r['status']}" for r in not_done) + ")")


# ================================================================================================ CLI
def _cmd_report(args) -> int:
    if not os.path.isdir(args.run_dir):
        raise ReportError(f"{args.run_dir} is not a folder (give the --out folder of a sweep)")
    paths = write_report(args.run_dir, log=lambda *_: None)
    print_table(collect_results(args.run_dir))
    print()
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def register_cli(subparsers) -> None:
    """Add ``depthbench report``."""
    r = subparsers.add_parser("report", help="rebuild results.csv, the plot and report.md of a sweep folder")
    r.add_argument("run_dir", help="the --out folder of a sweep")
    r.set_defaults(func=_cmd_report)
