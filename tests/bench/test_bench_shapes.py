"""``depthbench bench --shapes``: shape parsing, the speed grids, the across-shape summary, and a CLI smoke run.

The smoke runs measure nothing (one step of tiny models); they check the plumbing and the JSON lines.

    python -m pytest tests/bench/test_bench_shapes.py -q
"""

from __future__ import annotations

import json

import pytest

from depthbench import cli
from depthbench.bench import shapes as bench_shapes
from depthbench.bench import summary as bench_summary


def test_adhoc_and_named_shapes():
    shape = bench_shapes.parse_bench_shape("d384-L6-b8-s256")
    assert (shape.batch_size, shape.seq_len) == (8, 256)
    assert shape.fields == {"vocab_size": 8192, "hidden_size": 384, "intermediate_size": 1024,
                            "num_hidden_layers": 6, "num_attention_heads": 6, "num_key_value_heads": 6,
                            "head_dim": 64}  # the shape of the issue report: 6 heads of 64, f = 1024
    assert bench_shapes.parse_bench_shape("d256-L4", batch_size=2, seq_len=64).name == "d256-L4-b2-s64"
    named = bench_shapes.parse_bench_shape("bench-L8-s128", batch_size=4)
    assert named.name == "bench-L8-b4-s128" and named.fields["num_hidden_layers"] == 8
    for bad in ("d100-L4", "d384-L0", "x384", "bench-L3", "d384-L6-b0"):
        with pytest.raises(ValueError):
            bench_shapes.parse_bench_shape(bad)


def test_speed_grid_covers_the_target_range():
    shapes = bench_shapes.resolve_bench_shapes("speed")
    widths = {s.fields["hidden_size"] for s in shapes}
    depths = {s.fields["num_hidden_layers"] for s in shapes}
    assert min(widths) == 256 and max(widths) == 1024 and min(depths) == 4 and max(depths) == 16
    assert {s.batch_size for s in shapes} >= {1, 8} and {s.seq_len for s in shapes} >= {128, 1024}
    quick = bench_shapes.resolve_bench_shapes("speed", quick=True)
    assert [s.name for s in quick] == bench_shapes.BENCH_GRIDS["speed-quick"] and len(quick) < len(shapes)
    assert [s.name for s in bench_shapes.resolve_bench_shapes("bench", batch_size=2, seq_len=32)] == [
        f"bench-L{depth}-b2-s32" for depth in (4, 8, 12, 16)]
    with pytest.raises(ValueError, match="speed"):
        bench_shapes.resolve_bench_shapes(" , ")


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
    rows = {s["model"]: s for s in bench_summary.summarize(per_shape)}
    hc = rows["hc"]
    assert hc["train_time_ratio_vs_pre_ln_worst"] == 1.30 and hc["train_time_ratio_vs_pre_ln_median"] == 1.15
    assert hc["train_time_target"] == 1.20 and hc["train_time_target_met"] is False
    assert hc["decode_speed_ratio_vs_pre_ln_worst"] == {"1": 0.8} and hc["peak_mem_ratio_vs_pre_ln_worst"] == 1.2
    assert hc["compiled_ratio_vs_pre_ln_worst"] == pytest.approx(1.25) and hc["compile_speedup_median"] == 1.6
    llama = rows["llama"]  # the Llama row holds pre_ln's ratio to Llama
    assert llama["train_time_ratio_vs_pre_ln_worst"] == 1.02 and llama["train_time_target_met"] is True
    assert rows["pre_ln"]["train_time_target"] is None
    assert "hc" in bench_summary.format_summary(list(rows.values()))


def test_bench_shapes_cli_smoke(capsys, tmp_path):
    json_out = tmp_path / "bench.json"
    code = cli.main(["bench", "--arch", "hc", "--shapes", "d64-L2-b1-s16,d64-L3-b2-s8", "--steps", "1",
                     "--warmup", "0", "--decode-tokens", "2", "--decode-batch-sizes", "1", "--decode-repeats", "1",
                     "--threads", "1", "--no-memory", "--quiet", "--clock", "cpu", "--json-out", str(json_out)])
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    per_shape = [r for r in lines if not r.get("summary")]
    summaries = [r for r in lines if r.get("summary")]
    assert [(r["shape"], r["model"]) for r in per_shape] == [
        (shape, model) for shape in ("d64-L2-b1-s16", "d64-L3-b2-s8") for model in ("pre_ln", "llama", "hc")]
    assert [s["model"] for s in summaries] == ["pre_ln", "llama", "hc"]
    hc = summaries[-1]
    ratios = [r["train_time_ratio_paired_vs_pre_ln"] for r in per_shape if r["model"] == "hc"]
    assert hc["train_time_ratio_vs_pre_ln_worst"] == max(ratios) and hc["shapes"] == ["d64-L2-b1-s16", "d64-L3-b2-s8"]
    assert all(r["settings"]["clock"] == "cpu" for r in per_shape)
    saved = json.loads(json_out.read_text())
    assert saved["summary"] == summaries and len(saved["shapes"]) == 2
