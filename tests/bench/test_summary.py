"""``depthbench.bench.summary``: the across-shape summary (worst and median ratios, targets) and its table.

    python -m pytest tests/bench/test_summary.py -q
"""

from __future__ import annotations

import pytest

from depthbench.bench.summary import format_summary, summarize


def _result(model, shape, ratio, decode, mem, llama_ratio=1.0, compiled=None):
    r = {"model": model, "shape": shape, "train_time_ratio_paired_vs_pre_ln": ratio,
         "train_time_ratio_paired_vs_llama": llama_ratio, "decode_speed_ratio_vs_pre_ln": decode,
         "peak_mem_ratio_vs_pre_ln": mem}
    if compiled is not None:
        r["compiled"] = {"train_time_ratio_paired_vs_pre_ln": compiled[0], "speedup_vs_eager": compiled[1]}
    return r


def test_summary_reports_worst_and_median_over_shapes():
    per_shape = []
    for shape, hc, pre_vs_llama in (("a", 1.10, 1.01), ("b", 1.30, 1.02), ("c", 1.15, 1.00)):
        per_shape.append([
            _result("pre_ln", shape, 1.0, {"1": 1.0}, 1.0, llama_ratio=pre_vs_llama, compiled=(1.0, 1.5)),
            _result("llama", shape, 1 / pre_vs_llama, {"1": 1.1}, 0.98, compiled=(0.99, 1.4)),
            _result("hc", shape, hc, {"1": 0.8 if shape == "b" else 0.9}, 1.2, compiled=(hc - 0.05, 1.6)),
        ])
    rows = {s["model"]: s for s in summarize(per_shape)}
    hc = rows["hc"]
    assert hc["train_time_ratio_vs_pre_ln_worst"] == 1.30 and hc["train_time_ratio_vs_pre_ln_median"] == 1.15
    assert hc["train_time_target"] == 1.20 and hc["train_time_target_met"] is False
    assert hc["decode_speed_ratio_vs_pre_ln_worst"] == {"1": 0.8} and hc["peak_mem_ratio_vs_pre_ln_worst"] == 1.2
    assert hc["compiled_ratio_vs_pre_ln_worst"] == pytest.approx(1.25) and hc["compile_speedup_median"] == 1.6
    llama = rows["llama"]  # the Llama row holds pre_ln's ratio to Llama
    assert llama["train_time_ratio_vs_pre_ln_worst"] == 1.02 and llama["train_time_target_met"] is True
    assert rows["pre_ln"]["train_time_target"] is None
    assert "hc" in format_summary(list(rows.values()))
