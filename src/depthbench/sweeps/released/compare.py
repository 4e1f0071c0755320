"""The study's published figures beside the re-measured ones: the ``published`` section of a released folder's
``report.md`` and the closing terminal table of ``depthbench released eval``.

Published: the validation losses and completion NLL of ``depthbench/hub/published_figures.json`` (arXiv 2609.32534,
Figures 2 and 4, as the study's site gives them), looked up by architecture, shape grid and depth. Re-measured: each
finished release's held-out loss (``summary.json``) and, when ``--tasks`` ran the completion-NLL groups, its
token-weighted NLL per domain (``eval/results.json``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from depthbench import atomic, runs
from depthbench.hub.catalogue import load_published, published_loss, published_nll

SECTION = "published"
DOMAIN_LABELS = {"coding": "Coding", "stem": "STEM", "math": "Math"}


def _nll(run_dir: str, tasks: dict[str, str]) -> dict[str, float]:
    """The run's completion NLL per domain from ``eval/results.json`` (only the domains it was evaluated on)."""
    results = (atomic.read_json(os.path.join(run_dir, runs.EVAL, runs.EVAL_RESULTS)) or {}).get("results", {})
    return {dom: results[task]["nll,none"] for dom, task in tasks.items() if "nll,none" in results.get(task, {})}


def comparison_rows(out_dir: str, published: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per finished release of ``out_dir``: re-measured and published loss (and domain NLL), ordered by
    architecture and depth."""
    published = load_published() if published is None else published
    tasks = (published.get("completion_nll") or {}).get("tasks", {})
    labels = published.get("labels", {})
    rows = []
    for run in runs.sweep_runs(out_dir, finished=True):
        record = atomic.read_json(os.path.join(run.run_dir, runs.RUN_CONFIG)) or {}
        release, config = record.get("release") or {}, (record.get("resolved") or {}).get("model_config") or {}
        grid, depth = release.get("grid"), release.get("depth")
        loss = next(iter((run.summary.get("eval") or {}).values()), None)
        variant = ((release.get("catalogue") or {}).get("variant"))
        theirs = None if variant else published_loss(published, run.arch, grid, depth)
        ours_nll, theirs_nll = _nll(run.run_dir, tasks), published_nll(published, run.arch, grid, depth)
        layers, width = config.get("num_hidden_layers"), config.get("hidden_size")
        rows.append({
            "arch": run.arch, "label": labels.get(run.arch, run.arch), "shape": run.shape, "repo": release.get("repo"),
            "lr": run.id.lr if run.id else None,
            "L": layers, "d": width, "aspect_ratio": width / layers if layers and width else None,
            "step": release.get("step"), "loss": loss, "published_loss": theirs,
            "delta": loss - theirs if loss is not None and theirs is not None else None,
            "tokens": (run.summary.get("heldout") or {}).get("tokens"),
            "nll": {dom: (ours_nll.get(dom), theirs_nll.get(dom)) for dom in tasks
                    if dom in ours_nll or dom in theirs_nll},
        })
    return mark_best_lr(sorted(rows, key=lambda r: (r["arch"], r["L"] or 0, r["lr"] or 0)))


def mark_best_lr(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (architecture, shape): ``lrs`` (how many LRs were measured) and ``best`` (the row of the lowest
    re-measured loss), as the study reports each configuration at its best LR; Δ is kept for the best row only
    (the study's figure is the best-LR run's, so another LR's difference says nothing about the conversion)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["arch"], r["shape"]), []).append(r)
    for group in groups.values():
        measured = [r for r in group if r["loss"] is not None and math.isfinite(r["loss"])]
        best = min(measured, key=lambda r: r["loss"]) if measured else None
        for r in group:
            r["lrs"], r["best"] = len(group), r is best
            if not r["best"]:
                r["delta"] = None
    return rows


def _lr_cell(r: dict[str, Any]) -> str:
    from depthbench.repo_names import format_lr

    lr = format_lr(r["lr"]) if r.get("lr") else "?"
    return lr if r["lrs"] == 1 else f"{lr} ({'best' if r['best'] else 'not best'} of {r['lrs']})"


def _f(value: float | None, fmt: str = ".4f") -> str:
    return "—" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, fmt)


def _pair(pair: tuple[float | None, float | None]) -> str:
    ours, theirs = pair
    return f"{_f(ours)} / {_f(theirs, '.3f')}" + (f" ({ours - theirs:+.3f})" if ours is not None and
                                                  theirs is not None else "")


def render_section(rows: list[dict[str, Any]], published: dict[str, Any]) -> str:
    """The markdown section: the loss table, then (when measured or published) the domain NLL table."""
    val, nll = published.get("validation_loss") or {}, published.get("completion_nll") or {}
    lines = ["## The study's published figures beside the re-measured ones", "",
             "Re-measured: the held-out loss of each release as converted by depthbench (this folder). "
             f"Published: {val.get('metric', 'validation loss')}; source: {val.get('source', '?')}; the study "
             "reports each configuration at its best peak LR. Δ = re-measured − published: where several LRs of a "
             "shape were measured here (`released eval --best-lr`), for the best of them only; where one was, Δ "
             "compares that one repository with the study's best-LR figure (the plotted run may be another LR). "
             "The published numbers were read from the paper's plots (three "
             "decimals), and a different held-out text, token count or dtype moves the loss too, so read small "
             "differences with care.", ""]
    lines += [f"- {note}" for note in val.get("notes", [])] + ([""] if val.get("notes") else [])
    lines += ["| arch | shape | LR | L | d/L | step | held-out loss (re-measured) | published (best LR) | Δ | "
              "tokens scored |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['label']} | {r['shape']} | {_lr_cell(r)} | {r['L']} | {_f(r['aspect_ratio'], '.1f')} | "
                     f"{r['step']} | "
                     f"{_f(r['loss'])} | {_f(r['published_loss'], '.3f')} | {_f(r['delta'], '+.4f')} | "
                     f"{r['tokens'] or 0:,} |")
    domains = [d for d in DOMAIN_LABELS if any(d in r["nll"] for r in rows)]
    if domains:
        lines += ["", "### Completion NLL by domain (re-measured / published, Δ)", "",
                  f"Published: {nll.get('metric', '')}; source: {nll.get('source', '?')}. Re-measured: "
                  "`depthbench released eval --tasks depthbench_nll` (or `depthbench eval` on this folder).", "",
                  "| arch | shape | L | " + " | ".join(DOMAIN_LABELS[d] for d in domains) + " |",
                  "|---|---|---:|" + "---:|" * len(domains)]
        for r in rows:
            cells = [_pair(r["nll"].get(d, (None, None))) for d in domains]
            lines.append(f"| {r['label']} | {r['shape']} | {r['L']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_published_section(out_dir: str, published: dict[str, Any] | None = None) -> str:
    """Store the ``published`` section of ``out_dir``'s report (``depthbench.runs.write_report_section``);
    returns the path of ``report.md``."""
    published = load_published() if published is None else published
    rows = comparison_rows(out_dir, published)
    return runs.write_report_section(out_dir, SECTION, render_section(rows, published) if rows else None)


def print_comparison(out_dir: str, published: dict[str, Any] | None = None, log: Callable[..., None] = print
                     ) -> None:
    """The closing terminal table: per release, re-measured vs published loss (and NLL per domain)."""
    published = load_published() if published is None else published
    rows = comparison_rows(out_dir, published)
    domains = [d for d in DOMAIN_LABELS if any(d in r["nll"] for r in rows)]
    header = (f"{'arch':<14}{'shape':<18}{'LR':<20}{'L':>4}{'d/L':>7}{'step':>7}{'loss':>9}{'study':>8}{'delta':>9}"
              + "".join(f"{DOMAIN_LABELS[d] + ' (ours/study)':>24}" for d in domains))
    log("")
    log("held-out loss, re-measured vs the study's published best-LR figure (arXiv 2609.32534, Fig. 2/4; see "
        "report.md); delta: for the best LR measured here of each shape, or the one repository measured:")
    log(header)
    log("-" * len(header))
    for r in rows:
        cells = "".join(f"{_pair(r['nll'].get(d, (None, None))):>24}" for d in domains)
        log(f"{r['label']:<14}{r['shape']:<18}{_lr_cell(r):<20}{r['L'] or '':>4}{_f(r['aspect_ratio'], '.1f'):>7}"
            f"{r['step'] or '':>7}"
            f"{_f(r['loss']):>9}{_f(r['published_loss'], '.3f'):>8}{_f(r['delta'], '+.4f'):>9}" + cells)
