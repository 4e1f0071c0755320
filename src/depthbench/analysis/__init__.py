"""Layer analyses of the DepthBench study (arXiv 2609.32534, layer-level analyses and the figures of its appendix)
on any causal LM: every depthbench architecture through its own wiring, and plain Hugging Face decoders
(``LlamaForCausalLM`` and the like) through their decoder layers.

One module per metric on shared code (:mod:`.sampling` for the windows, :mod:`.state` for states, readouts and
batched interventions, :mod:`.common` for the context and the result files)::

    from depthbench.analysis import analyze
    analyze(model, windows, metrics=["angular", "causal"], out_dir="analysis/")

The command is ``depthbench analyze`` (``depthbench.analysis.command``).
"""

from __future__ import annotations

import importlib

#: Metric / figure id -> module (relative to this package). Each module defines ``run(ctx, **options)`` and ``plot``.
METRICS: dict[str, str] = {
    "angular": "angular",
    "causal": "causal",
    "permutation": "permutation",
    "usefulness": "usefulness",
    "jacobian": "jacobian",
    "logit_lens": "logit_lens",
    "pruning": "pruning",
    "token_collapse": "token_collapse",
    "depth_mixing": "depth_mixing",
    "hc_transport": "hc_transport",
    "efficiency": "efficiency",
}

#: Metrics run when none are named.
DEFAULT_METRICS = ["angular", "causal", "permutation", "usefulness", "jacobian", "logit_lens", "pruning",
                   "token_collapse"]


def metric_module(metric: str):
    """The module implementing ``metric`` (ValueError naming the valid ids otherwise)."""
    if metric not in METRICS:
        from depthbench.registry import did_you_mean

        raise ValueError(f"unknown metric {metric!r}{did_you_mean(metric, METRICS)}; choose from {', '.join(METRICS)}")
    return importlib.import_module(f"{__name__}.{METRICS[metric]}")


def parse_metrics(text: str | None) -> list[str]:
    """``"angular,causal"`` -> ids (``all`` = every metric and figure; empty = the eight metrics)."""
    if not text:
        return list(DEFAULT_METRICS)
    ids = [m.strip() for m in text.split(",") if m.strip()]
    if ids == ["all"]:
        return list(METRICS)
    for m in ids:
        metric_module(m)
    return ids


def check_metric(ctx, metric: str, **options) -> None:
    """Check ``metric``'s options against the model before anything is computed (the module's ``check``, if any):
    ``ValueError`` for bad options, :class:`~depthbench.analysis.common.NotApplicable` when the metric does not
    exist for the model."""
    check = getattr(metric_module(metric), "check", None)
    if check is not None:
        check(ctx, **options)


def run_metric(ctx, metric: str, out_dir: str | None = None, **options):
    """Run one metric on an :class:`~depthbench.analysis.common.AnalysisContext`; write its files when ``out_dir``."""
    from .common import Timer, write_result

    module = metric_module(metric)
    with Timer() as timer:
        result = module.run(ctx, **options)
    result.seconds = timer.seconds
    result.settings = {**ctx.settings(), "options": options}
    if out_dir is not None:
        write_result(result, out_dir, module.plot)
    return result


def analyze(model, windows, metrics: list[str] | None = None, out_dir: str | None = None, *, model_id: str = "",
            window_spec=None, options: dict | None = None, **context_kwargs) -> dict:
    """Run ``metrics`` on ``model`` over ``windows`` ([N, T] token ids); returns ``{metric: MetricResult}``.

    ``options`` maps a metric id to its keyword options (e.g. ``{"permutation": {"anchors": [3]}}``).
    """
    import numpy as np

    from .common import AnalysisContext
    from .sampling import WindowSpec

    windows = np.asarray(windows)
    spec = window_spec or WindowSpec(num_samples=len(windows), seq_len=windows.shape[1])
    ctx = AnalysisContext(model, windows, spec, model_id=model_id, **context_kwargs)
    options = options or {}
    metrics = metrics or DEFAULT_METRICS
    for m in metrics:
        check_metric(ctx, m, **options.get(m, {}))
    return {m: run_metric(ctx, m, out_dir, **options.get(m, {})) for m in metrics}
