"""The results of a sweep folder, read from its files only: one row per run (summary, run config and the newest
checkpoint's trainer state), the best learning rate per (architecture, shape), the best-LR points with their seed
spread, and each architecture's change from the shallowest to the deepest shape, judged against that spread
(:data:`SPREAD_RULE`). Nothing here trains or plots.
"""

from __future__ import annotations

import math
import os
from typing import Any

from depthbench import atomic, runs
from depthbench.training.checkpoint import latest_trainer_state

COLUMNS = [
    "arch", "shape", "num_layers", "hidden_size", "aspect_ratio", "params_total", "params_backbone", "params_extra",
    "lr", "seed", "tokens", "tokens_per_param", "steps", "final_train_loss", "eval_loss", "best_lr", "at_best_lr",
    "wall_time_s", "tokens_per_s", "status",
]


def _split_column(split: str) -> str:
    """Result column of an eval split: ``eval_text`` -> ``eval_text``, ``val`` -> ``eval_val``, ``eval`` ->
    ``eval_heldout`` (``eval_loss`` is reserved for the mean over splits)."""
    if split == "eval":
        return "eval_heldout"
    return split if split.startswith("eval_") and split != "eval_loss" else f"eval_{split}"


def _row(run_dir: str, summary: dict[str, Any]) -> dict[str, Any]:
    record = atomic.read_json(os.path.join(run_dir, runs.RUN_CONFIG)) or {}
    cfg = record.get("config") or {}
    resolved = record.get("resolved") or {}
    model_cfg = resolved.get("model_config") or {}
    arch = summary.get("arch") or (cfg.get("model") or {}).get("arch")
    run_id = runs.RunId.parse(run_dir)
    shape_name = (cfg.get("model") or {}).get("shape") or (run_id.shape if run_id else None)
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
        "tokens_per_param": (round(summary["tokens"] / params["total"], 2)
                             if summary.get("tokens") and params.get("total") else None),
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
    rows = [_row(run.run_dir, run.summary) for run in runs.sweep_runs(out_dir) if run.summary is not None]
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
    """Per architecture, one entry per shape at its best learning rate: mean, min, max and sample standard deviation
    (``None`` for one seed) of ``metric`` over its ``seeds``; sorted from the shallowest (widest, largest d/L) to the
    deepest shape."""
    out: dict[str, list[dict[str, Any]]] = {}
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("at_best_lr") and isinstance(r.get(metric), (int, float)) and math.isfinite(r[metric]):
            groups.setdefault((r["arch"], r["shape"]), []).append(r)
    for (arch, shape), rs in groups.items():
        vals = [r[metric] for r in rs]
        mean = sum(vals) / len(vals)
        out.setdefault(arch, []).append({
            "shape": shape, "num_layers": rs[0]["num_layers"], "hidden_size": rs[0]["hidden_size"],
            "aspect_ratio": rs[0]["aspect_ratio"], "lr": rs[0]["lr"], "seeds": len(vals),
            "params_total": rs[0]["params_total"], "mean": mean, "min": min(vals), "max": max(vals),
            "std": math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None,
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


SPREAD_RULE = (
    "A point's seed spread is the range (min to max) of its seeds' losses. A change counts as *beyond the seed "
    "spread* only when the two points' ranges do not overlap (every seed of one point has a lower loss than every "
    "seed of the other); otherwise it is *within the seed spread*: these seeds cannot tell the two points apart. With "
    "n seeds per point, two points whose runs all come from one and the same distribution still have "
    "non-overlapping ranges with probability 2 / C(2n, n) (10 % for n = 3, 33 % for n = 2), so with few seeds "
    "'beyond' is a weak signal, not a significance test; a single seed has no spread and gives no verdict."
)
"""How the report judges a difference between two points against the spread of their seeds."""


def spread_verdict(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Point ``b`` against point ``a`` under :data:`SPREAD_RULE` (points of :func:`best_points`): ``"lower"`` or
    ``"higher"`` (beyond the seed spread), ``"within"``, or ``"one seed"`` (either point has a single seed)."""
    if a["seeds"] < 2 or b["seeds"] < 2:
        return "one seed"
    if b["max"] < a["min"]:
        return "lower"
    if b["min"] > a["max"]:
        return "higher"
    return "within"


def loss_changes(rows: list[dict[str, Any]], metrics: list[str]) -> list[dict[str, Any]]:
    """Per architecture and metric: the best-LR points at the shallowest and the deepest shape, the change of the
    mean (deep - shallow), its relative size and the verdict of :func:`spread_verdict` (``"lower"`` = the deepest
    shape is better beyond the seed spread)."""
    out = []
    for metric in metrics:
        for arch, points in sorted(best_points(rows, metric).items()):
            if len(points) < 2:
                continue
            a, b = points[0], points[-1]
            out.append({"arch": arch, "metric": metric, "shallow": a, "deep": b, "change": b["mean"] - a["mean"],
                        "relative": (b["mean"] - a["mean"]) / a["mean"] if a["mean"] else None,
                        "verdict": spread_verdict(a, b)})
    return out


def shape_rankings(rows: list[dict[str, Any]], metrics: list[str]) -> list[dict[str, Any]]:
    """Per metric and shape (with more than one architecture): the architectures' best-LR points from the lowest
    mean loss up, and between each neighbouring pair the verdict of :func:`spread_verdict` (``"lower"``: the first
    is below the second beyond the seed spread)."""
    out = []
    for metric in metrics:
        by_shape: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for arch, points in best_points(rows, metric).items():
            for p in points:
                by_shape.setdefault(p["shape"], []).append((arch, p))
        for shape, entries in sorted(by_shape.items(), key=lambda kv: (kv[1][0][1]["num_layers"] or 0, kv[0])):
            if len(entries) < 2:
                continue
            entries.sort(key=lambda e: e[1]["mean"])
            out.append({"metric": metric, "shape": shape, "num_layers": entries[0][1]["num_layers"],
                        "order": entries, "verdicts": [spread_verdict(b, a) for (_, a), (_, b) in
                                                       zip(entries, entries[1:])]})
    return out


def row_order(r: dict[str, Any]) -> tuple:
    return (str(r["arch"]), r["num_layers"] or 0, r["lr"] or 0, r["seed"] or 0)
