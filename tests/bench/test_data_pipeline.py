"""The data-pipeline benchmark (``depthbench bench --make-corpus`` / ``--data``): a CLI smoke run prints one JSON line
per measurement with equal token counts (it measures nothing: a tiny corpus, one repeat); the run order and the
paired ratios, on scripted run times against ratios worked out by hand. The corpus and the bare reference have their
own files (``test_data_corpus.py``, ``test_data_reference.py``)."""

from __future__ import annotations

import json

import pytest

from depthbench import cli
from depthbench.bench import data_pipeline


def test_bench_data_cli_smoke(tmp_path, capsys):
    assert cli.main(["bench", "--make-corpus", str(tmp_path / "c"), "--corpus-mb", "0.1"]) == 0
    capsys.readouterr()
    code = cli.main(["bench", "--data", str(tmp_path / "c" / "corpus.jsonl"), "--tokenizer", str(tmp_path / "c" /
                     "tokenizer"), "--num-workers", "2", "--data-repeats", "1", "--quiet",
                     "--json-out", str(tmp_path / "b.json")])
    assert code == 0
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["workers"] for r in rows] == [2] and "worst wall ratio at 2 worker(s)" in out
    assert all(r["tokens"] > 0 and r["wall_ratio"] > 0 and r["ours_peak_rss_bytes"] > 0 for r in rows)
    assert rows[0]["ours_scaling"] == rows[0]["reference_scaling"] == 1.0  # one worker count: its own baseline
    assert json.loads((tmp_path / "b.json").read_text()) == rows
    assert cli.main(["bench", "--data", str(tmp_path / "nothing.jsonl"), "--tokenizer", "x"]) == 2


def test_each_repeat_runs_every_worker_count_and_pipeline_back_to_back_in_alternating_order():
    assert data_pipeline.schedule([1, 2], 0) == [(1, "prepare-data"), (1, "tokenizers"), (2, "prepare-data"),
                                                 (2, "tokenizers")]
    assert data_pipeline.schedule([1, 2], 1) == [(2, "tokenizers"), (2, "prepare-data"), (1, "tokenizers"),
                                                 (1, "prepare-data")]


def test_ratios_and_scaling_pair_runs_of_the_same_repeat(monkeypatch):
    # the machine slows down as the benchmark goes: run k of the file takes (k // 4 + 1) times its time, so each
    # repeat (4 runs) is slower than the one before. Ratios of runs of one repeat cancel that; ratios of medians
    # over repeats run at different times (all of one worker count, then all of the next) would not
    seconds = {("prepare-data", 1): 8.0, ("prepare-data", 2): 4.0, ("tokenizers", 1): 10.0, ("tokenizers", 2): 6.0}
    calls = []

    def fake_one(pipeline, path, tokenizer, workers, work):
        k = sum(1 for c in calls if c[2] == path)  # runs of this file so far
        calls.append((pipeline, workers, path))
        return {"wall_s": seconds[pipeline, workers] * (k // 4 + 1), "cpu_s": 1.0, "peak_rss_bytes": 1, "tokens": 7}

    monkeypatch.setattr(data_pipeline, "_one", fake_one)
    rows = data_pipeline.measure(["a.jsonl"], "tok", [2, 1, 2], repeats=3, progress=lambda s: None)
    assert [r["workers"] for r in rows] == [1, 2]  # sorted, each count once
    assert len(calls) == 1 + 3 * 4  # the warm-up, then 3 repeats of 4 runs
    one, two = rows
    assert one["wall_ratio"] == pytest.approx(8 / 10) and two["wall_ratio"] == pytest.approx(4 / 6)
    assert one["ours_scaling"] == one["reference_scaling"] == 1.0
    assert two["ours_scaling"] == pytest.approx(2.0) and two["reference_scaling"] == pytest.approx(10 / 6)
