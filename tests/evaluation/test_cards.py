"""``depthbench.evaluation.cards``: evaluation results as ``model-index`` entries of a model card (huggingface_hub's
``ModelCard`` / ``EvalResult``), the completion-NLL tasks' Hub datasets, and an update that keeps the rest of a card.

Run it with ``python -m pytest tests/evaluation/test_cards.py -q``.
"""

from __future__ import annotations

from depthbench.evaluation.cards import eval_results_for_card, nll_hub_datasets, record_in_model_card
from depthbench.evaluation.harness import tasks_dir

RESULTS = {"results": {"depthbench_nll_gsm8k": {"nll,none": 2.5, "ppl,none": 12.18},
                       "other": {"acc,none": 0.75}},
           "configs": {"depthbench_nll_gsm8k": {"dataset_kwargs": {"source": "gsm8k"}},
                       "other": {"dataset_path": "org/other", "dataset_name": "cfg", "test_split": "validation"}},
           "lm_eval_version": "0.4.9"}


def test_nll_hub_datasets_come_from_the_task_folder(tmp_path):
    hub = nll_hub_datasets(tasks_dir())
    assert hub["gsm8k"] == ("openai/gsm8k", "main", "test")
    assert len(hub) == 6
    assert nll_hub_datasets(tmp_path) == {}  # a task folder without depthbench_nll/


def test_eval_results_name_the_dataset_metric_and_source():
    entries = {(e.dataset_name, e.metric_type): e for e in eval_results_for_card(RESULTS, task_dir=tasks_dir())}
    assert set(entries) == {("depthbench_nll_gsm8k", "nll"), ("depthbench_nll_gsm8k", "ppl"), ("other", "acc")}
    nll = entries[("depthbench_nll_gsm8k", "nll")]
    assert (nll.dataset_type, nll.dataset_config, nll.dataset_split) == ("openai/gsm8k", "main", "test")
    assert nll.metric_value == 2.5 and nll.source_name == "lm-eval 0.4.9 (depthbench eval)"
    other = entries[("other", "acc")]  # any other task: lm-eval's own dataset fields
    assert (other.dataset_type, other.dataset_config, other.dataset_split) == ("org/other", "cfg", "validation")


def test_model_card_update_keeps_other_content(tmp_path):
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    old = EvalResult(task_type="text-generation", dataset_type="x/other", dataset_name="other_task",
                     metric_type="acc", metric_value=0.5)
    stale = EvalResult(task_type="text-generation", dataset_type="openai/gsm8k", dataset_name="depthbench_nll_gsm8k",
                       metric_type="nll", metric_value=9.0)
    card = ModelCard.from_template(ModelCardData(model_name="m", eval_results=[old, stale]),
                                   template_str="---\n{{ card_data }}\n---\n\n# m\n\nHand-written text.\n")
    card.save(str(tmp_path / "README.md"))
    results = {"results": {"depthbench_nll_gsm8k": {"nll,none": 2.5, "ppl,none": 12.18}},
               "configs": {"depthbench_nll_gsm8k": {"dataset_kwargs": {"source": "gsm8k"}}}}
    record_in_model_card(tmp_path / "README.md", results, "m", task_dir=tasks_dir())
    text = (tmp_path / "README.md").read_text()
    assert "Hand-written text." in text
    entries = {(e.dataset_name, e.metric_type): e.metric_value for e in ModelCard.load(tmp_path / "README.md").data
               .eval_results}
    assert entries == {("other_task", "acc"): 0.5, ("depthbench_nll_gsm8k", "nll"): 2.5,
                       ("depthbench_nll_gsm8k", "ppl"): 12.18}


def test_missing_card_is_created(tmp_path):
    from huggingface_hub import ModelCard

    path = record_in_model_card(tmp_path / "README.md", RESULTS, "my-run", task_dir=tasks_dir())
    card = ModelCard.load(path)
    assert card.data.model_name == "my-run" and "Evaluated with `depthbench eval`." in card.text
    assert len(card.data.eval_results) == 3
