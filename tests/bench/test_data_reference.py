"""The bare ``tokenizers`` reference of the data benchmark (``depthbench.bench.data_reference``): it writes exactly the
tokens ``prepare_data`` writes (an independent pipeline: ``Tokenizer.encode_batch`` on tokenizer.json, no
transformers) for every format, ends every document in exactly one EOS, and its command prints its counts."""

from __future__ import annotations

import json

import numpy as np
from transformers import AutoTokenizer

from depthbench.bench.data_corpus import write_corpus
from depthbench.bench.data_reference import main, run
from depthbench.data import prepare_data
from tests.helpers import read_split


def test_reference_writes_prepare_datas_tokens_in_every_format(tmp_path):
    paths = write_corpus(str(tmp_path / "c"), megabytes=0.3, vocab_size=600)
    docs = [json.loads(line)["text"] for line in open(paths["jsonl"], encoding="utf-8")]
    for kind in ("jsonl", "parquet", "txt"):
        ref = run([paths[kind]], paths["tokenizer"], str(tmp_path / f"{kind}.bin"))
        meta = prepare_data([paths[kind]], paths["tokenizer"], str(tmp_path / kind), num_workers=2, progress=False)
        ours = read_split(tmp_path / kind)
        assert ref == {"documents": len(docs), "tokens": len(ours)}
        assert meta["splits"]["train"]["documents"] == len(docs)
        np.testing.assert_array_equal(np.fromfile(tmp_path / f"{kind}.bin", dtype="<u2"), ours)


def test_one_eos_per_document_against_transformers(tmp_path, capsys):
    paths = write_corpus(str(tmp_path / "c"), megabytes=0.01, vocab_size=400)
    tok = AutoTokenizer.from_pretrained(paths["tokenizer"])
    texts = ["Plain text here.", "Already ended" + tok.eos_token, "", "x"]
    (tmp_path / "d.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")  # the empty line is no document
    assert main([str(tmp_path / "d.txt"), "--tokenizer", paths["tokenizer"], "-o", str(tmp_path / "o.bin")]) == 0
    want = []
    for t in (t for t in texts if t):
        ids = tok(t)["input_ids"]
        want += ids if ids[-1] == tok.eos_token_id else ids + [tok.eos_token_id]
    assert np.fromfile(tmp_path / "o.bin", dtype="<u2").tolist() == want
    assert json.loads(capsys.readouterr().out) == {"documents": 3, "tokens": len(want)}
