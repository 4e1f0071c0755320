"""The files of a sweep folder and ``depthbench report``: ``results.csv`` / ``results.jsonl`` (one row per run),
``loss_vs_aspect_ratio.png`` (``depthbench.sweeps.plots``), the results section of ``report.md`` (the setup, the
plot, the best-LR table, each architecture's loss change from the shallowest to the deepest shape against the seed
spread, the architectures ranked at each shape, every run) and the closing terminal table.

    depthbench report runs/400m                          # rebuild results.csv / plot / report.md / report.html

``report.md`` is assembled by ``depthbench.runs.write_report_section`` from its sections: the results (here), the
downstream evaluation (``depthbench eval``) and the layer analyses (``depthbench analyze``); ``report.html`` is the
same report as one self-contained page (``depthbench.report_page``).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from typing import Any

from depthbench import atomic, runs
from depthbench.sweeps.plots import plot_loss_vs_aspect_ratio
from depthbench.sweeps.report_study import study_section
from depthbench.sweeps.results import (
    COLUMNS,
    SPREAD_RULE,
    best_points,
    collect_results,
    loss_changes,
    metric_label,
    result_metrics,
    row_order,
    shape_rankings,
)


class ReportError(ValueError):
    """A sweep folder cannot be reported (the message says what is missing)."""


def write_report(out_dir: str, *, log: Callable[..., None] = print, plot: bool = True) -> dict[str, str]:
    """(Re)build ``results.csv``, ``results.jsonl``, the plot (unless ``plot=False``: the previous one stays) and
    ``report.md`` from the run summaries; returns ``{"csv", "jsonl", "plot", "report"}`` paths (no ``plot`` when
    none exists)."""
    rows = collect_results(out_dir)
    if not rows:
        raise ReportError(f"no finished or started runs under {os.path.join(out_dir, runs.RUNS)}: nothing to report")
    metrics = result_metrics(rows)
    columns = COLUMNS[:COLUMNS.index("eval_loss")] + [m for m in metrics if m != "eval_loss"] + \
        COLUMNS[COLUMNS.index("eval_loss"):] + ["run_dir"]
    paths = {k: os.path.join(out_dir, name) for k, name in
             [("csv", runs.RESULTS_CSV), ("jsonl", runs.RESULTS_JSONL), ("plot", runs.RESULTS_PLOT)]}
    # run folders relative to the sweep folder: the files are shared (the report repository carries results.csv)
    order = [{**r, "run_dir": _relative(r["run_dir"], out_dir)} for r in sorted(rows, key=row_order)]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(order)
    atomic.write_text(paths["csv"], table.getvalue())
    atomic.write_text(paths["jsonl"], "".join(json.dumps(r, default=str) + "\n" for r in order))
    plotted = (plot_loss_vs_aspect_ratio(rows, paths["plot"], metrics=metrics) if plot
               else os.path.exists(paths["plot"]))
    text = render_report(rows, metrics, plot_name=os.path.basename(paths["plot"]) if plotted else None,
                         spec=runs.sweep_definition(out_dir), folder=out_dir)
    if not plotted:
        paths.pop("plot")
    # the evaluation section is rebuilt from its own files (`depthbench eval` wrote them); the analyses' section
    # is kept as `depthbench analyze` wrote it
    from depthbench.evaluation.sweep import write_sweep_eval_report

    paths.update({f"eval:{k}": v for k, v in write_sweep_eval_report(out_dir, log=lambda *a: None).items()
                  if k != "report"})
    paths["report"] = runs.write_report_section(out_dir, "results", text)
    if runs.sweep_definition(out_dir).get("kind") == "upcycled":  # an upcycling study: its own results section
        from depthbench.sweeps.upcycled.report import write_study_section

        paths.update(write_study_section(out_dir))
    if runs.sweep_definition(out_dir).get("kind") == "released":  # releases of the study: its figures beside them
        from depthbench.sweeps.released.compare import write_published_section

        paths["report"] = write_published_section(out_dir)
    log("wrote " + ", ".join(paths.values()))
    return paths


def render_report(rows: list[dict[str, Any]], metrics: list[str], plot_name: str | None,
                  spec: dict[str, Any] | None = None, folder: str | None = None) -> str:
    """The markdown report: setup, plot, best-LR table, loss change shallow -> deep, the study beside, all runs.
    Paths are written relative to the sweep ``folder`` (a folder outside it by its name only): the report is
    shared, and a local absolute path means nothing to its reader."""
    spec = spec or {}
    lines = [f"# Aspect-ratio sweep{': ' + spec['name'] if spec.get('name') else ''}", ""]
    n_done = sum(r["status"] == "finished" for r in rows)
    n_div = sum(r["status"] == "diverged" for r in rows)
    n_planned = spec.get("planned") or len(spec.get("archs", [])) * len(spec.get("shapes", [])) * len(
        spec.get("lrs", [])) * len(spec.get("seeds", [])) or len(rows)
    lines += [f"{n_done} of {n_planned} runs finished" + (f", {n_div} diverged" if n_div else "")
              + (f", {n_planned - len(rows)} not started" if n_planned > len(rows) else "") + ". "
              + _lr_sentence(rows) + " Losses are mean next-token cross-entropy in nats/token on held-out data; "
              "lower is better.", ""]
    if spec.get("notes"):
        lines += [spec["notes"].strip(), ""]
    if spec:
        lines += _setup_lines(spec, rows, folder)
    if plot_name:
        lines += [f"![held-out loss vs aspect ratio]({plot_name})", ""]
    lines += _best_lr_table(rows, metrics)
    lines += _changes_section(rows, metrics)
    if spec.get("kind") != "released":  # a released folder has the study's own figures beside each point
        lines += study_section(rows, metrics, spec)
    lines += _rankings_section(rows, metrics)
    lines += ["", "## All runs", ""]
    cols = ["arch", "shape", "num_layers", "hidden_size", "aspect_ratio", "params_total", "lr", "seed", "steps",
            "tokens", "tokens_per_param", "final_train_loss", *metrics, "at_best_lr", "wall_time_s", "tokens_per_s",
            "status"]
    heads = [HEADS.get(c, c) for c in cols]
    lines += ["Per run; `final_train_loss` is the loss of the run's last training batch (one batch, so noisier "
              "than the held-out losses beside it).", "",
              "| " + " | ".join(heads) + " |", "|" + "---|" * len(cols)]
    for r in sorted(rows, key=row_order):
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


HEADS = {"final_train_loss": "final_train_loss (last batch)"}
"""Column headers of the all-runs table that say more than the column's name."""


def _lr_sentence(rows: list[dict[str, Any]]) -> str:
    """How the points' learning rate was chosen: one for every run, or each point's best."""
    lrs = sorted({r["lr"] for r in rows if r.get("lr") is not None})
    if len(lrs) == 1:
        return f"Every run has the same peak learning rate, {lrs[0]:g} (no learning-rate sweep)."
    return ("Each (architecture, shape) is shown at its best learning rate (lowest mean held-out loss over seeds, "
            "`eval_loss`).")


def _setup_lines(spec: dict[str, Any], rows: list[dict[str, Any]], folder: str | None = None) -> list[str]:
    """The setup section: architectures, shapes, LRs and seeds, the recipe with its tokens per parameter, the data."""
    base = spec.get("base") or {}
    train, data, optim = base.get("train") or {}, base.get("data") or {}, base.get("optim") or {}
    finished = [r for r in rows if r["status"] == "finished"]
    tokens = sorted({r["tokens"] for r in finished if r.get("tokens")})
    return ["## Setup", "",
            f"- architectures: {', '.join(spec.get('archs', []))}",
            f"- shapes: {', '.join(spec.get('shapes', []))}",
            f"- learning rates: {', '.join(f'{lr:g}' for lr in spec.get('lrs', []))}; "
            f"seeds: {', '.join(map(str, spec.get('seeds', [])))}",
            f"- recipe: {train.get('max_steps') or _common([r.get('steps') for r in finished]) or '?'} steps of "
            f"{train.get('global_batch_size', '?')} x "
            f"{data.get('seq_len', '?')} tokens"
            + (f" ({tokens[0]:,} tokens per run{_tokens_per_param(finished)})" if len(tokens) == 1 else "")
            + f", AdamW wd {optim.get('weight_decay', 0.1)}, warmup {optim.get('warmup_fraction', 0.1):g}, "
            f"cosine to {optim.get('min_lr_ratio', 0.1):g} x peak, clip {optim.get('grad_clip', 1.0):g}",
            f"- data: {_data_text(data.get('data_dir'), folder)}",
            *([f"- overrides: `{' '.join(spec['overrides'])}`"] if spec.get("overrides") else []),
            ""]


def _relative(path: str | None, folder: str) -> str | None:
    """``path`` relative to ``folder`` when it lies inside it (else unchanged)."""
    if not path:
        return path
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(folder))
    return rel if rel != ".." and not rel.startswith(".." + os.sep) else path


def _data_text(data_dir: str | None, folder: str | None) -> str:
    """The data folder as the report names it: relative to the sweep folder when inside it, else by its name
    (never a local absolute path)."""
    if not data_dir:
        return "?"
    rel = _relative(data_dir, folder) if folder else data_dir
    if rel != data_dir:
        return f"`{rel}` (in the sweep folder)"
    if os.path.isabs(data_dir):
        return f"`{os.path.basename(os.path.normpath(data_dir))}` (a prepared folder outside the sweep folder)"
    return f"`{data_dir}`"


def _best_lr_table(rows: list[dict[str, Any]], metrics: list[str]) -> list[str]:
    """Per architecture and shape at its best LR: each metric's mean over seeds, with the seeds' min-max."""
    lines = ["## Best learning rate per shape", "",
             "Each cell: the mean over the seeds, and in brackets their min-max (the seed spread).", "",
             "| arch | shape | L | d | d/L | params | best lr | seeds | "
             + " | ".join(f"{metric_label(m)} (`{m}`)" for m in metrics) + " |",
             "|---|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(metrics)]
    per_metric = {m: best_points(rows, m) for m in metrics}
    for arch, points in sorted(per_metric[metrics[-1]].items()):
        for p in points:
            cells = []
            for m in metrics:
                q = next((q for q in per_metric[m].get(arch, []) if q["shape"] == p["shape"]), None)
                cells.append("" if q is None else _mean_range(q))
            lines.append(f"| {arch} | {p['shape']} | {p['num_layers']} | {p['hidden_size']} | "
                         f"{p['aspect_ratio']:.1f} | {_fmt_params(p['params_total'])} | {p['lr']:g} | {p['seeds']} | "
                         + " | ".join(cells) + " |")
    return lines


VERDICTS = {"lower": "better (beyond)", "higher": "worse (beyond)", "within": "within",
            "one seed": "one seed (no spread)"}
"""How the changes table words each verdict of ``depthbench.sweeps.results.spread_verdict`` (deep against shallow)."""
SUMMARY = {"higher": "Deeper is worse, beyond the seed spread", "lower": "Deeper is better, beyond the seed spread",
           "within": "Within the seed spread", "one seed": "One seed, no spread to compare"}
"""The sentence openings of the summary under the changes table, one sentence per verdict."""


def _changes_section(rows: list[dict[str, Any]], metrics: list[str]) -> list[str]:
    """The loss change from the shallowest to the deepest shape per architecture and metric, with both points'
    seed spreads, the verdict in words, and the rule behind it."""
    changes = loss_changes(rows, metrics)
    lines = ["", "## Loss change from the shallowest to the deepest shape", "",
             "Change = mean loss of the deepest shape minus that of the shallowest, at the same parameter budget "
             "(negative = deeper is better); in brackets each point's seed spread (min-max over its seeds).", "",
             "| arch | metric | shallowest (L, d/L) | deepest (L, d/L) | shallow | deep | change | relative | "
             "deeper, against the seed spread |", "|---|---|---|---|---:|---:|---:|---:|---|"]
    for c in changes:
        a, b = c["shallow"], c["deep"]
        lines.append(f"| {c['arch']} | {metric_label(c['metric'])} | L{a['num_layers']}, {a['aspect_ratio']:.1f} | "
                     f"L{b['num_layers']}, {b['aspect_ratio']:.1f} | {_mean_range(a)} | {_mean_range(b)} | "
                     f"{c['change']:+.4f} | {100 * c['relative']:+.1f}% | {VERDICTS[c['verdict']]} |")
    if changes:
        lines += ["", "In words:", "", *_summary(changes, metrics)]
        lines += ["", f"**The rule.** {SPREAD_RULE}"]
    return lines


def _summary(changes: list[dict[str, Any]], metrics: list[str]) -> list[str]:
    """One sentence per verdict (each said once): the architectures and metrics it holds for, with their changes;
    "on every metric" / "every architecture" where it holds for all of them."""
    archs = sorted({c["arch"] for c in changes})
    out = []
    for verdict in ("higher", "lower", "within", "one seed"):
        mine = [c for c in changes if c["verdict"] == verdict]
        if not mine:
            continue
        values = [c["change"] for c in mine]
        span = (f"{min(values):+.4f}" if len(values) == 1 else f"{min(values):+.4f} to {max(values):+.4f}")
        if len(mine) == len(changes):
            who = ("every architecture" if len(archs) > 1 else f"**{archs[0]}**") + (
                ", on every metric" if len(metrics) > 1 else "")
            out.append(f"- {SUMMARY[verdict]}: {who} (changes {span} nats/token).")
            continue
        parts = []
        for arch in archs:
            own = [c for c in mine if c["arch"] == arch]
            if not own:
                continue
            if len(own) == len(metrics) > 1:
                each = ", ".join(f"{c['change']:+.4f}" for c in own)
                parts.append(f"**{arch}** on every metric ({each})")
            else:
                parts.append(f"**{arch}** on " + ", ".join(f"{metric_label(c['metric'])} ({c['change']:+.4f})"
                                                         for c in own))
        out.append(f"- {SUMMARY[verdict]}: " + "; ".join(parts) + ".")
    return out


def _rankings_section(rows: list[dict[str, Any]], metrics: list[str]) -> list[str]:
    """The architectures at each shape, lowest loss first, each neighbouring pair marked by the seed-spread rule."""
    rankings = shape_rankings(rows, metrics)
    if not rankings:
        return []
    lines = ["", "## Architectures at the same shape", "",
             "Lowest mean loss first; between neighbours `<` = lower beyond the seed spread, `\u2248` = within it "
             "(`?` = one seed, no spread to compare).", "",
             "| metric | shape | L | architectures, lowest loss first |", "|---|---|---:|---|"]
    marks = {"lower": "<", "within": "\u2248", "one seed": "?", "higher": ">"}
    for r in rankings:
        cells = [f"{arch} {p['mean']:.4f}" for arch, p in r["order"]]
        text = cells[0] + "".join(f" {marks[v]} {c}" for v, c in zip(r["verdicts"], cells[1:]))
        lines.append(f"| {metric_label(r['metric'])} | {r['shape']} | {r['num_layers']} | {text} |")
    return lines


def _mean_range(p: dict[str, Any]) -> str:
    """``mean (min-max)`` of a best-LR point (the mean alone for one seed)."""
    return f"{p['mean']:.4f}" + (f" ({p['min']:.4f}\u2013{p['max']:.4f})" if p["seeds"] > 1 else "")


def _tokens_per_param(finished: list[dict[str, Any]]) -> str:
    """``, 5.0-5.3 tokens per parameter`` over the finished runs (empty when unknown)."""
    tpp = [r["tokens_per_param"] for r in finished if r.get("tokens_per_param")]
    if not tpp:
        return ""
    low, high = min(tpp), max(tpp)
    return f", {low:.1f}" + (f"-{high:.1f}" if f"{high:.1f}" != f"{low:.1f}" else "") + " tokens per parameter"


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
                     f"{c['change']:+.4f}{'*' if c['verdict'] in ('lower', 'higher') else ''}"
                     for c in changes if c["arch"] == arch]
            first = next(c for c in changes if c["arch"] == arch)
            log(f"  {arch:<12}L{first['shallow']['num_layers']} -> L{first['deep']['num_layers']}: "
                + ", ".join(parts))
        if any(c["verdict"] != "one seed" for c in changes):
            log("  (*: beyond the seed spread, the seeds' min-max ranges do not overlap; the rest is within it)")
    not_done = [r for r in rows if r["status"] != "finished"]
    if not_done:
        log(f"({len(not_done)} run(s) not finished: " + ", ".join(
            f"{os.path.basename(r['run_dir'])} {r['status']}" for r in not_done) + ")")
