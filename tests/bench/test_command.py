"""``depthbench bench --shapes``: a CLI smoke run over two shapes (per-shape JSON lines, the summary lines and
``--json-out``). It measures nothing (one step of tiny models); it checks the plumbing and the JSON lines.

    python -m pytest tests/bench/test_command.py -q
"""

from __future__ import annotations

import json

from depthbench import cli


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
