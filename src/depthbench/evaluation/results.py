"""lm-eval results as ``depthbench eval`` keeps them: token-weighted NLL groups, the merge of one task's results
into ``results.json``, the primary-metric rows and the ``results.md`` table.

Completion-NLL groups (``depthbench_nll``, ``depthbench_nll_coding``/``_stem``/``_math``): lm-eval can weight a
group only by document count, so their rows are filled here, token-weighted as the study's per-task metric is
(arXiv 2609.32534, Sec. 6.3): ``NLL = sum of the members' target NLL / sum of their target tokens``, its
perplexity, and bits per byte weighted by target bytes (:func:`add_token_weighted_groups`).

Plain dicts in, plain dicts and text out: nothing here imports lm-eval or torch.
"""

from __future__ import annotations

import math
from typing import Any

PRIMARY_METRICS = ("nll", "ppl", "bits_per_byte", "acc", "acc_norm", "exact_match")
"""Metrics shown in ``results.md`` and written to the model card, in this order, when a task reports them."""

DOMAIN_GROUPS = {"depthbench_nll_coding": "Coding", "depthbench_nll_stem": "STEM", "depthbench_nll_math": "Math"}
"""The study's three domains (Sec. 6.3 / 7.3) as the groups of ``eval_tasks/depthbench_nll``."""

_WEIGHTED = ("nll", "bits_per_byte", "target_tokens", "target_bytes")
"""The metrics a group's leaves must all report for the group to be token-weighted."""


# ============================================================================================ aggregation
def _leaves(group: str, group_subtasks: dict[str, list[str]]) -> list[str]:
    out: list[str] = []
    for child in group_subtasks.get(group, []):
        out.extend(_leaves(child, group_subtasks) if child in group_subtasks else [child])
    return out


def add_token_weighted_groups(results: dict[str, Any]) -> list[str]:
    """Fill, in lm-eval's ``results`` dict, every group whose leaf tasks all report the completion-NLL metrics with
    ``nll`` (sum of NLL / sum of target tokens over all leaves), ``ppl`` = exp(nll), ``bits_per_byte`` (weighted by
    target bytes) and the summed counts; returns the names of the groups filled."""
    filled = []
    table = results.get("results", {})
    subtasks = results.get("group_subtasks", {})
    for group in subtasks:
        leaves = _leaves(group, subtasks)
        rows = [table.get(t, {}) for t in leaves]
        if not leaves or not all(f"{m},none" in r for r in rows for m in _WEIGHTED):
            continue
        tokens = sum(r["target_tokens,none"] for r in rows)
        n_bytes = sum(r["target_bytes,none"] for r in rows)
        nll = math.fsum(r["nll,none"] * r["target_tokens,none"] for r in rows) / tokens
        bpb = math.fsum(r["bits_per_byte,none"] * r["target_bytes,none"] for r in rows) / n_bytes
        row = table.setdefault(group, {"alias": group, "name": group})
        row.update({"nll,none": nll, "ppl,none": math.exp(nll), "bits_per_byte,none": bpb,
                    "target_tokens,none": tokens, "target_bytes,none": n_bytes,
                    "sample_len": sum(r.get("sample_len", 0) for r in rows)})
        results.setdefault("groups", {})[group] = dict(row)
        filled.append(group)
    return filled


# ============================================================================================ results files
def merge_results(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """lm-eval result dicts merged: per-task tables (``results``, ``configs``, ``versions``, ...) are unioned with
    ``new`` winning; scalar run information (``config``, ``date``, ...) comes from ``new``."""
    if not old:
        return dict(new)
    merged = dict(old)
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(old.get(key), dict) and key != "config":
            merged[key] = {**old[key], **value}
        else:
            merged[key] = value
    return merged


def fmt_value(value: Any) -> str:
    """A metric value as the tables show it (floats with 4 decimals)."""
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def metric_rows(results: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """``(task or group, metric, value)`` for every primary metric in ``results`` (groups after their tasks)."""
    rows = []
    table = results.get("results", {})
    for name in sorted(table, key=lambda n: (n in results.get("group_subtasks", {}), n)):
        for metric in PRIMARY_METRICS:
            for key, value in table[name].items():
                if key.split(",")[0] == metric and "_stderr" not in key and isinstance(value, (int, float)):
                    filt = key.split(",", 1)[1] if "," in key else "none"
                    rows.append((name, metric if filt == "none" else f"{metric} ({filt})", value))
    return rows


def _domain_table(table: dict[str, Any]) -> list[str]:
    """The completion-NLL table by domain (empty when no NLL group was run)."""
    domains = [(g, label) for g, label in DOMAIN_GROUPS.items() if "nll,none" in table.get(g, {})]
    if not domains:
        return []
    if "nll,none" in table.get("depthbench_nll", {}):
        domains.append(("depthbench_nll", "all six"))
    lines = ["## Completion NLL by domain (token-weighted; nats per target token, lower is better)", "",
             "| domain | NLL | perplexity | bits per byte | target tokens |", "|---|---:|---:|---:|---:|"]
    for group, label in domains:
        r = table[group]
        lines.append(f"| {label} | {r['nll,none']:.4f} | {r['ppl,none']:.3f} | {r['bits_per_byte,none']:.4f} "
                     f"| {r['target_tokens,none']:,} |")
    return [*lines, ""]


def render_results_md(results: dict[str, Any], model: str) -> str:
    """``results.md``: the domain table (when the NLL groups were run) and every task's primary metrics."""
    table = results.get("results", {})
    lines = [f"# Evaluation of `{model}`", "",
             f"lm-eval {results.get('lm_eval_version', '')} via `depthbench eval`; "
             f"limit: {results.get('config', {}).get('limit')}.", ""]
    lines += _domain_table(table)
    lines += ["## All tasks", "", "| task | metric | value | samples |", "|---|---|---:|---:|"]
    samples = results.get("n-samples", {})
    for name, metric, value in metric_rows(results):
        n = samples.get(name, {}).get("effective", table.get(name, {}).get("sample_len", ""))
        lines.append(f"| {name} | {metric} | {fmt_value(value)} | {n} |")
    return "\n".join(lines) + "\n"
