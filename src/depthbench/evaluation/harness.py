"""The lm-eval run of ``depthbench eval``: the task manager over the shipped task folder, model and tokenizer
loading, one checkpoint (:func:`evaluate_checkpoint`) and every run of a sweep (:func:`evaluate_sweep`).

The model is loaded once with ``AutoModelForCausalLM`` (depthbench's architectures are registered, any other
causal LM folder or Hub id works too) and scored in-process by lm-eval's own ``HFLM`` wrapped around the model
object, with the installed task folder (:func:`tasks_dir`: the repository's ``eval_tasks/``, installed as
``depthbench.eval_tasks``) on the task path. Every requested task or group is evaluated on its own and merged into
``<out>/results.json`` (lm-eval's result format) right away, so a failing task never loses the finished ones (nor
stops the others: failures are raised together at the end), and a rerun skips what is already there (same
``--limit``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from depthbench import atomic, runs
from depthbench.errors import Failed
from depthbench.evaluation.cards import local_data_sources, record_in_model_card
from depthbench.evaluation.results import add_token_weighted_groups, merge_results, render_results_md
from depthbench.evaluation.sweep import write_sweep_eval_report

DEFAULT_TASKS = "depthbench_nll,depthbench_zeroshot,depthbench_synthetic"


class EvalError(ValueError):
    """Bad input to ``depthbench eval`` (unknown task, missing tokenizer, ...); the message says what to change."""


TASKS_PACKAGE = "depthbench.eval_tasks"
"""The installed lm-eval task folder: the repository's ``eval_tasks/``, mapped to this package by setup.py."""

_AS_FILE = contextlib.ExitStack()  # a task folder that had to be unpacked stays there until the process exits
atexit.register(_AS_FILE.close)


@functools.lru_cache(maxsize=1)
def tasks_dir() -> Path:
    """The lm-eval task folder installed with depthbench (package data :data:`TASKS_PACKAGE`, read through
    ``importlib.resources``: the wheel's copy in site-packages, the repository's ``eval_tasks/`` in an editable
    install): the one place that says where it is (the default ``--include-path``, ``depthbench tasks-path``,
    and where the model card reads the NLL datasets). lm-eval reads a real folder, which this always is.

    Raises:
        depthbench.errors.Failed: The installation has no task folder (an editable install made by an older
            setup.py: run ``pip install -e .`` again).
    """
    from importlib import resources

    try:
        folder = resources.files(TASKS_PACKAGE)
    except ModuleNotFoundError as exc:
        raise Failed(f"this depthbench installation has no lm-eval task folder ({TASKS_PACKAGE}); reinstall it "
                     "(pip install -e . in a checkout, or the wheel)") from exc
    return Path(_AS_FILE.enter_context(resources.as_file(folder)))


# ============================================================================================ lm-eval
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


def quiet_git_hash() -> str | None:
    """lm-eval's ``get_git_commit_hash`` (``git describe --always`` of the working directory, else the commit read
    from its ``.git`` folder) with git's stderr discarded: outside a git folder git prints ``fatal: not a git
    repository`` on the user's terminal, which says nothing about the evaluation (the result is ``None`` then)."""
    import subprocess

    from lm_eval.loggers.utils import get_commit_from_path

    try:
        return subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL,  # noqa: S607
                                       stdin=subprocess.DEVNULL).strip().decode()
    except (subprocess.CalledProcessError, OSError):
        return get_commit_from_path(os.getcwd())


def _simple_evaluate(**kwargs) -> dict[str, Any]:
    """``lm_eval.simple_evaluate`` with its environment report (``pip list``, seconds) computed once per process,
    and its git lookup quiet (:func:`quiet_git_hash`)."""
    import lm_eval.evaluator
    from lm_eval import simple_evaluate

    real, real_git = lm_eval.evaluator.add_env_info, lm_eval.evaluator.get_git_commit_hash

    def cached(storage: dict) -> None:
        if not _ENV_INFO:
            before = set(storage)
            real(storage)
            _ENV_INFO.update({k: v for k, v in storage.items() if k not in before})
        storage.update(_ENV_INFO)

    lm_eval.evaluator.add_env_info, lm_eval.evaluator.get_git_commit_hash = cached, quiet_git_hash
    try:
        return simple_evaluate(**kwargs)
    finally:
        lm_eval.evaluator.add_env_info, lm_eval.evaluator.get_git_commit_hash = real, real_git


# ============================================================================================ quiet lm-eval
LIBRARY_LOGGERS = ("lm_eval", "lm-eval", "transformers", "datasets")
"""The loggers whose warnings an evaluation stage shows once each (:func:`quiet_lm_eval`)."""
HOW_WE_CALL_LM_EVAL = (
    "`pretrained` model kwarg is not of type `str`",  # we pass the loaded model object, on purpose
    "Passed an already-initialized model through `pretrained`",
    "Custom kwargs can be passed to `--metadata`",  # advice for lm-eval's CLI, per task; the harness passes metadata
)
"""lm-eval warnings about how depthbench calls it (not about the model or the tasks): dropped in a stage."""


class _OncePerStage(logging.Filter):
    """Drops, for records of :data:`LIBRARY_LOGGERS`, the messages of :data:`HOW_WE_CALL_LM_EVAL` and any message
    already shown in this stage; other records pass."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".")[0] not in LIBRARY_LOGGERS:
            return True
        message = record.getMessage()
        key = (record.levelno, message)
        if key in self.seen or any(noise in message for noise in HOW_WE_CALL_LM_EVAL):
            return False
        self.seen.add(key)
        return True


@functools.lru_cache(maxsize=1)
def _no_bar() -> type:
    """tqdm with ``disable=True`` forced: lm-eval's progress bars inside a stage (which shows one bar of its own)."""
    from tqdm.std import tqdm

    class NoBar(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return NoBar


_QUIET_DEPTH = [0]


@contextlib.contextmanager
def quiet_lm_eval():
    """While the block runs (an evaluation stage; reentrant): lm-eval's own progress bars off (the ``tqdm`` of its
    loaded modules), those of ``datasets`` and ``transformers`` off, lm-eval's loggers at ``WARNING`` (unless
    ``LMEVAL_LOG_LEVEL`` asks for another level), and each distinct warning of lm-eval, transformers and datasets
    shown once, less those about how depthbench calls lm-eval (:data:`HOW_WE_CALL_LM_EVAL`). Everything is as it
    was afterwards."""
    if _QUIET_DEPTH[0]:
        yield
        return
    import datasets
    import lm_eval.api.model
    import lm_eval.api.task
    import lm_eval.evaluator
    import lm_eval.models.huggingface  # noqa: F401  (loaded before their tqdm is switched off)
    from tqdm.std import tqdm
    from transformers.utils import logging as hf_logging

    with contextlib.ExitStack() as stack:
        for module in [m for name, m in list(sys.modules.items()) if name.split(".")[0] == "lm_eval" and m]:
            if getattr(module, "tqdm", None) is tqdm:
                module.tqdm = _no_bar()
                stack.callback(setattr, module, "tqdm", tqdm)
        if datasets.is_progress_bar_enabled():
            datasets.disable_progress_bars()
            stack.callback(datasets.enable_progress_bars)
        if hf_logging.is_progress_bar_enabled():
            hf_logging.disable_progress_bar()
            stack.callback(hf_logging.enable_progress_bar)
        if not os.environ.get("LMEVAL_LOG_LEVEL"):
            for name in ("lm_eval", "lm-eval"):
                logger = logging.getLogger(name)
                stack.callback(logger.setLevel, logger.level)
                logger.setLevel(logging.WARNING)
        handlers = {logging.lastResort, *logging.getLogger().handlers}
        for name in LIBRARY_LOGGERS:
            handlers.update(logging.getLogger(name).handlers)
        for handler in handlers - {None}:  # a filter each: every output (terminal, log file) shows a warning once
            once = _OncePerStage()
            handler.addFilter(once)
            stack.callback(handler.removeFilter, once)
        _QUIET_DEPTH[0] += 1
        stack.callback(_QUIET_DEPTH.__setitem__, 0, 0)
        yield


def task_manager(names: list[str], metadata: dict[str, Any], include_path: str | os.PathLike | None = None):
    """An lm-eval ``TaskManager`` over ``include_path`` (default :func:`tasks_dir`; built-in tasks indexed only
    when a name needs them).

    Raises:
        EvalError: For a name that is neither one of ours nor an lm-eval task/group.
    """
    from lm_eval.tasks import TaskManager

    path = str(include_path or tasks_dir())
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


# ============================================================================================ one checkpoint
def _done(results: dict[str, Any] | None, name: str, limit: float | None, data_dir: str | None) -> bool:
    """Whether ``results`` holds ``name`` evaluated with the same ``--limit`` on the same data."""
    if not results or name not in results.get("results", {}):
        return False
    same_data = (results.get("data_dirs") or {}).get(name) == data_dir
    return results.get("limits", {}).get(name, results.get("config", {}).get("limit")) == limit and same_data


def effective_data_dir(data_dir: str | None) -> str | None:
    """The folder of local copies the completion-NLL tasks read: ``--data-dir``, else the environment variable
    the tasks also honour (``DEPTHBENCH_NLL_DATA_DIR``), absolute; ``None`` for the Hub datasets."""
    folder = data_dir or os.environ.get("DEPTHBENCH_NLL_DATA_DIR") or None
    return str(Path(folder).resolve()) if folder else None


def _output_dir(target: str, model_id: str, out_dir: str | os.PathLike | None, local: bool) -> Path:
    """``out_dir``, else ``<folder>/eval`` for a local checkpoint, ``eval/<org>__<name>`` for a Hub id."""
    if out_dir:
        return Path(out_dir)
    return Path(target) / runs.EVAL if local else Path(runs.EVAL) / model_id.replace("/", "__")


def _card_name(model_id: str) -> str:
    """The model's name in its card: the folder's name (the run's, for a run's ``final/`` export)."""
    path = Path(model_id).resolve()
    return path.parent.name if Path(model_id).name == runs.FINAL else path.name


def _evaluate_task(lm, manager, name: str, limit: float | None, data_dir: str | None) -> dict[str, Any]:
    """lm-eval's results of task or group ``name`` with the token-weighted groups, the lm-eval version, the
    ``limits`` of its entries, the data folder (``data_dirs``) and local files (``data_sources``: name, sha256,
    the Hub dataset each stands for; ``[]`` for Hub data) they read, and its wall time (``wall_seconds``)."""
    import lm_eval

    t0 = time.time()
    result = _simple_evaluate(model=lm, tasks=[name], task_manager=manager, limit=limit, bootstrap_iters=0,
                              log_samples=False)
    add_token_weighted_groups(result)
    result.setdefault("lm_eval_version", lm_eval.__version__)
    entries = set(result.get("results", {}))
    result["limits"] = {entry: limit for entry in entries}
    result["data_dirs"] = {entry: data_dir for entry in entries}
    local = local_data_sources(result, data_dir, task_dir=tasks_dir()) if data_dir else {}
    result["data_sources"] = {entry: local.get(entry, []) for entry in entries}
    result["wall_seconds"] = {name: round(time.time() - t0, 2)}
    return result


def _run_tasks(lm, manager, pending: list[str], *, model_id: str, limit: float | None, data_dir: str | None,
               out: Path, merged: dict[str, Any] | None, log, on_task=lambda: None
               ) -> tuple[dict[str, Any] | None, list[str]]:
    """Evaluate each of ``pending`` on its own, saving ``results.json`` and ``results.md`` after each (and calling
    ``on_task()``); returns the merged results and the failures (a failing task does not stop the others)."""
    failures: list[str] = []
    out.mkdir(parents=True, exist_ok=True)
    for name in pending:
        log(f"eval: {model_id}: {name} (limit {limit})")
        try:
            result = _evaluate_task(lm, manager, name, limit, data_dir)
        except Exception as exc:  # noqa: BLE001 - reported by the caller, after the other tasks ran and were saved
            failures.append(f"task {name} failed on {model_id}: {type(exc).__name__}: {exc}")
            log(f"eval: {failures[-1]}")
            on_task()
            continue
        merged = merge_results(merged, result)
        merged["config"]["model"] = model_id
        atomic.write_json(str(out / runs.EVAL_RESULTS), merged)
        atomic.write_text(str(out / "results.md"), render_results_md(merged, model_id))
        log(f"eval: {name} done in {result['wall_seconds'][name]:.1f}s")
        on_task()
    return merged, failures


def evaluate_checkpoint(target: str, tasks: list[str], *, out_dir: str | os.PathLike | None = None,
                        limit: float | None = None, batch_size: int | str = 8, device: str | None = None,
                        dtype: str = "auto", data_dir: str | None = None, include_path: str | None = None,
                        trust_remote_code: bool = False, max_length: int | None = None, update_card: bool = True,
                        log=print, on_task=lambda: None) -> dict[str, Any]:
    """Evaluate one checkpoint (run folder, model folder or Hub id) on ``tasks``; returns the merged results.

    Writes ``results.json`` (lm-eval's format, plus ``limits``: the ``--limit`` of each entry) and ``results.md``
    to ``out_dir`` (default ``<folder>/eval``; ``eval/<org>__<name>`` for a Hub id) after every task, and the
    ``model-index`` of ``<model folder>/README.md``. Tasks already in ``results.json`` with the same limit are
    skipped. A task that fails does not stop the others; the failures are raised together at the end, after
    every finished result is saved. ``on_task()`` runs after each task (evaluated, failed or skipped). lm-eval runs
    quiet (:func:`quiet_lm_eval`): the progress is ``log``'s lines, or the caller's bar.
    """
    with quiet_lm_eval():
        return _evaluate_checkpoint(target, tasks, out_dir=out_dir, limit=limit, batch_size=batch_size, device=device,
                                    dtype=dtype, data_dir=data_dir, include_path=include_path,
                                    trust_remote_code=trust_remote_code, max_length=max_length,
                                    update_card=update_card, log=log, on_task=on_task)


def _evaluate_checkpoint(target: str, tasks: list[str], *, out_dir, limit, batch_size, device, dtype, data_dir,
                         include_path, trust_remote_code, max_length, update_card, log, on_task) -> dict[str, Any]:
    model_id = runs.model_dir(target)  # a ValueError saying what to pass for a folder that holds no model
    local = Path(model_id).exists()
    out = _output_dir(target, model_id, out_dir, local)
    if not tasks:
        raise EvalError("--tasks is empty; name at least one task or group, e.g. " + DEFAULT_TASKS)
    results_path = out / runs.EVAL_RESULTS
    old = atomic.read_json(results_path)
    data_dir = effective_data_dir(data_dir)
    pending = [t for t in tasks if not _done(old, t, limit, data_dir)]
    metadata = {"pretrained": model_id, "trust_remote_code": trust_remote_code}
    if data_dir:
        metadata["depthbench_data_dir"] = data_dir
    manager = task_manager(tasks, metadata, include_path)  # unknown names fail before the model is loaded
    for _ in range(len(tasks) - len(pending)):
        on_task()
    if not pending:
        log(f"eval: {model_id}: all of {', '.join(tasks)} already in {results_path} (limit {limit}); skipped")
        return old
    from lm_eval.models.huggingface import HFLM

    model, tokenizer = load_model_and_tokenizer(model_id, device=device, dtype=dtype,
                                                trust_remote_code=trust_remote_code)
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, max_length=max_length,
              backend="causal")
    merged, failures = _run_tasks(lm, manager, pending, model_id=model_id, limit=limit, data_dir=data_dir, out=out,
                                  merged=old, log=log, on_task=on_task)
    if update_card and local and merged:
        card = record_in_model_card(Path(model_id) / "README.md", merged, _card_name(model_id), task_dir=tasks_dir())
        log(f"eval: model-index updated in {card}")
    log(f"eval: {results_path}, {out / 'results.md'}")
    if failures:
        raise EvalError("; ".join(failures) + f" (the other tasks' results are in {results_path})")
    return merged


# ============================================================================================ a sweep
def evaluate_sweep(sweep_dir: str, tasks: list[str], *, log=print, **kwargs) -> dict[str, Any]:
    """Evaluate the final model of every finished run of a sweep (resumable: finished evaluations are skipped),
    then write ``eval_results.csv``, the plot(s) against aspect ratio and the report section
    (:func:`depthbench.evaluation.sweep.write_sweep_eval_report`). Returns ``{run name: results}``.

    The stage shows one progress bar, a step per (run, task) (:func:`depthbench.progress.progress_bar`), with
    ``log``'s lines above it and lm-eval quiet (:func:`quiet_lm_eval`: its bars off, each warning once)."""
    from depthbench.progress import progress_bar

    finished = runs.sweep_runs(sweep_dir, finished=True)
    if not finished:
        raise EvalError(f"sweep {sweep_dir} has no finished run (summary.json status 'finished' and a model in "
                        "final/); train it first")
    out: dict[str, Any] = {}
    failures = []
    with quiet_lm_eval(), progress_bar(total=len(finished) * len(tasks), desc="eval", unit="task") as bar:
        def say(*args) -> None:  # print's lines above the bar (tqdm.write), any other log as it is
            if log is print:
                bar.write(" ".join(map(str, args)), file=sys.stdout)
            else:
                log(*args)

        for i, run in enumerate(finished):
            bar.set_postfix_str(run.name, refresh=False)
            try:
                out[run.name] = evaluate_checkpoint(run.run_dir, tasks, log=say, on_task=lambda: bar.update(1),
                                                    **kwargs)
            except EvalError as exc:
                if "unknown task" in str(exc):
                    raise
                failures.append(f"{run.name}: {exc}")
                say(f"eval: {run.name} failed: {exc}")
            bar.update((i + 1) * len(tasks) - bar.n)  # a run that failed before its tasks: counted as done
    write_sweep_eval_report(sweep_dir, log=log)
    if failures:
        raise EvalError(f"{len(failures)} run(s) failed (the others are saved): " + "; ".join(failures))
    return out
