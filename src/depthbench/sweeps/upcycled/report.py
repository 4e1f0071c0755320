"""The results of an upcycling study folder (``depthbench upcycle-study``), read from its files only:
``results.csv`` (one row per run: design, start, step-0 and final held-out loss, tokens), ``upcycle_study.png``
(held-out loss against the step per design, the source's step-0 loss as a line; the logit-lens curves before and
after training) and the study's results section of ``report.md`` / ``report.html``, every sentence computed from
the folder. ``depthbench report OUT`` rebuilds them (``depthbench.sweeps.report.write_report`` calls
:func:`write_study_section` for a study folder).
"""

from __future__ import annotations

import csv
import io
import math
import os
from typing import Any

from depthbench import atomic, runs
from depthbench.sweeps.results import SPREAD_RULE, spread_verdict

STUDY = "study.json"
STEP0 = "step0.json"
MODELS = "models"
PLOT = "upcycle_study.png"
COLUMNS = ["arch", "start", "deviation_relative", "bound_relative", "new_blocks", "num_layers", "hidden_size",
           "params_total", "lr", "seed", "global_batch_size", "seq_len", "steps", "tokens", "tokens_per_param",
           "loss_source_step0", "loss_step0", "loss_final", "change", "below_step0", "status", "init_sha256",
           "run_dir"]


def read_definition(out_dir: str) -> dict[str, Any]:
    """The study's definition (``study.json``; ``{}`` when there is none)."""
    return ((atomic.read_json(os.path.join(out_dir, STUDY)) or {}).get("definition")) or {}


def study_rows(out_dir: str) -> list[dict[str, Any]]:
    """One row per run folder of the study (finished or not)."""
    defn = read_definition(out_dir)
    split = defn.get("split", "eval")
    step0 = (atomic.read_json(os.path.join(out_dir, STEP0)) or {}).get("models", {})
    rows = []
    for run in runs.sweep_runs(out_dir):
        if run.summary is None:
            continue
        arch = run.arch
        up = atomic.read_json(os.path.join(out_dir, MODELS, arch, "upcycle.json")) or {}
        record = atomic.read_json(os.path.join(run.run_dir, runs.RUN_CONFIG)) or {}
        resolved = record.get("resolved") or {}
        model_cfg = resolved.get("model_config") or {}
        params = (run.summary.get("parameters") or {}).get("total")
        tokens = run.summary.get("tokens")
        final = (run.summary.get("eval") or {}).get(split)
        start = (step0.get(arch) or {}).get("loss")
        row = {
            "arch": arch, "start": up.get("start"), "deviation_relative": up.get("deviation_relative"),
            "bound_relative": up.get("bound_relative"), "new_blocks": (up.get("growth") or {}).get("new_blocks"),
            "num_layers": model_cfg.get("num_hidden_layers"), "hidden_size": model_cfg.get("hidden_size"),
            "params_total": params, "lr": ((record.get("config") or {}).get("optim") or {}).get("lr"),
            "seed": ((record.get("config") or {}).get("train") or {}).get("seed"),
            "global_batch_size": ((record.get("config") or {}).get("train") or {}).get("global_batch_size"),
            "seq_len": ((record.get("config") or {}).get("data") or {}).get("seq_len"),
            "steps": run.summary.get("steps"), "tokens": tokens,
            "tokens_per_param": round(tokens / params, 4) if tokens and params else None,
            "loss_source_step0": (step0.get("source") or {}).get("loss"), "loss_step0": start,
            "loss_final": final if run.summary.get("status") == "finished" else None,
            "status": run.summary.get("status"),
            "init_sha256": (resolved.get("init_from") or {}).get("sha256"), "run_dir": run.run_dir,
        }
        if row["loss_final"] is not None and start is not None:
            row["change"] = row["loss_final"] - start
            row["below_step0"] = row["loss_final"] < start
        rows.append(row)
    return rows


def _points(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per design: the finished runs' final losses as a point of ``spread_verdict`` (mean, min, max, seeds)."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["loss_final"] is None:
            continue
        p = out.setdefault(r["arch"], {"vals": [], "step0": r["loss_step0"]})
        p["vals"].append(r["loss_final"])
    for p in out.values():
        v = p.pop("vals")
        p.update(mean=sum(v) / len(v), min=min(v), max=max(v), seeds=len(v))
    return out


# ================================================================================================ plot
def plot_study(out_dir: str, rows: list[dict[str, Any]], path: str) -> bool:
    """Held-out loss against the step (every run, its step-0 loss as step 0; the source's as a dashed line) and,
    when the logit lens was run, its KL to the final layer per relative depth before (dashed) and after (solid)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    split = read_definition(out_dir).get("split", "eval")
    step0 = (atomic.read_json(os.path.join(out_dir, STEP0)) or {}).get("models", {})
    lens = _lens_curves(out_dir, rows)
    fig, axes = plt.subplots(1, 2 if lens else 1, figsize=(11 if lens else 6, 4.2), squeeze=False)
    ax = axes[0][0]
    archs = sorted({r["arch"] for r in rows})
    colors = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(archs)}
    drawn = False
    for r in sorted(rows, key=lambda r: (r["arch"], r["seed"] or 0)):
        key = f"eval/{split}/loss"
        pts = [(m["step"], m[key]) for m in runs.read_metrics(r["run_dir"]) if key in m]
        if r["loss_step0"] is not None:
            pts = [(0, r["loss_step0"])] + pts
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o", ms=3, color=colors[r["arch"]], label=f"{r['arch']} (seed {r['seed']})")
            drawn = True
    if "source" in step0:
        ax.axhline(step0["source"]["loss"], color="grey", ls="--", lw=1, label="source at step 0")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(f"held-out loss on {split} (nats/token)")
    ax.set_title("continued training of the upcycled models", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if lens:
        ax = axes[0][1]
        for (arch, when), ys in sorted(lens.items()):
            n = len(ys) - 1
            ax.plot([i / n for i in range(n + 1)], ys, ls="--" if when == "before" else "-", marker=".",
                    color=colors.get(arch, "grey"), label=f"{arch} {when}")
        ax.set_xlabel("relative depth (block / L)")
        ax.set_yscale("symlog", linthresh=1.0)  # the embedding's KL (~100 nats) would flatten the blocks' (~1-20)
        ax.set_ylabel("logit lens: KL to the final layer (nats, symlog)")
        ax.set_title("logit lens before (dashed) and after (solid) training", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return drawn


def _lens_curves(out_dir: str, rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[float]]:
    curves = {}
    source = atomic.read_json(os.path.join(out_dir, runs.ANALYSIS, "source", "logit_lens.json"))
    if source:
        curves[("source", "before")] = source["values"]["kl_to_final"]
    for arch in sorted({r["arch"] for r in rows}):
        before = atomic.read_json(os.path.join(out_dir, runs.ANALYSIS, "before", arch, "logit_lens.json"))
        if before:
            curves[(arch, "before")] = before["values"]["kl_to_final"]
        first = min((r for r in rows if r["arch"] == arch), key=lambda r: r["seed"] or 0)
        after = atomic.read_json(os.path.join(out_dir, runs.ANALYSIS, os.path.basename(first["run_dir"]),
                                              "logit_lens.json"))
        if after:
            curves[(arch, "after")] = after["values"]["kl_to_final"]
    return curves


# ================================================================================================ text
def _f(v: Any, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}f}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"
    return str(v)


def _names(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def render_study(out_dir: str, rows: list[dict[str, Any]], plot_name: str | None) -> str:
    defn = read_definition(out_dir)
    step0 = (atomic.read_json(os.path.join(out_dir, STEP0)) or {}).get("models", {})
    archs = [a for a in defn.get("archs", []) if os.path.isfile(os.path.join(out_dir, MODELS, a, "upcycle.json"))]
    ups = {a: atomic.read_json(os.path.join(out_dir, MODELS, a, "upcycle.json")) for a in archs}
    lines = [f"# Upcycling study: {defn.get('source')}", ""]
    if not archs:
        return "\n".join(lines + ["No design has been upcycled yet.", ""])
    up0 = ups[archs[0]]
    src = up0["source"]
    layout = up0["growth"]["layout"]
    config = atomic.read_json(os.path.join(out_dir, MODELS, archs[0], "config.json")) or {}
    n_src = sum(1 for s in layout if s is not None)
    grown = up0["growth"]["new_blocks"]
    growth = (f"grown from {n_src} to {len(layout)} blocks by {grown} new block{'s' if grown > 1 else ''} "
              f"({up0['growth']['mode']}; their "
              "output projections start at zero)") if grown else f"at the source's own depth of {n_src} blocks"
    lines += [f"The source {src['name']} ({src['family']}, width {config.get('hidden_size')}) was upcycled into "
              f"{len(archs)} design(s), {_names(archs)}, {growth}. Held-out losses are mean next-token cross-entropy "
              f"in nats/token on the first windows of split `{defn.get('split')}` of `{defn.get('data_dir')}`, the "
              "windows the trainer evaluates; lower is better.", ""]
    if plot_name:
        lines += [f"![held-out loss during continued training]({plot_name})", ""]
    # ---- step 0
    lines += ["## The start (step 0)", "",
              "| design | start | logits deviation (relative) | stated bound | step-0 held-out loss | source's | "
              "difference |", "|---|---|---|---|---|---|---|"]
    src_loss = (step0.get("source") or {}).get("loss")
    diffs = {}
    for a in archs:
        loss = (step0.get(a) or {}).get("loss")
        diffs[a] = loss - src_loss if loss is not None and src_loss is not None else None
        lines.append(f"| {a} | {ups[a]['start']} | {_f(ups[a]['deviation_relative'])} | "
                     f"{_f(ups[a]['bound_relative'])} | {_f(loss)} | {_f(src_loss)} | "
                     f"{_f(diffs[a], 6) if diffs[a] is not None else '–'} |")
    lines.append("")
    if src_loss is not None and all(d is not None for d in diffs.values()):
        worst = max(archs, key=lambda a: abs(diffs[a]))
        lines += [f"At step 0 the source's held-out loss is {src_loss:.4f}; the largest difference of an upcycled "
                  f"model from it is {abs(diffs[worst]):.2e} nats/token "
                  f"({worst}, whose start is {ups[worst]['start']}).",
                  ""]
    # ---- training
    finished = [r for r in rows if r["loss_final"] is not None]
    lines += ["## After continued training", ""]
    if not finished:
        lines += [f"No run has finished yet ({len(rows)} started).", ""]
        return "\n".join(lines) + "\n"
    tokens = sorted({r["tokens"] for r in finished})
    batches = sorted({(r.get("global_batch_size"), r.get("seq_len")) for r in finished}, key=str)
    seeds = sorted({r["seed"] for r in finished})
    lines += [f"{len(finished)} of {len(defn.get('archs', [])) * len(defn.get('seeds', []))} runs finished. Each "
              f"ran {_names([str(s) for s in sorted({r['steps'] for r in finished})])} optimizer steps of "
              + _names([f"{b} x {n}" for b, n in batches]) + " tokens ("
              + _names([f"{t:,}" for t in tokens]) + " tokens per run) at peak learning rate "
              f"{_names([f'{lr:g}' for lr in sorted({r['lr'] for r in finished})])}, with seed(s) "
              f"{_names([str(s) for s in seeds])}; runs of one seed see the same token windows in the same order "
              "(the data order depends only on the seed and the global batch).", "",
              "| design | seeds | step-0 loss | final loss (mean; min-max) | change | below step 0 |",
              "|---|---|---|---|---|---|"]
    points = _points(rows)
    for a in archs:
        if a not in points:
            continue
        p = points[a]
        spread = f" ({p['min']:.4f}-{p['max']:.4f})" if p["seeds"] > 1 else ""
        change = p["mean"] - p["step0"] if p["step0"] is not None else None
        lines.append(f"| {a} | {p['seeds']} | {_f(p['step0'])} | {p['mean']:.4f}{spread} | "
                     f"{_f(change) if change is not None else '–'} | "
                     f"{_f(p['max'] < p['step0']) if p['step0'] is not None else '–'} |")
    lines.append("")
    below = [a for a in archs if a in points and points[a]["step0"] is not None
             and points[a]["max"] < points[a]["step0"]]
    above = [a for a in archs if a in points and a not in below]
    if below:
        lines.append(f"Below its own step-0 loss after training (every seed): {_names(below)}.")
    if above:
        lines.append(f"Not below its step-0 loss in every seed: {_names(above)}.")
    order = sorted(points, key=lambda a: points[a]["mean"])
    if len(order) > 1:
        lines.append("Ranked by final held-out loss: " + ", ".join(f"{a} ({points[a]['mean']:.4f})" for a in order)
                     + ".")
        verdicts = [spread_verdict(points[b], points[a]) for a, b in zip(order, order[1:])]
        if all(v == "one seed" for v in verdicts):
            lines.append("With one seed per design there is no seed spread: this order is not shown to survive "
                         "another seed.")
        else:
            lines.append("Between neighbours in that order: " + "; ".join(
                f"{a} vs {b}: {'beyond' if v == 'lower' else 'within'} the seed spread"
                for (a, b), v in zip(zip(order, order[1:]), verdicts)) + f". {SPREAD_RULE}")
        if "pre_ln" in points:
            ref = points["pre_ln"]["mean"]
            others = [a for a in order if a != "pre_ln"]
            lines.append("Against pre_ln, the source's own wiring trained the same way: " + "; ".join(
                f"{a} {points[a]['mean'] - ref:+.4f}" for a in others) + " nats/token.")
    lines.append("")
    # ---- what it cannot say
    per_design = {}
    for r in finished:
        per_design.setdefault(r["arch"], (r["tokens"], r["params_total"]))
    ratios = _names([f"{a}: {p:,} parameters, {t / p:.3g} tokens per parameter" for a, (t, p) in per_design.items()
                     if t and p])
    lines += ["## What this comparison can and cannot say", "",
              f"- Each design trained {_names([f'{t:,}' for t in tokens])} tokens ({ratios}), starting from a model "
              "pretrained with Pre-LN "
              "wiring: it measures how each design continues from that solution, not how it trains from scratch as "
              "in the study (arXiv 2609.32534), where every design learns its own use of depth.",
              f"- {len(seeds)} seed{'s' if len(seeds) > 1 else ''} per design"
              + (": differences between designs carry no seed spread." if len(seeds) == 1 else "; see the verdicts "
                 "above."),
              f"- One scale: {len(layout)} blocks of width {config.get('hidden_size')}; the study's depth question "
              "is about how results change with L at a fixed budget, which one depth cannot answer.",
              ""]
    lines += _analysis_table(out_dir, rows, archs)
    return "\n".join(lines) + "\n"


def _analysis_table(out_dir: str, rows: list[dict[str, Any]], archs: list[str]) -> list[str]:
    from depthbench.analysis.sweep import SUMMARY_KEYS

    entries = []
    first_run = {a: os.path.basename(min((r for r in rows if r["arch"] == a), key=lambda r: r["seed"] or 0)["run_dir"])
                 for a in archs if any(r["arch"] == a for r in rows)}
    targets = [("source", "step 0", os.path.join(out_dir, runs.ANALYSIS, "source"))]
    for a in archs:
        targets.append((a, "step 0", os.path.join(out_dir, runs.ANALYSIS, "before", a)))
        if a in first_run:
            targets.append((a, "trained", os.path.join(out_dir, runs.ANALYSIS, first_run[a])))
    for name, when, folder in targets:
        if not os.path.isdir(folder):
            continue
        for file in sorted(os.listdir(folder)):
            if not file.endswith(".json"):
                continue
            payload = atomic.read_json(os.path.join(folder, file)) or {}
            for key in SUMMARY_KEYS.get(payload.get("metric"), []):
                value = (payload.get("values") or {}).get(key)
                if isinstance(value, list):
                    value, key = (sum(value) / len(value) if value else None), f"{key} (mean)"
                if isinstance(value, (int, float)) and math.isfinite(value):
                    entries.append((name, when, payload["metric"], key, value))
    if not entries:
        return []
    lines = ["## Layer analyses before and after", "",
             "The same windows for every model (`depthbench analyze`; per-model files under `analysis/`; the "
             "trained column is each design's lowest seed).", "",
             "| model | when | metric | summary | value |", "|---|---|---|---|---|"]
    lines += [f"| {n} | {w} | {m} | {k} | {v:.4g} |" for n, w, m, k, v in entries]
    return lines + [""]


# ================================================================================================ files
def write_study_section(out_dir: str) -> dict[str, str]:
    """``results.csv``, ``upcycle_study.png`` and the study's results section of ``report.md`` / ``report.html``."""
    rows = study_rows(out_dir)
    paths = {"csv": os.path.join(out_dir, runs.RESULTS_CSV)}
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(sorted(rows, key=lambda r: (r["arch"], r["seed"] or 0)))
    atomic.write_text(paths["csv"], table.getvalue())
    plot = os.path.join(out_dir, PLOT)
    plotted = bool(rows) and plot_study(out_dir, rows, plot)
    if plotted:
        paths["plot"] = plot
    paths["report"] = runs.write_report_section(out_dir, "results", render_study(out_dir, rows,
                                                                                 PLOT if plotted else None))
    return paths
