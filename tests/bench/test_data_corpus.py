"""The data benchmark's corpus (``depthbench.bench.data_corpus``): seeded, about the size asked for, the same
documents in every format (read back by json, pyarrow and plain lines), sentences of the standard library's
``pydoc_data`` words, and a tokenizer of the asked vocabulary trained on it."""

from __future__ import annotations

import json
import re
from pydoc_data.topics import topics

import pyarrow.parquet as pq
from tokenizers import Tokenizer

from depthbench.bench.data_corpus import make_documents, write_corpus


def test_documents_are_seeded_about_the_size_asked_and_made_of_pydoc_words():
    docs = make_documents(0.05, seed=1)
    assert docs == make_documents(0.05, seed=1) and docs != make_documents(0.05, seed=2)
    size = sum(len(d.encode("utf-8")) + 1 for d in docs)
    assert 50_000 <= size < 50_000 + max(len(d) + 1 for d in docs)  # stops at the first document past the target
    vocabulary = {w.lower() for t in topics.values() for w in re.findall(r"[A-Za-z][A-Za-z'-]*", t)}
    words = {w.lower() for d in docs for w in re.findall(r"[A-Za-z][A-Za-z'-]*", d)} - {"and"}
    assert words <= vocabulary and len(words) > 500
    assert all(d[0].isupper() and d == d.strip() and "\n" not in d for d in docs)
    sentences = [s for d in docs for s in re.split(r"[.?!] ", d + " ") if s.strip()]
    assert max(len(s.replace(", and", "").split()) for s in sentences) <= 30 * 8  # 4-30 words, ", and" joins a few


def test_every_format_holds_the_same_documents_and_the_tokenizer_its_vocabulary(tmp_path):
    paths = write_corpus(str(tmp_path / "c"), megabytes=0.05, vocab_size=600)
    docs = make_documents(0.05)
    assert [json.loads(line)["text"] for line in open(paths["jsonl"], encoding="utf-8")] == docs
    assert [json.loads(line)["id"] for line in open(paths["jsonl"], encoding="utf-8")] == list(range(len(docs)))
    assert pq.read_table(paths["parquet"]).column("text").to_pylist() == docs
    assert open(paths["txt"], encoding="utf-8").read().splitlines() == docs
    tok = Tokenizer.from_file(f"{paths['tokenizer']}/tokenizer.json")
    assert tok.get_vocab_size(with_added_tokens=True) == 600
    assert not list(tmp_path.glob("c/*.tmp*"))  # written atomically: no temporary left
