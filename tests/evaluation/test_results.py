"""``depthbench.evaluation.results``: token-weighted NLL groups, the merge into ``results.json``, the primary-metric
rows and the ``results.md`` table, on hand-written lm-eval result dicts (no model, no lm-eval run).

Run it with ``python -m pytest tests/evaluation/test_results.py -q``.
"""

from __future__ import annotations

import math

import pytest

from depthbench.evaluation.results import add_token_weighted_groups, merge_results, metric_rows, render_results_md


def test_token_weighted_groups_by_hand():
    results = {"results": {
        "a": {"nll,none": 2.0, "bits_per_byte,none": 1.0, "target_tokens,none": 10, "target_bytes,none": 30},
        "b": {"nll,none": 4.0, "bits_per_byte,none": 3.0, "target_tokens,none": 30, "target_bytes,none": 10},
        "c": {"acc,none": 0.5}},
        "group_subtasks": {"ab": ["a", "b"], "abc": ["a", "b", "c"], "outer": ["ab"]}}
    assert add_token_weighted_groups(results) == ["ab", "outer"]  # "abc" has a member without NLL metrics
    row = results["results"]["ab"]
    assert row["nll,none"] == pytest.approx((2.0 * 10 + 4.0 * 30) / 40)  # 3.5, not the task mean 3.0
    assert row["bits_per_byte,none"] == pytest.approx((1.0 * 30 + 3.0 * 10) / 40)
    assert row["ppl,none"] == pytest.approx(math.exp(3.5))
    assert results["results"]["outer"]["nll,none"] == row["nll,none"]
    assert results["groups"]["ab"] == row and "abc" not in results["results"]


def test_merge_keeps_old_tasks_and_takes_new_run_information():
    old = {"results": {"a": {"acc,none": 0.1}, "b": {"acc,none": 0.2}}, "limits": {"a": 4, "b": 4},
           "config": {"model": "m", "limit": 4, "batch_size": 8}, "date": 1.0}
    new = {"results": {"b": {"acc,none": 0.3}, "c": {"acc,none": 0.4}}, "limits": {"b": 2, "c": 2},
           "config": {"limit": 2}, "date": 2.0}
    merged = merge_results(old, new)
    assert merged["results"] == {"a": {"acc,none": 0.1}, "b": {"acc,none": 0.3}, "c": {"acc,none": 0.4}}
    assert merged["limits"] == {"a": 4, "b": 2, "c": 2}
    assert merged["config"] == {"limit": 2} and merged["date"] == 2.0  # run information is the new run's
    assert old["results"] == {"a": {"acc,none": 0.1}, "b": {"acc,none": 0.2}}  # the inputs are not changed
    assert merge_results(None, new) == new


def _nll(value: float, tokens: int) -> dict:
    return {"nll,none": value, "ppl,none": math.exp(value), "bits_per_byte,none": value / 2,
            "target_tokens,none": tokens, "target_bytes,none": 3 * tokens}


def test_metric_rows_and_results_md():
    results = {"results": {"depthbench_nll_coding": _nll(1.5, 1200), "depthbench_nll_mbpp": _nll(1.25, 1000),
                           "depthbench_nll": _nll(1.5, 1200),
                           "zz_task": {"acc,none": 0.5, "acc_stderr,none": 0.1, "acc_norm,none": 0.25,
                                       "exact_match,strict-match": 0.125, "alias": "zz"}},
               "group_subtasks": {"depthbench_nll": ["depthbench_nll_coding"],
                                  "depthbench_nll_coding": ["depthbench_nll_mbpp"]},
               "n-samples": {"zz_task": {"effective": 8}}, "lm_eval_version": "0.4.x", "config": {"limit": 8}}
    rows = metric_rows(results)
    assert rows[:3] == [("depthbench_nll_mbpp", "nll", 1.25), ("depthbench_nll_mbpp", "ppl", math.exp(1.25)),
                        ("depthbench_nll_mbpp", "bits_per_byte", 0.625)]  # tasks before groups
    assert ("zz_task", "exact_match (strict-match)", 0.125) in rows
    assert [r for r in rows if r[0] == "zz_task"][:2] == [("zz_task", "acc", 0.5), ("zz_task", "acc_norm", 0.25)]
    assert not any("stderr" in r[1] or "target_tokens" in r[1] for r in rows)
    assert [r[0] for r in rows][-6:] == ["depthbench_nll"] * 3 + ["depthbench_nll_coding"] * 3
    text = render_results_md(results, "my-model")
    assert text.startswith("# Evaluation of `my-model`\n\nlm-eval 0.4.x via `depthbench eval`; limit: 8.")
    assert "| Coding | 1.5000 | 4.482 | 0.7500 | 1,200 |" in text and "| all six | 1.5000 |" in text
    assert "| STEM |" not in text  # only the domains that were run
    assert "| zz_task | acc | 0.5000 | 8 |" in text and "| zz_task | exact_match (strict-match) | 0.1250 | 8 |" in text


def test_results_md_without_nll_groups_has_no_domain_table():
    text = render_results_md({"results": {"t": {"acc,none": 1.0}}}, "m")
    assert "by domain" not in text and "| t | acc | 1.0000 |  |" in text
