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


# ------------------------------------------------------------------------------------------------ local and subset
GSM8K_LOCAL = {
    "results": {"depthbench_nll_gsm8k": {"nll,none": 2.5}, "depthbench_nll_math500": {"nll,none": 2.0},
                "depthbench_nll_math": {"nll,none": 2.2}, "depthbench_synthetic_mc_pointer": {"acc,none": 0.5}},
    "group_subtasks": {"depthbench_nll_math": ["depthbench_nll_gsm8k", "depthbench_nll_math500"]},
    "configs": {"depthbench_nll_gsm8k": {"dataset_kwargs": {"source": "gsm8k"}},
                "depthbench_nll_math500": {"dataset_kwargs": {"source": "math500"}},
                "depthbench_synthetic_mc_pointer": {"dataset_path": "depthbench_synthetic_mc_pointer",
                                                    "test_split": "test"}},
    "n-samples": {"depthbench_nll_gsm8k": {"original": 13, "effective": 13},
                  "depthbench_nll_math500": {"original": 2, "effective": 2},
                  "depthbench_synthetic_mc_pointer": {"original": 100, "effective": 2}},
    "limits": {"depthbench_nll_gsm8k": 20, "depthbench_nll_math500": 20, "depthbench_nll_math": 20,
               "depthbench_synthetic_mc_pointer": 2},
    "data_sources": {"depthbench_nll_gsm8k": [{"file": "gsm8k.jsonl", "sha256": "ab" * 32, "copy_of": "openai/gsm8k",
                                               "config": "main", "split": "test"}],
                     "depthbench_nll_math500": [{"file": "math500.jsonl", "sha256": "cd" * 32,
                                                 "copy_of": "HuggingFaceH4/MATH-500", "config": None,
                                                 "split": "test"}]},
    "lm_eval_version": "0.4.13",
}


def test_results_on_local_copies_are_not_filed_under_the_hub_dataset(tmp_path):
    from huggingface_hub import ModelCard

    entries = {(e.dataset_name, e.metric_type): e for e in eval_results_for_card(GSM8K_LOCAL, task_dir=tasks_dir())}
    nll = entries[("depthbench_nll_gsm8k", "nll")]
    assert nll.dataset_type != "openai/gsm8k" and "/" not in nll.dataset_type  # never a Hub dataset id
    assert nll.dataset_args["copy_of"] == "openai/gsm8k" and nll.dataset_args["local_copy"] == "gsm8k.jsonl"
    assert nll.dataset_args["sha256"] == "ab" * 32 and "local copy" in nll.source_name
    assert "limit" not in nll.dataset_args  # 13 of 13 documents: the whole (local) task
    group = entries[("depthbench_nll_math", "nll")]  # a group: over its leaves
    assert group.dataset_args["local_copy"] == "gsm8k.jsonl, math500.jsonl"
    path = record_in_model_card(tmp_path / "README.md", GSM8K_LOCAL, "m", task_dir=tasks_dir())
    card = ModelCard.load(path)  # what the card says, as huggingface_hub reads it back
    loaded = {(e.dataset_name, e.metric_type): e for e in card.data.eval_results}
    assert loaded[("depthbench_nll_gsm8k", "nll")].dataset_args["copy_of"] == "openai/gsm8k"
    line = next(t for t in card.text.splitlines() if t.startswith("| depthbench_nll_gsm8k | nll |"))
    assert "local copy" in line and "gsm8k.jsonl" in line and "openai/gsm8k" in line


def test_subset_results_say_so_in_the_model_index_and_the_text(tmp_path):
    from huggingface_hub import ModelCard

    entries = {(e.dataset_name, e.metric_type): e for e in eval_results_for_card(GSM8K_LOCAL, task_dir=tasks_dir())}
    acc = entries[("depthbench_synthetic_mc_pointer", "acc")]
    assert (acc.dataset_args["limit"], acc.dataset_args["documents"], acc.dataset_args["documents_in_task"]) == \
        (2, 2, 100)
    assert "subset: 2 of 100 documents" in acc.source_name
    path = record_in_model_card(tmp_path / "README.md", GSM8K_LOCAL, "m", task_dir=tasks_dir())
    text = ModelCard.load(path).text
    line = next(t for t in text.splitlines() if t.startswith("| depthbench_synthetic_mc_pointer | acc |"))
    assert "subset" in line and "2 of 100 documents" in line
    assert "Neither is the benchmark's result" in text
    # a full run on the Hub data replaces the entries and the notes
    full = {"results": {"depthbench_synthetic_mc_pointer": {"acc,none": 0.25}},
            "configs": {"depthbench_synthetic_mc_pointer": GSM8K_LOCAL["configs"]["depthbench_synthetic_mc_pointer"]},
            "n-samples": {"depthbench_synthetic_mc_pointer": {"original": 100, "effective": 100}}, "limits": {}}
    record_in_model_card(path, full, "m", task_dir=tasks_dir())
    card = ModelCard.load(path)
    pointer = [e for e in card.data.eval_results if e.dataset_name == "depthbench_synthetic_mc_pointer"]
    assert [e.metric_value for e in pointer] == [0.25] and not pointer[0].dataset_args
    line = next(t for t in card.text.splitlines() if t.startswith("| depthbench_synthetic_mc_pointer | acc |"))
    assert "subset" not in line and card.text.count("## Evaluation results") == 1


def test_a_stock_lm_eval_run_on_local_copies_is_marked_from_its_task_metadata():
    stock = {"results": {"depthbench_nll_gsm8k": {"nll,none": 2.5}},
             "configs": {"depthbench_nll_gsm8k": {"dataset_kwargs": {"source": "gsm8k"},
                                                  "metadata": {"depthbench_data_dir": "/home/me/nll_data"}}},
             "n-samples": {"depthbench_nll_gsm8k": {"original": 13, "effective": 13}}, "config": {"limit": None}}
    (nll,) = eval_results_for_card(stock, task_dir=tasks_dir())
    assert nll.dataset_type == "local:nll_data/" and nll.dataset_args["copy_of"] == "openai/gsm8k"
    assert "/home/me" not in repr(nll)
