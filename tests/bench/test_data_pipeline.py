"""The data-pipeline benchmark (``depthbench bench --make-corpus`` / ``--data``): a CLI smoke run prints one JSON line
per measurement with equal token counts. It measures nothing (a tiny corpus, one repeat). The corpus and the bare
reference have their own files (``test_data_corpus.py``, ``test_data_reference.py``)."""

from __future__ import annotations

import json

from depthbench import cli


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
