"""``depthbench.eval_records``: where an evaluation result came from (Hub dataset, local copy, subset), as lm-eval's
results dict says it, written into huggingface_hub ``EvalResult`` entries and the card's results section.

Hand-written results dicts; the numbers and sentences expected are worked out by hand from them. How
``depthbench eval`` and ``depthbench publish`` use this is tests/evaluation/test_cards.py's and
tests/hub/test_publish.py's.

    python -m pytest tests/test_eval_records.py -q
"""

from __future__ import annotations

import hashlib

from depthbench import eval_records as er

GROUP = {
    "results": {"grp": {"nll,none": 2.0}, "a": {"nll,none": 1.0}, "b": {"nll,none": 3.0}, "c": {"acc,none": 0.5}},
    "group_subtasks": {"grp": ["a", "sub"], "sub": ["b"]},  # a nested group: its leaves are a and b
    "n-samples": {"a": {"original": 10, "effective": 4}, "b": {"original": 5, "effective": 5}},
    "limits": {"grp": 4},
    "data_sources": {"a": [{"file": "a.jsonl", "sha256": "aa"}], "b": [{"file": "b.csv", "sha256": "bb"}]},
    "configs": {"c": {"dataset_kwargs": {"source": "c"}, "metadata": {er.DATA_DIR_KEY: "/home/me/copies/"}}},
    "config": {"limit": None},
}


def _entry(**fields):
    from huggingface_hub import EvalResult

    return EvalResult(**{"task_type": "text-generation", "dataset_type": "org/data", "dataset_name": "t",
                         "dataset_config": "main", "dataset_split": "test", "metric_type": "nll",
                         "metric_value": 2.0, "source_name": "lm-eval", "source_url": er.LM_EVAL_URL, **fields})


def test_a_file_record_names_the_file_and_its_sha256(tmp_path):
    path = tmp_path / "deep" / "gsm8k.jsonl"
    path.parent.mkdir()
    path.write_bytes(b'{"question": "1+1"}\n' * 1000)
    assert er.file_record(path, ("openai/gsm8k", "main", "test")) == {
        "file": "gsm8k.jsonl", "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "copy_of": "openai/gsm8k",
        "config": "main", "split": "test"}


def test_provenance_of_a_group_is_over_its_leaf_tasks():
    prov = er.provenance(GROUP, "grp")
    assert prov == {"local": GROUP["data_sources"]["a"] + GROUP["data_sources"]["b"], "local_dirs": [], "limit": 4,
                    "documents": 9, "documents_in_task": 15, "subset": True}  # 4 + 5 of 10 + 5
    assert er.provenance(GROUP, "b")["subset"] is False  # 5 of 5, whatever the limit
    # a stock lm-eval run: only the folder of the local copies is known (its name, never the path)
    stock = er.provenance(GROUP, "c")
    assert (stock["local"], stock["local_dirs"], stock["documents"]) == ([], ["copies"], None)
    assert stock["subset"] is False  # no counts and no limit
    assert er.provenance({**GROUP, "config": {"limit": 0.5}}, "c")["subset"] is True  # no counts: a limit says so


def test_mark_files_a_local_copy_and_a_subset_and_describe_says_it():
    entry = er.mark(_entry(), er.provenance(GROUP, "grp"))
    assert (entry.dataset_type, entry.dataset_config, entry.dataset_split) == ("local:a.jsonl,b.csv", None, None)
    assert entry.dataset_args == {"copy_of": "org/data", "copy_of_config": "main", "copy_of_split": "test",
                                  "local_copy": "a.jsonl, b.csv", "sha256": "aa, bb", "limit": 4, "documents": 9,
                                  "documents_in_task": 15}
    assert entry.source_name == "lm-eval; local copy a.jsonl, b.csv; subset: 9 of 15 documents"
    assert er.describe(entry) == ("**local copy** `a.jsonl, b.csv` standing for org/data, main, test, not the Hub "
                                  "dataset itself; **subset**: 9 of 15 documents")
    plain = er.mark(_entry(), er.provenance({"results": {"t": {}}}, "t"))
    assert plain.dataset_args is None and plain.source_name == "lm-eval" and er.describe(plain) == \
        "org/data (main, test)"
    limited = er.mark(_entry(), er.provenance({"results": {"t": {}}, "config": {"limit": 3}}, "t"))
    assert er.describe(limited) == "org/data (main, test); **subset**: at most 3 documents (`--limit`)"


def test_marking_twice_is_marking_once():
    prov = er.provenance(GROUP, "grp")
    once, twice = er.mark(_entry(), prov), er.mark(er.mark(_entry(), prov), prov)
    assert vars(twice) == vars(once) and not once.dataset_args["copy_of"].startswith("local:")


def test_the_results_section_lists_lm_eval_entries_only_and_replaces_itself():
    held_out = _entry(metric_type="loss", source_url="https://arxiv.org/abs/2609.32534")
    assert er.section([held_out]) == ""
    full = _entry(metric_value=0.25)
    section = er.section([held_out, full])
    assert section.splitlines() == [er.SECTION_BEGIN, "## Evaluation results", "",
                                    "| task | metric | value | data |", "|---|---|---:|---|",
                                    "| t | nll | 0.2500 | org/data (main, test) |", er.SECTION_END]
    assert "Neither is the benchmark's result" in er.section([er.mark(_entry(), er.provenance(GROUP, "grp"))])
    card = "# Model\n\nHand-written text.\n"
    once = er.replace_section(card, section)
    assert once == card + "\n" + section + "\n"
    newer = er.section([_entry(metric_value=0.5)])
    twice = er.replace_section(once + "\nMore text.\n", newer)
    assert twice == card + "\n" + newer + "\n\nMore text.\n"
    assert er.replace_section(card, "") == card
