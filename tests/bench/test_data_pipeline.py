"""The data-pipeline benchmark (``depthbench bench --make-corpus`` / ``--data``): the corpus is the same documents in
every format, the bare ``tokenizers`` reference writes exactly the tokens ``prepare_data`` writes (an independent
pipeline: ``Tokenizer.encode_batch`` on tokenizer.json, no transformers), and a CLI smoke run prints one JSON line per
measurement with equal token counts. It measures nothing (a tiny corpus, one repeat)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq

from depthbench import cli
from depthbench.bench.data_corpus import make_documents, write_corpus
from depthbench.bench.data_reference import run as run_reference
from depthbench.data import prepare_data
from tests.helpers import read_split


def test_corpus_and_reference_match_prepare_data(tmp_path):
    assert make_documents(0.05, seed=1) == make_documents(0.05, seed=1)
    paths = write_corpus(str(tmp_path / "c"), megabytes=0.3, vocab_size=600)
    docs = [json.loads(line)["text"] for line in open(paths["jsonl"], encoding="utf-8")]
    assert pq.read_table(paths["parquet"]).column("text").to_pylist() == docs
    assert open(paths["txt"], encoding="utf-8").read().splitlines() == docs
    for kind in ("jsonl", "parquet", "txt"):
        ref = run_reference([paths[kind]], paths["tokenizer"], str(tmp_path / f"{kind}.bin"))
        meta = prepare_data([paths[kind]], paths["tokenizer"], str(tmp_path / kind), num_workers=2, progress=False)
        ours = read_split(tmp_path / kind)
        assert ref == {"documents": len(docs), "tokens": len(ours)}
        assert meta["splits"]["train"]["documents"] == len(docs)
        np.testing.assert_array_equal(np.fromfile(tmp_path / f"{kind}.bin", dtype="<u2"), ours)


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
