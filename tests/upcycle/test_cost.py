"""``python -m depthbench.upcycle.cost``: the upcycle's wall, CPU and peak memory beside a baseline measured in the
same run (transformers loading the same source), each in a fresh process.

The figures themselves are the benchmark's (docs/upcycling.md); this checks on a tiny saved Llama that both
processes run, the ratios are the quotients of the figures they report, and the peak is set against the fp32 size
computed from the model's own parameters.

Run: ``python -m pytest tests/upcycle/test_cost.py -q --runslow``
"""

from __future__ import annotations

import json

import pytest

from tests.upcycle import tiny_sources


@pytest.mark.slow  # two fresh interpreters importing torch and transformers
def test_cost_reports_both_processes_and_their_ratios(tmp_path, capsys):
    from depthbench.upcycle.cost import main

    source = tmp_path / "llama"
    model = tiny_sources.llama()
    model.save_pretrained(source)
    fp32_bytes = sum(p.numel() * 4 for p in {id(p): p for p in model.parameters()}.values())
    out = tmp_path / "cost.json"
    assert main([str(source), "--arch", "hc", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    base, up = report["baseline"], report["upcycle"]
    assert base["fp32_model_bytes"] == fp32_bytes
    assert up["deviation"] == 0.0  # hc's start is exact
    assert report["wall_ratio"] == pytest.approx(up["process_wall_s"] / base["process_wall_s"])
    assert report["cpu_ratio"] == pytest.approx(up["cpu_s"] / base["cpu_s"])
    assert report["peak_over_fp32_size"] == pytest.approx(up["peak_rss_bytes"] / fp32_bytes)
    assert all(f["cpu_s"] > 0 and f["peak_rss_bytes"] > fp32_bytes for f in (base, up))
    printed = capsys.readouterr().out
    assert "upcycle / baseline:" in printed and "peak < 3x" in printed
