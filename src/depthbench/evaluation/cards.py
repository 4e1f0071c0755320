"""Evaluation results in a model card: huggingface_hub ``EvalResult`` entries of the ``model-index``, one per task
and primary metric, and the card's "Evaluation results" section, written into ``<model folder>/README.md`` by
``depthbench eval``.

The completion-NLL tasks load their data with a custom loader, so lm-eval's results do not name the Hub dataset;
it is read from the task folder's ``depthbench_nll/utils.py`` (:func:`nll_hub_datasets`). Results on local copies
(``--data-dir``) or on a subset (``--limit``) say so in the entry and in the text (:mod:`depthbench.eval_records`).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from depthbench import eval_records
from depthbench.cards import evaluated_card
from depthbench.eval_records import LM_EVAL_URL
from depthbench.evaluation.results import metric_rows


def nll_utils(task_dir: str | os.PathLike):
    """The task folder's ``depthbench_nll/utils.py`` as a module (``None`` when the folder has none)."""
    path = Path(task_dir) / "depthbench_nll" / "utils.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("depthbench_eval_tasks_nll_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nll_hub_datasets(task_dir: str | os.PathLike) -> dict[str, tuple[str, str | None, str]]:
    """``source -> (Hub dataset id, config, split)`` of the completion-NLL tasks of the lm-eval task folder
    ``task_dir`` (read from its ``depthbench_nll/utils.py``; ``{}`` when the folder has none)."""
    module = nll_utils(task_dir)
    if module is None:
        return {}
    return {name: (src.hub_path, src.hub_name, src.hub_split) for name, src in module.SOURCES.items()}


def local_data_sources(results: dict[str, Any], data_dir: str | os.PathLike, *,
                       task_dir: str | os.PathLike) -> dict[str, list[dict]]:
    """``{task: [file record]}`` for the completion-NLL tasks of ``results`` that read their local copy in
    ``data_dir`` (:func:`depthbench.eval_records.file_record`: file name, sha256, the Hub dataset it stands for)."""
    module = nll_utils(task_dir)
    if module is None:
        return {}
    out = {}
    for name in results.get("results", {}):
        source = ((results.get("configs", {}).get(name) or {}).get("dataset_kwargs") or {}).get("source")
        if source in module.SOURCES:
            src = module.SOURCES[source]
            path = module.local_file(source, data_dir)
            out[name] = [eval_records.file_record(path, (src.hub_path, src.hub_name, src.hub_split))]
    return out


def eval_results_for_card(results: dict[str, Any], *, task_dir: str | os.PathLike) -> list:
    """huggingface_hub ``EvalResult`` entries (one per task and primary metric) for ``model-index``; the datasets
    of the completion-NLL tasks are named from the task folder ``task_dir`` (:func:`nll_hub_datasets`)."""
    from huggingface_hub import EvalResult

    hub = nll_hub_datasets(task_dir)
    version = results.get("lm_eval_version", "")
    entries = []
    for name, metric, value in metric_rows(results):
        cfg = results.get("configs", {}).get(name, {})
        source = (cfg.get("dataset_kwargs") or {}).get("source")
        dataset, config, split = hub.get(source) or (cfg.get("dataset_path") or name, cfg.get("dataset_name"),
                                                    cfg.get("test_split"))
        entry = EvalResult(
            task_type="text-generation", task_name=name, dataset_type=dataset, dataset_name=name,
            dataset_config=config, dataset_split=split,
            metric_type=metric.split(" ")[0], metric_name=metric, metric_value=float(value),
            source_name=f"lm-eval {version} (depthbench eval)".replace("  ", " "), source_url=LM_EVAL_URL)
        entries.append(eval_records.mark(entry, eval_records.provenance(results, name)))
    return entries


def record_in_model_card(card_path: str | os.PathLike, results: dict[str, Any], model_name: str, *,
                         task_dir: str | os.PathLike) -> Path:
    """Write ``results`` into the ``model-index`` of the model card at ``card_path`` (``README.md``) with
    huggingface_hub's ``ModelCard``/``EvalResult`` (:func:`eval_results_for_card`): entries for the same task and
    metric are replaced, all other card content and entries are kept; a missing card is created with a minimal
    body (:func:`depthbench.cards.evaluated_card`)."""
    from huggingface_hub import ModelCard

    path = Path(card_path)
    new = eval_results_for_card(results, task_dir=task_dir)
    if path.is_file():
        card = ModelCard.load(path)
    else:
        card = evaluated_card(model_name)
    keys = {(e.dataset_name, e.metric_type) for e in new}
    kept = [e for e in (card.data.eval_results or []) if (e.dataset_name, e.metric_type) not in keys]
    card.data.eval_results = kept + new
    if not card.data.model_name:
        card.data.model_name = model_name
    card.text = eval_records.replace_section(card.text, eval_records.section(card.data.eval_results))
    card.save(str(path))
    return path
