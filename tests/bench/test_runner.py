"""``depthbench.bench.runner``: one benchmark run's result rows and their ratios to both references. Oracles:
ratios computed here by hand from step times written by hand, and a run's figures recomputed from the raw times it
records (and its parameter counts from transformers' ``num_parameters``). The CLI plumbing over several shapes:
tests/bench/test_command.py.

    python -m pytest tests/bench/test_runner.py -q
"""

from __future__ import annotations

import statistics

import pytest

from depthbench.bench.runner import _add_ratios, run_benchmark
from depthbench.bench.settings import BenchSettings


def _row(model, steps, decode, mem, rss=None):
    return {"model": model, "train_step_s": steps, "train_step_s_median": statistics.median(steps),
            "train_step_s_min": min(steps), "decode_tokens_per_s": decode, "peak_mem_bytes": mem,
            "peak_rss_bytes": rss}


def test_ratios_to_both_references_by_hand():
    rows = [_row("pre_ln", [1.0, 2.0, 4.0], {"1": 10.0, "8": 40.0}, 100),
            _row("llama", [2.0, 2.0, 2.0], {"1": 20.0, "8": 0.0}, 50),
            _row("hc", [3.0, 2.0, 4.0], {"1": 5.0, "8": 20.0}, None)]
    _add_ratios(rows)
    hc = rows[2]
    assert hc["train_time_ratio_vs_pre_ln"] == 1.5  # medians 3 / 2
    assert hc["train_time_ratio_paired_vs_pre_ln"] == 1.0  # median of 3/1, 2/2, 4/4
    assert hc["train_time_ratio_min_vs_pre_ln"] == 2.0  # fastest steps 2 / 1
    assert hc["train_time_ratio_vs_llama"] == 1.5 and hc["train_time_ratio_paired_vs_llama"] == 1.5
    assert hc["decode_speed_ratio_vs_pre_ln"] == {"1": 0.5, "8": 0.5}
    assert hc["decode_speed_ratio_vs_llama"] == {"1": 0.25, "8": None}  # a zero reference gives no ratio
    assert hc["peak_mem_ratio_vs_pre_ln"] is None and rows[1]["peak_mem_ratio_vs_pre_ln"] == 0.5
    assert rows[0]["train_time_ratio_vs_pre_ln"] == 1.0 and rows[0]["peak_rss_ratio_vs_llama"] is None
    assert rows[0]["train_time_ratio_vs_llama"] == pytest.approx(1.0)  # medians 2 / 2


def test_a_run_reports_every_model_with_figures_of_its_own_times():
    from depthbench.bench.models import build_models

    settings = BenchSettings(shape="d64-L2", batch_size=1, seq_len=8, steps=2, warmup=0, decode_tokens=2,
                             decode_batch_sizes=[1], decode_repeats=1, memory=False, vocab_size=64, clock="cpu")
    rows = run_benchmark(["hc"], settings)
    assert [r["model"] for r in rows] == ["pre_ln", "llama", "hc"]
    built = build_models(["pre_ln", "llama", "hc"], settings)
    for row in rows:
        assert row["params"] == built[row["model"]].num_parameters()
        assert len(row["train_step_s"]) == 2 and row["train_step_s_median"] == pytest.approx(
            statistics.median(row["train_step_s"]), abs=1e-6)  # the recorded times are rounded to 1 us
        assert row["train_tokens_per_s"] == pytest.approx(8 / row["train_step_s_median"], rel=1e-3)
        assert row["peak_mem_method"] == "skipped (--no-memory)" and row["settings"]["shape"] == "d64-L2"
    assert rows[1]["kind"] == "transformers.LlamaForCausalLM" and rows[2]["kind"] == "depthbench.hc"
    assert rows[0]["first_loss"] == pytest.approx(rows[1]["first_loss"], abs=1e-5)  # the control computes pre_ln
