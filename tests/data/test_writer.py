"""Shards as ``prepare_data`` writes them (``depthbench.data.writer``): the token dtype, shard sizes and document
boundaries, the content hash, and resuming from completed shards."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

import depthbench.data.encode as encode_mod
import depthbench.data.writer as writer_mod
from depthbench.data import TokenShards, prepare_data, token_dtype
from tests.helpers import BigVocabTokenizer, pydoc_paragraphs, read_split, write_jsonl


def test_dtype_uint16_vs_uint32(tmp_path, tok):
    src = write_jsonl(tmp_path / "d.jsonl", ["abc", "xyz!"])
    small = prepare_data([src], tok, str(tmp_path / "small"), progress=False)
    big = prepare_data([src], BigVocabTokenizer(), str(tmp_path / "big"), progress=False)
    assert small["dtype"] == "uint16" and big["dtype"] == "uint32"
    assert token_dtype(65_536) == np.uint16 and token_dtype(65_537) == np.uint32
    shard = big["splits"]["train"]["shards"][0]
    assert os.path.getsize(tmp_path / "big" / shard["file"]) == 4 * shard["tokens"] == 4 * 9
    expected = [65_000 + ord(c) for c in "abc"] + [70_000] + [65_000 + ord(c) for c in "xyz!"] + [70_000]
    assert read_split(tmp_path / "big").tolist() == expected
    assert TokenShards(tmp_path / "big").dtype == np.dtype("<u4")


def test_meta_counts_match_shard_files_and_boundaries(tmp_path, tok):
    texts = pydoc_paragraphs(400)
    src = write_jsonl(tmp_path / "d.jsonl", texts)
    out = tmp_path / "out"
    meta = prepare_data([src], tok, str(out), shard_tokens=3000, progress=False)
    train = meta["splits"]["train"]
    assert len(train["shards"]) > 3
    assert train["tokens"] == sum(s["tokens"] for s in train["shards"])
    assert train["documents"] == sum(s["documents"] for s in train["shards"]) == len(texts)
    parts = []
    for shard in train["shards"]:
        path = out / shard["file"]
        assert os.path.getsize(path) == 2 * shard["tokens"]
        arr = np.fromfile(path, dtype="<u2")
        assert arr[-1] == tok.eos_token_id  # documents never straddle shards
        assert (arr == tok.eos_token_id).sum() == shard["documents"]
        parts.append(arr)
    full = np.concatenate(parts)
    shards = TokenShards(out)
    assert shards.num_tokens == len(full) == train["tokens"]
    # reads that cross shard boundaries
    b = train["shards"][0]["tokens"]
    np.testing.assert_array_equal(shards.read(b - 7, 20), full[b - 7 : b + 13])
    np.testing.assert_array_equal(shards.read(0, len(full)), full)
    assert shards.read(5, 0).size == 0
    with pytest.raises(IndexError):
        shards.read(len(full) - 3, 4)
    # the content hash is the sha256 over per-shard digests
    import hashlib

    h = hashlib.sha256()
    for shard in train["shards"]:
        h.update(hashlib.sha256((out / shard["file"]).read_bytes()).digest())
    assert meta["content_hash"] == h.hexdigest()
    # pickling drops memmaps (cheap to send to DataLoader workers) and still works
    shards.read(0, 1)
    clone = pickle.loads(pickle.dumps(shards))
    assert len(pickle.dumps(shards)) < 10_000
    np.testing.assert_array_equal(clone.read(100, 50), full[100:150])


def test_rerun_skips_completed_shards(tmp_path, tok, monkeypatch):
    texts = pydoc_paragraphs(300)
    src = write_jsonl(tmp_path / "d.jsonl", texts)
    out = tmp_path / "out"
    meta = prepare_data([src], tok, str(out), shard_tokens=4000, eval_fraction=0.2, progress=False)
    files = [out / s["file"] for split in meta["splits"].values() for s in split["shards"]]
    assert len(files) >= 4
    mtimes = {f: f.stat().st_mtime_ns for f in files}

    encoded: list[int] = []
    real_encode = encode_mod.encode_documents

    def counting(tokenizer, texts, *args):
        encoded.append(len(texts))
        return real_encode(tokenizer, texts, *args)

    monkeypatch.setattr(encode_mod, "encode_documents", counting)
    # complete re-run: nothing is tokenized or rewritten
    again = prepare_data([src], tok, str(out), shard_tokens=4000, eval_fraction=0.2, progress=False)
    assert again["content_hash"] == meta["content_hash"] and encoded == []
    assert {f: f.stat().st_mtime_ns for f in files} == mtimes

    # interrupted run: meta.json and the last train shard are gone -> only the missing part is redone
    os.remove(out / "meta.json")
    last = out / meta["splits"]["train"]["shards"][-1]["file"]
    os.remove(last)
    resumed = prepare_data([src], tok, str(out), shard_tokens=4000, eval_fraction=0.2, progress=False)
    assert resumed["content_hash"] == meta["content_hash"]
    assert resumed["splits"] == meta["splits"]
    assert 0 < sum(encoded) < len(texts) / 2
    for f in files:
        if f != last:
            assert f.stat().st_mtime_ns == mtimes[f], f"{f} was rewritten"
    assert last.exists()

    # a different configuration rebuilds (and removes stale shards)
    other = prepare_data([src], tok, str(out), shard_tokens=10**6, progress=False)
    assert len(other["splits"]["train"]["shards"]) == 1
    assert sorted(os.listdir(out / "train")) == ["shard_00000.bin", "shard_00000.done.json"]


def test_damaged_records_of_an_earlier_run_are_rewritten(tmp_path, tok, monkeypatch):
    """A damaged ``meta.json`` or ``.done.json`` is not refused: its shard is written again (the ones before it are
    kept) and the result equals the first run's."""
    src = write_jsonl(tmp_path / "d.jsonl", pydoc_paragraphs(200))
    out = tmp_path / "out"
    meta = prepare_data([src], tok, str(out), shard_tokens=4000, progress=False)
    files = [str(out / s["file"]) for s in meta["splits"]["train"]["shards"]]
    assert len(files) >= 3
    (out / "meta.json").write_text('{"config_fingerprint": ')
    (out / "train" / "shard_00001.done.json").write_bytes(b"\xff\xfe not json")
    written: list[str] = []
    real_commit = writer_mod.ShardFile.commit

    def recording(self):
        written.append(self.path)
        return real_commit(self)

    monkeypatch.setattr(writer_mod.ShardFile, "commit", recording)
    again = prepare_data([src], tok, str(out), shard_tokens=4000, progress=False)
    assert again["content_hash"] == meta["content_hash"] and again["splits"] == meta["splits"]
    assert [p for p in written if p.endswith(".bin")] == files[1:]  # from the damaged record on
