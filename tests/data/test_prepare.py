"""The ``prepare_data`` pipeline (``depthbench.data.prepare``): one EOS per document, splits by file and by content
hash, extra splits, the tokenizer's EOS, and identical output with worker processes."""

from __future__ import annotations

import json
import os

import pytest

import depthbench.data.encode as encode_mod
import depthbench.data.prepare as prepare_mod
from depthbench.data import FORMAT_VERSION, TokenShards, prepare_data
from tests.helpers import (
    BigVocabTokenizer,
    expected_ids,
    pydoc_paragraphs,
    read_split,
    split_documents,
    write_jsonl,
)


def test_jsonl_documents_end_in_exactly_one_eos(tmp_path, tok):
    texts = pydoc_paragraphs(120) + ["ends with eos already<|endoftext|>", "   ", ""]
    src = write_jsonl(tmp_path / "docs.jsonl", texts)
    out = tmp_path / "out"
    meta = prepare_data([src], tok, str(out), progress=False)

    real = [t for t in texts if t.strip()]
    docs = split_documents(read_split(out), tok.eos_token_id)
    assert len(docs) == len(real) == meta["splits"]["train"]["documents"]
    for doc, text in zip(docs, real):
        assert doc == expected_ids(tok, text)
        assert doc[-1] == tok.eos_token_id and doc.count(tok.eos_token_id) == 1
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == len(tok) == 512
    assert meta["eos_token_id"] == tok.eos_token_id and meta["pad_token_id"] == tok.pad_token_id
    assert meta["format_version"] == FORMAT_VERSION
    assert "eval" not in meta["splits"]
    assert os.path.exists(out / "tokenizer" / "tokenizer.json")
    with open(out / "meta.json") as f:
        assert json.load(f)["content_hash"] == meta["content_hash"]


class _EosAppendingTokenizer:
    """Wraps a tokenizer so that its ``__call__`` already appends EOS (like a post-processor would)."""

    def __init__(self, inner):
        self.inner = inner
        self.eos_token_id = inner.eos_token_id
        self.pad_token_id = inner.pad_token_id
        self.bos_token_id = None
        self.name_or_path = "eos-appending"
        self.backend_tokenizer = inner.backend_tokenizer

    def __len__(self):
        return len(self.inner)

    def __call__(self, texts, add_special_tokens=True):
        ids = self.inner(texts, add_special_tokens=add_special_tokens)["input_ids"]
        return {"input_ids": [x + [self.eos_token_id] for x in ids]}

    def save_pretrained(self, path):
        self.inner.save_pretrained(path)


def test_existing_eos_is_not_duplicated(tmp_path, tok):
    texts = pydoc_paragraphs(30)
    src = write_jsonl(tmp_path / "d.jsonl", texts)
    prepare_data([src], _EosAppendingTokenizer(tok), str(tmp_path / "out"), progress=False)
    docs = split_documents(read_split(tmp_path / "out"), tok.eos_token_id)
    assert len(docs) == len(texts)
    assert all(d.count(tok.eos_token_id) == 1 and d[-1] == tok.eos_token_id for d in docs)


def test_eval_fraction_split_is_deterministic_by_content(tmp_path, tok):
    texts = pydoc_paragraphs(200)
    src = write_jsonl(tmp_path / "d.jsonl", texts)
    a = prepare_data([src], tok, str(tmp_path / "a"), eval_fraction=0.25, progress=False)
    # the same documents in another order: same per-document split decision
    src2 = write_jsonl(tmp_path / "rev.jsonl", texts[::-1])
    b = prepare_data([src2], tok, str(tmp_path / "b"), eval_fraction=0.25, progress=False)
    n_eval = a["splits"]["eval"]["documents"]
    assert 20 < n_eval < 80
    assert n_eval + a["splits"]["train"]["documents"] == len(texts)
    assert b["splits"]["eval"]["documents"] == n_eval
    ev_a = split_documents(read_split(tmp_path / "a", "eval"), tok.eos_token_id)
    ev_b = split_documents(read_split(tmp_path / "b", "eval"), tok.eos_token_id)
    assert sorted(map(tuple, ev_a)) == sorted(map(tuple, ev_b))
    held = [t for t in texts if prepare_mod._doc_hash_fraction(t) < 0.25]
    assert ev_a == [expected_ids(tok, t) for t in held]
    c = prepare_data([src], tok, str(tmp_path / "c"), eval_fraction=0.25, progress=False)
    assert c["content_hash"] == a["content_hash"]


def test_extra_splits(tmp_path, tok):
    a = write_jsonl(tmp_path / "a.jsonl", pydoc_paragraphs(20))
    b = write_jsonl(tmp_path / "b.jsonl", ["extra doc one", "extra doc two"])
    meta = prepare_data([a], tok, str(tmp_path / "o"), extra_splits={"held_x": [b]}, progress=False)
    assert set(meta["splits"]) == {"train", "held_x"}
    shards = TokenShards(tmp_path / "o", split="held_x")
    assert shards.num_documents == 2
    decoded = tok.decode(shards.read(0, shards.num_tokens).tolist())
    assert decoded == "extra doc one<|endoftext|>extra doc two<|endoftext|>"
    with pytest.raises(KeyError, match="held_x"):
        TokenShards(tmp_path / "o", split="nope")
    with pytest.raises(ValueError, match="invalid extra split"):
        prepare_data([a], tok, str(tmp_path / "o2"), extra_splits={"train": [b]}, progress=False)


def test_tokenizer_without_eos_raises(tmp_path, tok):
    src = write_jsonl(tmp_path / "d.jsonl", ["hello"])
    no_eos = BigVocabTokenizer()
    no_eos.eos_token_id = None
    with pytest.raises(ValueError, match="no eos_token"):
        prepare_data([src], no_eos, str(tmp_path / "o"), progress=False)


@pytest.mark.parametrize("workers", [2, encode_mod.THREADS_UP_TO + 1])  # threads, then a process pool
def test_num_workers_gives_identical_output(tmp_path, tok, workers):
    texts = pydoc_paragraphs(2500)
    src = write_jsonl(tmp_path / "d.jsonl", texts)
    one = prepare_data([src], tok, str(tmp_path / "one"), shard_tokens=20_000, eval_fraction=0.1, num_workers=1,
                       progress=False)
    many = prepare_data(
        [src], tok, str(tmp_path / "many"), shard_tokens=20_000, eval_fraction=0.1, num_workers=workers,
        progress=False,
    )
    assert one["content_hash"] == many["content_hash"]
    assert one["splits"] == many["splits"]


@pytest.mark.slow
def test_num_workers_spawn_start_method(tmp_path, tok, monkeypatch):
    """The spawn path (non-Linux) reloads the saved tokenizer in each worker process; slow (workers import
    depthbench)."""
    monkeypatch.setattr(encode_mod.multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    src = write_jsonl(tmp_path / "d.jsonl", pydoc_paragraphs(3000))
    one = prepare_data([src], tok, str(tmp_path / "one"), shard_tokens=20_000, num_workers=1, progress=False)
    two = prepare_data([src], tok, str(tmp_path / "two"), shard_tokens=20_000,
                       num_workers=encode_mod.THREADS_UP_TO + 1, progress=False)
    assert one["content_hash"] == two["content_hash"]
