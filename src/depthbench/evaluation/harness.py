"""``depthbench eval``: lm-eval on a checkpoint (or every run of a sweep), results as files and in the model card.

    depthbench eval runs/demo/runs/hc__tiny-L4__lr0.003__s0 --tasks depthbench_synthetic
    depthbench eval my-ckpt --tasks depthbench_nll,depthbench_zeroshot --batch-size 16 --device cuda
    depthbench eval my-ckpt --tasks depthbench_nll --data-dir nll_data --limit 100      # offline local copies
    depthbench eval runs/demo --tasks depthbench_synthetic      # a sweep folder: every run, resumable, + report

The model is loaded once with ``AutoModelForCausalLM`` (depthbench's architectures are registered, any other
causal LM folder or Hub id works too) and scored in-process by lm-eval's own ``HFLM`` wrapped around the model
object, with this repository's ``eval_tasks/`` on the task path. Every requested task or group is evaluated on its
own and merged into ``<out>/results.json`` (lm-eval's result format) right away, so a failing task never loses the
finished ones (nor stops the others: failures are raised together at the end), and a rerun skips what is already
there (same ``--limit``).

Completion-NLL groups (``depthbench_nll``, ``depthbench_nll_coding``/``_stem``/``_math``): lm-eval can weight a
group only by document count, so their rows are filled here, token-weighted as the study's per-task metric is
(arXiv 2609.32534, Sec. 6.3): ``NLL = sum of the members' target NLL / sum of their target tokens``, its
perplexity, and bits per byte weighted by target bytes (:func:`add_token_weighted_groups`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from depthbench import atomic

EVAL_TASKS_DIR = Path(__file__).resolve().parents[3] / "eval_tasks"
"""The lm-eval task folder shipped with this repository (``eval_tasks/`` next to ``src/``)."""

DEFAULT_TASKS = "depthbench_nll,depthbench_zeroshot,depthbench_synthetic"
NLL_METRICS = ("nll", "ppl", "bits_per_byte", "target_tokens", "target_bytes")
"""Metrics every ``depthbench_nll_*`` task reports (``,none`` filter)."""

PRIMARY_METRICS = ("nll", "ppl", "bits_per_byte", "acc", "acc_norm", "exact_match")
"""Metrics shown in ``results.md`` and written to the model card, in this order, when a task reports them."""

DOMAIN_GROUPS = {"depthbench_nll_coding": "Coding", "depthbench_nll_stem": "STEM", "depthbench_nll_math": "Math"}
"""The study's three domains (Sec. 6.3 / 7.3) as the groups of ``eval_tasks/depthbench_nll``."""


class EvalError(ValueError):
    """Bad input to ``depthbench eval`` (unknown task, missing tokenizer, ...); the message says what to change."""


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
        if not leaves or not all(f"{m},none" in r for r in rows for m in ("nll", "bits_per_byte", "target_tokens",
                                                                               "target_bytes")):
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


def _fmt(value: Any) -> str:
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


def render_results_md(results: dict[str, Any], model: str) -> str:
    """``results.md``: the domain table (when the NLL groups were run) and every task's primary metrics."""
    table = results.get("results", {})
    lines = [f"# Evaluation of `{model}`", "",
             f"lm-eval {results.get('lm_eval_version', '')} via `depthbench eval`; "
             f"limit: {results.get('config', {}).get('limit')}.", ""]
    domains = [(g, label) for g, label in DOMAIN_GROUPS.items() if "nll,none" in table.get(g, {})]
    if domains:
        lines += ["## Completion NLL by domain (token-weighted; nats per target token, lower is better)", "",
                  "| domain | NLL | perplexity | bits per byte | target tokens |", "|---|---:|---:|---:|---:|"]
        for group, label in domains + ([("depthbench_nll", "all six")] if "nll,none" in table.get(
                "depthbench_nll", {}) else []):
            r = table[group]
            lines.append(f"| {label} | {r['nll,none']:.4f} | {r['ppl,none']:.3f} | {r['bits_per_byte,none']:.4f} "
                         f"| {r['target_tokens,none']:,} |")
        lines.append("")
    lines += ["## All tasks", "", "| task | metric | value | samples |", "|---|---|---:|---:|"]
    samples = results.get("n-samples", {})
    for name, metric, value in metric_rows(results):
        n = samples.get(name, {}).get("effective", table.get(name, {}).get("sample_len", ""))
        lines.append(f"| {name} | {metric} | {_fmt(value)} | {n} |")
    return "\n".join(lines) + "\n"


# ============================================================================================ model card
def eval_results_for_card(results: dict[str, Any]) -> list:
    """huggingface_hub ``EvalResult`` entries (one per task and primary metric) for ``model-index``."""
    from huggingface_hub import EvalResult

    hub = _nll_hub_datasets()
    version = results.get("lm_eval_version", "")
    entries = []
    for name, metric, value in metric_rows(results):
        cfg = results.get("configs", {}).get(name, {})
        source = (cfg.get("dataset_kwargs") or {}).get("source")
        dataset, config, split = hub.get(source) or (cfg.get("dataset_path") or name, cfg.get("dataset_name"),
                                                    cfg.get("test_split"))
        entries.append(EvalResult(
            task_type="text-generation", task_name=name, dataset_type=dataset, dataset_name=name,
            dataset_config=config, dataset_split=split,
            metric_type=metric.split(" ")[0], metric_name=metric, metric_value=float(value),
            source_name=f"lm-eval {version} (depthbench eval)".replace("  ", " "),
            source_url="https://github.com/EleutherAI/lm-evaluation-harness"))
    return entries


def _nll_hub_datasets() -> dict[str, tuple[str, str | None, str]]:
    """``source -> (Hub dataset id, config, split)`` of the completion-NLL tasks (read from their utils.py)."""
    import importlib.util

    path = EVAL_TASKS_DIR / "depthbench_nll" / "utils.py"
    if not path.is_file():
        return {}
    spec = importlib.util.spec_from_file_location("depthbench_eval_tasks_nll_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: (src.hub_path, src.hub_name, src.hub_split) for name, src in module.SOURCES.items()}


def record_in_model_card(card_path: str | os.PathLike, results: dict[str, Any], model_name: str) -> Path:
    """Write ``results`` into the ``model-index`` of the model card at ``card_path`` (``README.md``) with
    huggingface_hub's ``ModelCard``/``EvalResult``: entries for the same task and metric are replaced, all other
    card content and entries are kept; a missing card is created with a minimal body."""
    from huggingface_hub import ModelCard, ModelCardData

    path = Path(card_path)
    new = eval_results_for_card(results)
    if path.is_file():
        card = ModelCard.load(path)
    else:
        card = ModelCard.from_template(
            ModelCardData(library_name="transformers", pipeline_tag="text-generation"),
            template_str="---\n{{ card_data }}\n---\n\n# {{ model_name }}\n\nEvaluated with `depthbench eval`.\n",
            model_name=model_name)
    keys = {(e.dataset_name, e.metric_type) for e in new}
    kept = [e for e in (card.data.eval_results or []) if (e.dataset_name, e.metric_type) not in keys]
    card.data.eval_results = kept + new
    if not card.data.model_name:
        card.data.model_name = model_name
    card.save(str(path))
    return path


# ============================================================================================ running lm-eval
def resolve_model_dir(target: str) -> str:
    """A run folder -> its ``final/`` export; a model folder or Hub id -> itself."""
    path = Path(target)
    if (path / "final" / "config.json").is_file():
        return str(path / "final")
    return target


def is_sweep_dir(target: str) -> bool:
    return (Path(target) / "sweep.json").is_file() and (Path(target) / "runs").is_dir()


def load_model_and_tokenizer(model_id: str, *, device: str | None = None, dtype: str = "auto",
                             trust_remote_code: bool = False):
    """``(model, tokenizer)`` for any causal LM folder or Hub id, on ``device`` in eval mode.

    Raises:
        EvalError: When the checkpoint has no tokenizer or the tokenizer has no EOS token.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import depthbench  # noqa: F401  (registers the architectures with the Auto classes)

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError) as exc:
        raise EvalError(f"checkpoint {model_id} has no loadable tokenizer ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}); save the tokenizer into the folder "
                        "(tokenizer.save_pretrained) or evaluate a folder that has one") from exc
    if tokenizer.eos_token_id is None:
        raise EvalError(f"the tokenizer of {model_id} has no EOS token; set tokenizer.eos_token and save it again")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") and torch.cuda.is_bf16_supported() else "float32"
    model = AutoModelForCausalLM.from_pretrained(model_id, dtype=getattr(torch, dtype),
                                                 trust_remote_code=trust_remote_code)
    return model.to(device).eval(), tokenizer


_ENV_INFO: dict[str, Any] = {}


def _simple_evaluate(**kwargs) -> dict[str, Any]:
    """``lm_eval.simple_evaluate`` with its environment report (``pip list``, seconds) computed once per process."""
    import lm_eval.evaluator
    from lm_eval import simple_evaluate

    real = lm_eval.evaluator.add_env_info

    def cached(storage: dict) -> None:
        if not _ENV_INFO:
            before = set(storage)
            real(storage)
            _ENV_INFO.update({k: v for k, v in storage.items() if k not in before})
        storage.update(_ENV_INFO)

    lm_eval.evaluator.add_env_info = cached
    try:
        return simple_evaluate(**kwargs)
    finally:
        lm_eval.evaluator.add_env_info = real


def task_manager(names: list[str], metadata: dict[str, Any], include_path: str | os.PathLike | None = None):
    """An lm-eval ``TaskManager`` over ``eval_tasks/`` (built-in tasks indexed only when a name needs them).

    Raises:
        EvalError: For a name that is neither one of ours nor an lm-eval task/group.
    """
    from lm_eval.tasks import TaskManager

    path = str(include_path or EVAL_TASKS_DIR)
    if not Path(path).is_dir():
        raise EvalError(f"lm-eval task folder {path} not found; pass --include-path")
    local = TaskManager(include_path=path, include_defaults=False, metadata=metadata)
    ours = sorted(n for n in local.all_groups if n.startswith("depthbench_"))
    unknown = [n for n in names if n not in local.all_tasks and n.startswith("depthbench_")]
    if not unknown and all(n in local.all_tasks and not _needs_builtin(local, n) for n in names):
        return local
    if not unknown:  # lm-eval's own tasks, or our groups of them: index the built-in tasks (~15 s)
        manager = TaskManager(include_path=path, include_defaults=True, metadata=metadata)
        unknown = [n for n in names if n not in manager.all_tasks]
        if not unknown:
            return manager
    raise EvalError(f"unknown task(s) {', '.join(map(repr, unknown))}: not in {path} nor in lm-eval's tasks; "
                    f"depthbench's groups are {', '.join(ours)} (`lm_eval ls tasks` lists lm-eval's)")


def _needs_builtin(manager, name: str) -> bool:
    """Whether the local group ``name`` lists a member that is not in the local task folder."""
    if name not in manager.all_groups:
        return False
    members = manager.task_index[name].cfg.get("task") or []
    return any(m not in manager.all_tasks or _needs_builtin(manager, m) for m in members if isinstance(m, str))


def _done(results: dict[str, Any] | None, name: str, limit: float | None) -> bool:
    if not results or name not in results.get("results", {}):
        return False
    return results.get("limits", {}).get(name, results.get("config", {}).get("limit")) == limit


def evaluate_checkpoint(target: str, tasks: list[str], *, out_dir: str | os.PathLike | None = None,
                        limit: float | None = None, batch_size: int | str = 8, device: str | None = None,
                        dtype: str = "auto", data_dir: str | None = None, include_path: str | None = None,
                        trust_remote_code: bool = False, max_length: int | None = None, update_card: bool = True,
                        log=print) -> dict[str, Any]:
    """Evaluate one checkpoint (run folder, model folder or Hub id) on ``tasks``; returns the merged results.

    Writes ``results.json`` (lm-eval's format, plus ``limits``: the ``--limit`` of each entry) and ``results.md``
    to ``out_dir`` (default ``<folder>/eval``; ``eval/<org>__<name>`` for a Hub id) after every task, and the
    ``model-index`` of ``<model folder>/README.md``. Tasks already in ``results.json`` with the same limit are
    skipped. A task that fails does not stop the others; the failures are raised together at the end, after
    every finished result is saved.
    """
    model_id = resolve_model_dir(target)
    local = Path(model_id).exists()
    if local and not (Path(model_id) / "config.json").is_file():
        raise EvalError(f"{target} is neither a model folder (config.json) nor a run folder (final/config.json) "
                        "nor a sweep folder (sweep.json + runs/)")
    out = Path(out_dir) if out_dir else (Path(target) / "eval" if local else Path("eval") / model_id.replace("/", "__"))
    if not tasks:
        raise EvalError("--tasks is empty; name at least one task or group, e.g. " + DEFAULT_TASKS)
    results_path = out / "results.json"
    old = json.loads(results_path.read_text(encoding="utf-8")) if results_path.is_file() else None
    pending = [t for t in tasks if not _done(old, t, limit)]
    metadata = {"pretrained": model_id, "trust_remote_code": trust_remote_code}
    if data_dir:
        metadata["depthbench_data_dir"] = str(Path(data_dir).resolve())
    manager = task_manager(tasks, metadata, include_path)  # unknown names fail before the model is loaded
    if not pending:
        log(f"eval: {model_id}: all of {', '.join(tasks)} already in {results_path} (limit {limit}); skipped")
        return old
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    model, tokenizer = load_model_and_tokenizer(model_id, device=device, dtype=dtype,
                                                trust_remote_code=trust_remote_code)
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, max_length=max_length,
              backend="causal")
    out.mkdir(parents=True, exist_ok=True)
    merged = old
    failures: list[str] = []
    for name in pending:
        t0 = time.time()
        log(f"eval: {model_id}: {name} (limit {limit})")
        try:
            result = _simple_evaluate(model=lm, tasks=[name], task_manager=manager, limit=limit,
                                      bootstrap_iters=0, log_samples=False)
        except Exception as exc:  # noqa: BLE001 - reported below, after the other tasks ran and were saved
            failures.append(f"task {name} failed on {model_id}: {type(exc).__name__}: {exc}")
            log(f"eval: {failures[-1]}")
            continue
        add_token_weighted_groups(result)
        result.setdefault("lm_eval_version", lm_eval.__version__)
        entries = set(result.get("results", {}))
        result["limits"] = {entry: limit for entry in entries}
        result["wall_seconds"] = {name: round(time.time() - t0, 2)}
        merged = merge_results(merged, result)
        merged["config"]["model"] = model_id
        atomic.write_json(str(results_path), merged)
        atomic.write_text(str(out / "results.md"), render_results_md(merged, model_id))
        log(f"eval: {name} done in {time.time() - t0:.1f}s")
    if update_card and local and merged:
        card = record_in_model_card(Path(model_id) / "README.md", merged, Path(model_id).resolve().name
                                    if Path(model_id).name != "final" else Path(model_id).resolve().parent.name)
        log(f"eval: model-index updated in {card}")
    log(f"eval: {results_path}, {out / 'results.md'}")
    if failures:
        raise EvalError("; ".join(failures) + f" (the other tasks' results are in {results_path})")
    return merged


# ============================================================================================ sweep folders
def evaluate_sweep(sweep_dir: str, tasks: list[str], *, log=print, **kwargs) -> dict[str, Any]:
    """Evaluate the final model of every finished run of a sweep (resumable: finished evaluations are skipped),
    then write ``eval_results.csv``, the plot(s) against aspect ratio and the report section
    (:func:`write_sweep_eval_report`). Returns ``{run name: results}``."""
    from tqdm.auto import tqdm

    runs = sorted(p for p in (Path(sweep_dir) / "runs").iterdir() if (p / "final" / "config.json").is_file())
    if not runs:
        raise EvalError(f"sweep {sweep_dir} has no finished run (no runs/*/final/config.json); train it first")
    out: dict[str, Any] = {}
    failures = []
    for run in tqdm(runs, desc="eval runs", unit="run"):
        try:
            out[run.name] = evaluate_checkpoint(str(run), tasks, log=log, **kwargs)
        except EvalError as exc:
            if "unknown task" in str(exc):
                raise
            failures.append(f"{run.name}: {exc}")
            log(f"eval: {run.name} failed: {exc}")
    write_sweep_eval_report(sweep_dir, log=log)
    if failures:
        raise EvalError(f"{len(failures)} run(s) failed (the others are saved): " + "; ".join(failures))
    return out


def sweep_eval_rows(sweep_dir: str) -> list[dict[str, Any]]:
    """One row per (run, task or group, metric) from ``runs/*/eval/results.json``, with the run's architecture,
    shape and aspect ratio (from its ``final/config.json``)."""
    rows = []
    for results_path in sorted(Path(sweep_dir).glob("runs/*/eval/results.json")):
        run = results_path.parent.parent
        cfg = json.loads((run / "final" / "config.json").read_text(encoding="utf-8"))
        summary_path = run / "summary.json"
        summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else {}
        arch = summary.get("arch") or run.name.split("__")[0]
        layers, width = cfg.get("num_hidden_layers"), cfg.get("hidden_size")
        results = json.loads(results_path.read_text(encoding="utf-8"))
        for name, metric, value in metric_rows(results):
            rows.append({"run": run.name, "arch": arch, "L": layers, "d": width,
                         "aspect_ratio": round(width / layers, 3) if layers and width else None,
                         "task": name, "metric": metric, "value": value})
    return rows


def _plot_panels(rows: list[dict[str, Any]], panels: list[tuple[str, str, str]], path: Path, ylabel: str) -> None:
    """One panel per ``(task, metric, title)``: the metric against d/L (log scale, deeper to the right), one line
    per architecture (mean over runs at the same shape); ticks at the measured shapes, labelled d/L and L."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 3.6 * nrows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (task, metric, title) in zip(axes.flat, panels):
        sel = [r for r in rows if r["task"] == task and r["metric"] == metric and r["aspect_ratio"]]
        for arch in sorted({r["arch"] for r in sel}):
            pts: dict[float, list[float]] = {}
            for r in sel:
                if r["arch"] == arch:
                    pts.setdefault(r["aspect_ratio"], []).append(r["value"])
            xs = sorted(pts)
            ax.plot(xs, [sum(pts[x]) / len(pts[x]) for x in xs], marker="o", label=arch)
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
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


SECTION_BEGIN = "<!-- depthbench eval: begin -->"
SECTION_END = "<!-- depthbench eval: end -->"


def render_sweep_eval_section(rows: list[dict[str, Any]], plots: list[str]) -> str:
    """The report section: plots, then per task and metric a table of architecture x L."""
    lines = [SECTION_BEGIN, "## Downstream evaluation (`depthbench eval`)", ""]
    for plot in plots:
        lines += [f"![{plot}]({plot})", ""]
    keys = sorted({(r["task"], r["metric"]) for r in rows},
                  key=lambda k: (k[0] not in DOMAIN_GROUPS and k[0] != "depthbench_nll", k))
    depths = sorted({r["L"] for r in rows if r["L"]})
    archs = sorted({r["arch"] for r in rows})
    for task, metric in keys:
        sel = [r for r in rows if r["task"] == task and r["metric"] == metric]
        better = "lower" if metric.split(" ")[0] in ("nll", "ppl", "bits_per_byte") else "higher"
        lines += [f"**{task}** `{metric}` ({better} is better)", "",
                  "| arch | " + " | ".join(f"L{L}" for L in depths) + " |",
                  "|---|" + "---:|" * len(depths)]
        for arch in archs:
            cells = []
            for L in depths:
                vals = [r["value"] for r in sel if r["arch"] == arch and r["L"] == L]
                cells.append(_fmt(sum(vals) / len(vals)) if vals else "")
            lines.append(f"| {arch} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(SECTION_END)
    return "\n".join(lines) + "\n"


def write_sweep_eval_report(sweep_dir: str, log=print) -> dict[str, str]:
    """``eval_results.csv``, ``domain_nll_vs_aspect_ratio.png`` (one panel per domain, when the NLL groups were
    run), ``synthetic_acc_vs_aspect_ratio.png`` (when ``depthbench_synthetic`` was run) and the evaluation section
    of ``report.md`` (replaced if present, appended otherwise); returns the paths written."""
    import csv
    import io

    root = Path(sweep_dir)
    rows = sweep_eval_rows(sweep_dir)
    if not rows:
        return {}
    paths = {"csv": str(root / "eval_results.csv")}
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic.write_text(paths["csv"], table.getvalue())
    have = {(r["task"], r["metric"]) for r in rows}
    plots = []
    domains = [(g, "nll", f"{label} NLL") for g, label in DOMAIN_GROUPS.items() if (g, "nll") in have]
    if domains:
        _plot_panels(rows, domains, root / "domain_nll_vs_aspect_ratio.png", "NLL per target token (nats)")
        plots.append("domain_nll_vs_aspect_ratio.png")
    synth = sorted(t for t, m in have if t.startswith("depthbench_synthetic_mc_") and m == "acc")
    if synth:
        panels = [(t, "acc", t.removeprefix("depthbench_synthetic_mc_")) for t in synth]
        if ("depthbench_synthetic", "acc") in have:
            panels.append(("depthbench_synthetic", "acc", "mean of families"))
        _plot_panels(rows, panels, root / "synthetic_acc_vs_aspect_ratio.png", "accuracy (chance 0.25)")
        plots.append("synthetic_acc_vs_aspect_ratio.png")
    for plot in plots:
        paths[plot] = str(root / plot)
    section = render_sweep_eval_section(rows, plots)
    report = root / "report.md"
    text = report.read_text(encoding="utf-8") if report.is_file() else ""
    if SECTION_BEGIN in text and SECTION_END in text:
        head, rest = text.split(SECTION_BEGIN, 1)
        text = head + section.rstrip("\n") + rest.split(SECTION_END, 1)[1]
    else:
        text = (text.rstrip("\n") + "\n\n" if text else "") + section
    atomic.write_text(str(report), text)
    paths["report"] = str(report)
    log(f"eval: sweep report section in {report}; {', '.join(plots) or 'no plot'}")
    return paths


# ============================================================================================ CLI
def _limit(text: str) -> float | int:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"--limit must be > 0 (a count, or a fraction < 1), got {text}")
    return int(value) if value >= 1 and value == int(value) else value


def _batch_size(text: str) -> int | str:
    if text == "auto" or text.startswith("auto:"):
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--batch-size must be a positive integer or 'auto', got {text!r}")
    return value


def _cmd_eval(args: argparse.Namespace) -> int:
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    kwargs = dict(limit=args.limit, batch_size=args.batch_size, device=args.device, dtype=args.dtype,
                  data_dir=args.data_dir, include_path=args.include_path, trust_remote_code=args.trust_remote_code,
                  max_length=args.max_length)
    if is_sweep_dir(args.checkpoint):
        if args.output:
            raise EvalError("-o/--output is for one checkpoint; a sweep writes into each run's eval/ folder")
        evaluate_sweep(args.checkpoint, tasks, **kwargs)
        return 0
    evaluate_checkpoint(args.checkpoint, tasks, out_dir=args.output, update_card=not args.no_card, **kwargs)
    return 0


def register_cli(subparsers) -> None:
    """Add ``depthbench eval``."""
    p = subparsers.add_parser(
        "eval", help="lm-eval on a checkpoint or every run of a sweep (results.json/.md, model card)",
        description="Evaluate a checkpoint (model folder, run folder or Hub id) in-process with lm-eval's HFLM "
                    "and the tasks of eval_tasks/; writes <folder>/eval/results.json (lm-eval's format) and "
                    "results.md and records the results in the model card's model-index. Given a sweep folder, "
                    "evaluates every run (finished evaluations are skipped) and adds plots against aspect ratio "
                    "and a section to the sweep's report.md.")
    p.add_argument("checkpoint", help="model folder, run folder (uses final/), sweep folder, or Hub id")
    p.add_argument("--tasks", default=DEFAULT_TASKS, help=f"comma-separated tasks/groups (default {DEFAULT_TASKS})")
    p.add_argument("--limit", type=_limit, default=None, help="documents per task (or a fraction < 1)")
    p.add_argument("--batch-size", type=_batch_size, default=8, help="lm-eval batch size or 'auto' (default 8)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps ... (default: cuda if available)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="weights dtype (auto: bfloat16 on a bf16 GPU, else float32)")
    p.add_argument("--max-length", type=int, default=None, help="context length for lm-eval (default: the model's)")
    p.add_argument("--data-dir", default=None,
                   help="local copies of the depthbench_nll datasets (<source>.jsonl/.json/.csv/.parquet)")
    p.add_argument("--include-path", default=None, help=f"lm-eval task folder (default {EVAL_TASKS_DIR})")
    p.add_argument("--trust-remote-code", action="store_true", help="for checkpoints of other libraries' models")
    p.add_argument("-o", "--output", default=None, help="output folder (default <checkpoint>/eval)")
    p.add_argument("--no-card", action="store_true", help="do not write the model card's model-index")
    p.set_defaults(func=_cmd_eval)
