"""``depthbench.analysis.common``: the late-pair threshold, the position check, the context's micro-batches and
settings, and the result files read back with the standard library (``json``, ``csv``), not through our code.

Run with ``python -m pytest tests/analysis/test_common.py -q``.
"""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch

from depthbench.analysis.common import MetricResult, late_start, write_result
from tests.analysis.helpers import SHAPE, WINDOWS, build, ctx_for


@pytest.mark.parametrize(("layers", "start"), [(4, 1), (7, 1), (8, 2), (24, 6), (3, 0)])
def test_late_start_is_the_first_block_of_the_last_three_quarters(layers, start):
    assert late_start(layers) == start == math.floor(layers / 4)


def test_micro_batches_cover_the_windows_in_order():
    ctx = ctx_for(build("pre_ln"), windows=WINDOWS[:3])  # micro-batch size 2: a full batch and a rest of one
    batches = list(ctx.batches())
    assert [b.shape[0] for b in batches] == [2, 1] and ctx.num_batches == 2
    assert all(b.dtype == torch.int64 for b in batches)
    np.testing.assert_array_equal(torch.cat(batches).numpy(), WINDOWS[:3])
    assert ctx.count_batches(WINDOWS) == 2 and ctx.count_batches(WINDOWS[:1]) == 1


def test_settings_describe_the_model_and_the_run():
    settings = ctx_for(build("hc"), batched=False, model_id="some/model").settings()
    assert settings["model"] == "some/model" and settings["model_type"] == "depthbench_hc"
    assert settings["num_layers"] == SHAPE["num_hidden_layers"]
    assert settings["batched_interventions"] is False and settings["micro_batch_size"] == 2
    assert (settings["device"], settings["precision"]) == ("cpu", "fp32")


def test_windows_longer_than_the_positions_are_refused_by_the_context():
    long = np.zeros((1, SHAPE["max_position_embeddings"] + 1), dtype=np.int64)
    with pytest.raises(ValueError, match="max_position_embeddings=64"):
        ctx_for(build("pre_ln"), windows=long)


def test_write_result_writes_json_csv_and_png(tmp_path):
    plotted = []
    result = MetricResult("demo", {"matrix": np.array([[1.0, np.nan]])},
                          rows=[{"layer": 0, "score": np.float64(0.5)}, {"layer": 1, "extra": "y"}],
                          settings={"model": "m"}, seconds=1.23456)

    def plot(res, path):
        plotted.append(res)
        open(path, "wb").close()
        return True

    paths = write_result(result, str(tmp_path / "out"), plot)
    assert plotted == [result]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["demo.csv", "demo.json", "demo.png"]
    assert {k: v.rsplit("/", 1)[-1] for k, v in paths.items()} == {"csv": "demo.csv", "png": "demo.png",
                                                                  "json": "demo.json"}
    payload = json.loads((tmp_path / "out" / "demo.json").read_text())
    assert payload == {"metric": "demo", "settings": {"model": "m"}, "seconds": 1.235,
                       "values": {"matrix": [[1.0, None]]},
                       "files": {"csv": "demo.csv", "png": "demo.png"}}
    with open(tmp_path / "out" / "demo.csv", newline="") as f:  # the union of the rows' keys, in order of appearance
        assert list(csv.DictReader(f)) == [{"layer": "0", "score": "0.5", "extra": ""},
                                           {"layer": "1", "score": "", "extra": "y"}]


def test_write_result_without_rows_or_plot_writes_the_json_alone(tmp_path):
    write_result(MetricResult("lone", {"x": 1}), str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["lone.json"]  # no .tmp left behind either


def test_progress_in_a_log_file_is_plain_lines(capsys):
    """Where stderr is not a terminal (a run's console.log, a redirected demo), the analyses' bars are lines a text
    editor reads: no carriage-return frames (``depthbench.progress``)."""
    ctx = ctx_for(build("pre_ln"))
    ctx.progress = True
    assert list(ctx.bar(range(20), desc="causal", total=20)) == list(range(20))
    err = capsys.readouterr().err
    assert "\r" not in err and "causal: 100%" in err and len(err.splitlines()) <= 12
