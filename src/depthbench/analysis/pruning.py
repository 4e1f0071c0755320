"""Single-layer pruning (arXiv 2609.32534, layer analyses): remove one block at a time (``skip_block``) and measure
what it costs.

Signal (a), the default: the LM loss on the sampled windows, ``delta = L_pruned - L_base`` (positive = the block
helps). Signal (b): a zero-shot lm-eval task scored through lm-eval's own Hugging Face model (``HFLM`` wrapping the
loaded model, so the model's ``skip_block`` applies), ``delta = score_pruned - score_base`` for the task's metric
(``acc_norm`` > ``acc`` > ``exact_match`` unless named). The LM-loss skips share the unmodified prefix and run
batched (``depthbench.analysis.state``).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from .common import AnalysisContext, MetricResult, line_plot
from .state import Group, chunked, run_groups, token_losses

METRIC_ID = "pruning"
METRIC_PREFERENCE = ("acc_norm", "acc", "exact_match")


def skip_losses(ctx: AnalysisContext, layers: list[int]) -> tuple[float, dict[int, float]]:
    a = ctx.adapter
    base_sum, sums, count = 0.0, dict.fromkeys(layers, 0.0), 0
    for trace in ctx.traces("pruning"):
        base_sum += float(token_losses(trace.logits, trace.input_ids).sum())
        count += trace.input_ids.shape[0] * (trace.input_ids.shape[1] - 1)
        with torch.no_grad(), ctx.autocast():
            for chunk in chunked(layers, ctx.group_batch):
                groups = [Group(s, {s}, (lambda s=s: a.skip(s)), s, "skip") for s in chunk]
                for res in run_groups(a, trace, groups, batched=ctx.batched):
                    sums[res.key] += float(token_losses(res.logits, trace.input_ids).sum())
    return base_sum / count, {k: v / count for k, v in sums.items()}


def _pick_metric(task_results: dict, metric: str | None) -> tuple[str, float]:
    names = {k.split(",")[0]: k for k in task_results if "," in k and not k.split(",")[0].endswith("_stderr")}
    if metric is not None:
        if metric not in names:
            raise ValueError(f"metric {metric!r} not reported by the task (available: {sorted(names)})")
        return metric, float(task_results[names[metric]])
    for name in METRIC_PREFERENCE:
        if name in names:
            return name, float(task_results[names[name]])
    raise ValueError(f"none of {METRIC_PREFERENCE} reported by the task (available: {sorted(names)}); pass a metric")


def task_scores(ctx: AnalysisContext, layers: list[int], task: str, include_path: str | None, limit: int | None,
                metric: str | None, batch_size: int = 8) -> tuple[str, float, dict[int, float]]:
    """Score ``task`` with lm-eval's ``HFLM`` around the loaded model, unmodified and with each block skipped."""
    import lm_eval.evaluator
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    if ctx.tokenizer is None:
        raise ValueError("pruning by an lm-eval task needs the model's tokenizer (none was found with the model)")
    # Index only the given folder when it defines the task (indexing lm-eval's whole registry takes a minute).
    manager = TaskManager(include_path=include_path, include_defaults=False) if include_path else None
    if manager is None or task not in manager.all_tasks:
        manager = TaskManager(include_path=include_path) if include_path else TaskManager()
    lm = HFLM(pretrained=ctx.model, tokenizer=ctx.tokenizer, batch_size=batch_size, backend="causal")
    from depthbench.evaluation.harness import quiet_git_hash

    add_env_info, git_hash = lm_eval.evaluator.add_env_info, lm_eval.evaluator.get_git_commit_hash
    lm_eval.evaluator.add_env_info = lambda storage: None  # skips a slow `pip list`; irrelevant here
    lm_eval.evaluator.get_git_commit_hash = quiet_git_hash  # no "fatal: not a git repository" outside a checkout

    def score(context) -> float:
        with context:
            out = simple_evaluate(model=lm, tasks=[task], task_manager=manager, limit=limit, bootstrap_iters=0,
                                  verbosity="ERROR")
        results = out["results"]
        name = task if task in results else next(iter(results))
        return _pick_metric(results[name], metric)

    try:
        name, base = score(contextlib.nullcontext())
        scores = {}
        for layer in ctx.bar(layers, f"pruning ({task})"):
            scores[layer] = score(ctx.adapter.skip(layer))[1]
    finally:
        lm_eval.evaluator.add_env_info, lm_eval.evaluator.get_git_commit_hash = add_env_info, git_hash
    return name, base, scores


def check(ctx: AnalysisContext, layers: list[int] | None = None, **_) -> list[int]:
    """The blocks to prune (default all); ValueError for blocks the model does not have."""
    L = ctx.adapter.num_layers
    layers = list(range(L)) if not layers else layers
    bad = [k for k in layers if not 0 <= k < L]
    if bad:
        raise ValueError(f"--layers {', '.join(map(str, bad))} out of range: the model has blocks 0..{L - 1}")
    return layers


def run(ctx: AnalysisContext, layers: list[int] | None = None, task: str | None = None,
        include_path: str | None = None, limit: int | None = None, task_metric: str | None = None) -> MetricResult:
    layers = check(ctx, layers)
    if task is None:
        base, values = skip_losses(ctx, layers)
        signal, name = "lm_loss", "loss"
    else:
        name, base, values = task_scores(ctx, layers, task, include_path, limit, task_metric)
        signal = f"lm_eval:{task}"
    rows = [{"layer": k, name + "_pruned": v, "delta": v - base} for k, v in values.items()]
    deltas = [r["delta"] for r in rows]
    out = {"signal": signal, "metric": name, "base": base, "layers": layers, "pruned": [values[k] for k in layers],
           "delta": deltas, "most_important": int(layers[int(np.argmax(np.abs(deltas)))]) if deltas else None}
    if task is not None:
        out.update(task=task, limit=limit)
    return MetricResult(METRIC_ID, out, rows)


def plot(result: MetricResult, path: str) -> bool:
    v = result.values
    return line_plot(v["layers"], {"delta": v["delta"]}, path,
                     f"single-block pruning ({v['signal']}); base {v['metric']} {v['base']:.3f}",
                     "pruned block", f"delta {v['metric']}", bar=True)
