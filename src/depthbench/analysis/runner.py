"""Running the analyses on models and sweeps: loading a checkpoint / run folder / Hub id, drawing the windows,
running each metric and writing its files; a sweep's runs one after another (resumable) with the comparisons.
The ``depthbench analyze`` command and the demo call these."""

from __future__ import annotations

import os
from typing import Any


def load_model(target: str, *, device: str | None = None, trust_remote_code: bool = False):
    """Model + tokenizer (or ``None``) from a checkpoint folder, a training run folder (its ``final/``) or a Hub id."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import depthbench  # noqa: F401  (registers every architecture with the Auto classes)
    from depthbench.runs import model_dir

    path = model_dir(target)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, trust_remote_code=trust_remote_code)
    except OSError as err:
        if os.path.isdir(path):
            raise
        raise OSError(f"{target}: no local folder of that name, and loading it as a Hub id failed: {err}") from err
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device).eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError):
        tokenizer = None
    return model, tokenizer


def analyze_target(target: str, metrics: list[str], out_dir: str, data: str | None, spec, *,
                   options: dict[str, dict[str, Any]] | None = None, skip_done: bool = False, device: str | None = None,
                   trust_remote_code: bool = False, micro_batch_size: int = 4, batched: bool = True,
                   group_batch: int = 8, progress: bool = True, require_any: bool = True,
                   named: set[str] | None = None, catalogue=None, published: dict | None = None,
                   log=print) -> dict[str, float]:
    """Run ``metrics`` on one model (checkpoint folder, run folder or Hub id) over windows of ``data`` (token-shard
    folder or text file, drawn by the :class:`~depthbench.analysis.sampling.WindowSpec` ``spec``), writing
    ``out_dir/<metric>.{json,csv,png}``; with ``skip_done`` metrics whose JSON exists are skipped.

    Every metric's options are checked against the model before any metric runs (bad options, windows longer
    than the model's positions: ``ValueError``, nothing written). A metric that does not apply to the model
    (``NotApplicable``: ``depth_mixing`` on a Pre-LN model) is reported and skipped; when none of them applies
    and ``require_any``, that is an error too. Too few windows for a metric (``NeedsMoreData``) is an error for the
    metrics in ``named`` (the ones the user asked for by name; ``None`` = all of ``metrics``) and a skip with the
    message for the others (those that came with the default list).

    A released model of the study (:mod:`.published`) gets the study's published layer figures beside ours in the
    metric's JSON and ``out_dir/published.json`` (``catalogue`` / ``published``: a
    :class:`~depthbench.hub.catalogue.Catalogue` and a figures dict in place of the packaged ones). Returns
    ``{metric: seconds}``."""
    from . import check_metric, run_metric
    from .common import AnalysisContext, NeedsMoreData, NotApplicable
    from .published import annotate, release_of

    todo = [m for m in metrics if not (skip_done and os.path.isfile(os.path.join(out_dir, f"{m}.json")))]
    if not todo:
        log(f"{target}: all metrics done, skipped")
        return {}
    if data is None:
        from depthbench.runs import run_data_dir

        data = run_data_dir(target)  # a training run (or its final/) analyses the data it trained on
        if data is None:
            raise ValueError(f"--data is required for {target} (it is no training run whose data folder still "
                             "exists): a token-shard folder (prepare-data output) or a text file")
    model, tokenizer = load_model(target, device=device, trust_remote_code=trust_remote_code)
    windows, tokenizer = _windows(data, spec, tokenizer)
    release = release_of(target, model, catalogue=catalogue)
    if release is not None:
        log(f"{target}: release {release['repo']} of the study"
            + (f" at its shape {release['shape']}" if release["grid"] else f" ({release['why']})"))
    ctx = AnalysisContext(model, windows, spec, model_id=target, micro_batch_size=micro_batch_size,
                          batched=batched, group_batch=group_batch, progress=progress, tokenizer=tokenizer)
    options = options or {}
    skipped: dict[str, str] = {}
    for metric in todo:
        try:
            check_metric(ctx, metric, **options.get(metric, {}))
        except NotApplicable as err:
            skipped[metric] = str(err)
        except NeedsMoreData as err:
            if named is None or metric in named:
                raise
            skipped[metric] = str(err)
    timings = {}
    for metric in todo:
        if metric in skipped:
            log(f"{metric}: skipped ({skipped[metric]})")
            continue
        try:
            result = run_metric(ctx, metric, out_dir, **options.get(metric, {}))
        except NotApplicable as err:
            skipped[metric] = str(err)
            log(f"{metric}: skipped ({err})")
            continue
        timings[metric] = result.seconds
        log(f"{metric}: {result.seconds:.1f} s -> {os.path.join(out_dir, metric + '.json')}")
        if release is not None:
            annotate(out_dir, metric, release, published, log=log)
    if require_any and not timings:
        raise NotApplicable(f"no metric was computed for {target}: "
                            + "; ".join(f"{m}: {why}" for m, why in skipped.items()))
    return timings


def _windows(data: str, spec, tokenizer):
    """The analysis windows of ``data`` and the tokenizer (the model's, else the data folder's)."""
    from .sampling import load_windows

    if tokenizer is None and os.path.isdir(data):
        from transformers import AutoTokenizer

        from depthbench.data import load_meta

        tok_dir = os.path.join(data, load_meta(data).get("tokenizer_dir", "tokenizer"))
        tokenizer = AutoTokenizer.from_pretrained(tok_dir) if os.path.isdir(tok_dir) else None
    return load_windows(data, spec, tokenizer), tokenizer


def analyze_sweep(sweep_dir: str, metrics: list[str], data: str | None, spec, *, out_root: str | None = None,
                  deepest_only: bool = False, force: bool = False, log=print, **kwargs) -> dict[str, str]:
    """Run ``metrics`` on every finished run of a sweep (or only each architecture's deepest run), skipping metrics
    already written (unless ``force``), then write the comparison figures and the report section."""
    import copy

    from depthbench.runs import ANALYSIS, RUNS, sweep_data_dir

    from .sweep import finished_runs, write_comparison

    data = data or sweep_data_dir(sweep_dir)
    runs = finished_runs(sweep_dir)
    if deepest_only:
        deepest = {}
        for run in runs:
            if run["arch"] not in deepest or (run["num_layers"] or 0) > (deepest[run["arch"]]["num_layers"] or 0):
                deepest[run["arch"]] = run
        runs = [r for r in runs if deepest.get(r["arch"]) is r]
    if not runs:
        raise ValueError(f"no finished runs with a final/ export under {os.path.join(sweep_dir, RUNS)}")
    root = out_root or os.path.join(sweep_dir, ANALYSIS)
    for k, run in enumerate(runs):
        log(f"[{k + 1}/{len(runs)}] {run['run_id']}")
        analyze_target(run["model_dir"], metrics, os.path.join(root, run["run_id"]), data, copy.copy(spec),
                       skip_done=not force, require_any=False, log=log, **kwargs)
    return write_comparison(sweep_dir, log=log)
