"""Tests of the data pipeline (``depthbench.data``): shard preparation, reading, windows and the batch loader."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import depthbench.data.prepare as prepare_mod
from depthbench.data import (
    FORMAT_VERSION,
    TokenShards,
    TokenWindows,
    WindowLoader,
    make_tiny_tokenizer,
    prepare_data,
    token_dtype,
)


def _pydoc_texts() -> list[str]:
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def _paragraphs(n: int | None = None) -> list[str]:
    paras = [p.strip() for t in _pydoc_texts() for p in t.split("\n\n") if p.strip()]
    return paras[:n] if n is not None else paras


@pytest.fixture(scope="module")
def tok():
    return make_tiny_tokenizer(_pydoc_texts(), vocab_size=512)


def _write_jsonl(path, texts, field="text"):
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({field: t, "id": len(t)}) + "\n")
    return str(path)


def _stream(data_dir, split="train") -> np.ndarray:
    shards = TokenShards(data_dir, split)
    return shards.read(0, shards.num_tokens)


def _split_docs(stream: np.ndarray, eos: int) -> list[list[int]]:
    ends = np.flatnonzero(stream == eos)
    docs, start = [], 0
    for e in ends:
        docs.append(stream[start : e + 1].tolist())
        start = e + 1
    assert start == len(stream), "stream must end with EOS"
    return docs


def _expected_ids(tok, text: str) -> list[int]:
    ids = tok(text, add_special_tokens=True)["input_ids"]
    return ids if ids and ids[-1] == tok.eos_token_id else ids + [tok.eos_token_id]


# ------------------------------------------------------------------------------------------------ tokenizer


def test_make_tiny_tokenizer_deterministic_and_reloadable(tmp_path, tok):
    other = make_tiny_tokenizer(_pydoc_texts(), vocab_size=512, save_dir=str(tmp_path / "tok"))
    assert other.backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()
    assert len(tok) == 512
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token == "<|pad|>"
    assert tok.eos_token_id != tok.pad_token_id
    from transformers import AutoTokenizer

    again = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    text = "def f(x):\n    return x ** 2  # héllo"
    assert again("x = 1")["input_ids"] == tok("x = 1")["input_ids"]
    assert tok.decode(tok(text)["input_ids"]) == text
    with pytest.raises(ValueError, match="vocab_size"):
        make_tiny_tokenizer(["abc"], vocab_size=100)


# ------------------------------------------------------------------------------------------------ prepare_data


def test_jsonl_documents_end_in_exactly_one_eos(tmp_path, tok):
    texts = _paragraphs(120) + ["ends with eos already<|endoftext|>", "   ", ""]
    src = _write_jsonl(tmp_path / "docs.jsonl", texts)
    out = tmp_path / "out"
    meta = prepare_data([src], tok, str(out), progress=False)

    real = [t for t in texts if t.strip()]
    docs = _split_docs(_stream(out), tok.eos_token_id)
    assert len(docs) == len(real) == meta["splits"]["train"]["documents"]
    for doc, text in zip(docs, real):
        assert doc == _expected_ids(tok, text)
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
    texts = _paragraphs(30)
    src = _write_jsonl(tmp_path / "d.jsonl", texts)
    prepare_data([src], _EosAppendingTokenizer(tok), str(tmp_path / "out"), progress=False)
    docs = _split_docs(_stream(tmp_path / "out"), tok.eos_token_id)
    assert len(docs) == len(texts)
    assert all(d.count(tok.eos_token_id) == 1 and d[-1] == tok.eos_token_id for d in docs)


class _BigVocabTokenizer:
    """Character-level fake tokenizer with a > 65536 vocabulary (ids above the uint16 range)."""

    name_or_path = "big-vocab"
    eos_token_id = 70_000
    pad_token_id = 70_001
    bos_token_id = None

    def __len__(self):
        return 70_002

    def __call__(self, texts, add_special_tokens=True):
        return {"input_ids": [[65_000 + ord(c) for c in t] for t in texts]}

    def get_vocab(self):
        return {"<big>": 0}

    def save_pretrained(self, path):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "fake.json"), "w") as f:
            f.write("{}")


def test_dtype_uint16_vs_uint32(tmp_path, tok):
    src = _write_jsonl(tmp_path / "d.jsonl", ["abc", "xyz!"])
    small = prepare_data([src], tok, str(tmp_path / "small"), progress=False)
    big = prepare_data([src], _BigVocabTokenizer(), str(tmp_path / "big"), progress=False)
    assert small["dtype"] == "uint16" and big["dtype"] == "uint32"
    assert token_dtype(65_536) == np.uint16 and token_dtype(65_537) == np.uint32
    shard = big["splits"]["train"]["shards"][0]
    assert os.path.getsize(tmp_path / "big" / shard["file"]) == 4 * shard["tokens"] == 4 * 9
    expected = [65_000 + ord(c) for c in "abc"] + [70_000] + [65_000 + ord(c) for c in "xyz!"] + [70_000]
    assert _stream(tmp_path / "big").tolist() == expected
    assert TokenShards(tmp_path / "big").dtype == np.dtype("<u4")


def test_meta_counts_match_shard_files_and_boundaries(tmp_path, tok):
    texts = _paragraphs(400)
    src = _write_jsonl(tmp_path / "d.jsonl", texts)
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
    texts = _paragraphs(300)
    src = _write_jsonl(tmp_path / "d.jsonl", texts)
    out = tmp_path / "out"
    meta = prepare_data([src], tok, str(out), shard_tokens=4000, eval_fraction=0.2, progress=False)
    files = [out / s["file"] for split in meta["splits"].values() for s in split["shards"]]
    assert len(files) >= 4
    mtimes = {f: f.stat().st_mtime_ns for f in files}

    encoded: list[int] = []
    real_encode = prepare_mod._encode_documents

    def counting(tokenizer, texts, *args):
        encoded.append(len(texts))
        return real_encode(tokenizer, texts, *args)

    monkeypatch.setattr(prepare_mod, "_encode_documents", counting)
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


def test_parquet_inputs_with_eval_file(tmp_path, tok):
    paras = _paragraphs(90)
    ddir = tmp_path / "data"
    ddir.mkdir()
    for i in range(3):
        chunk = paras[i * 30 : (i + 1) * 30]
        table = pa.table({"text": chunk, "score": [float(j) for j in range(len(chunk))]})
        pq.write_table(table, ddir / f"part_{i}.parquet", row_group_size=7)
    out = tmp_path / "out"
    meta = prepare_data(
        [str(ddir / "*.parquet")], tok, str(out), eval_files=[str(ddir / "part_1.parquet")], progress=False
    )
    assert meta["splits"]["train"]["documents"] == 60 and meta["splits"]["eval"]["documents"] == 30
    train_docs = _split_docs(_stream(out, "train"), tok.eos_token_id)
    eval_docs = _split_docs(_stream(out, "eval"), tok.eos_token_id)
    assert train_docs == [_expected_ids(tok, t) for t in paras[:30] + paras[60:]]
    assert eval_docs == [_expected_ids(tok, t) for t in paras[30:60]]
    splits = {os.path.basename(s["path"]): s["split"] for s in meta["sources"]}
    assert splits == {"part_0.parquet": "auto", "part_2.parquet": "auto", "part_1.parquet": "eval"}
    # a directory input is the same as the glob
    meta_dir = prepare_data([str(ddir)], tok, str(tmp_path / "out2"), progress=False)
    assert meta_dir["splits"]["train"]["documents"] == 90
    with pytest.raises(ValueError, match="no column 'body'"):
        prepare_data([str(ddir)], tok, str(tmp_path / "out3"), text_field="body", progress=False)


def test_eval_fraction_split_is_deterministic_by_content(tmp_path, tok):
    texts = _paragraphs(200)
    src = _write_jsonl(tmp_path / "d.jsonl", texts)
    a = prepare_data([src], tok, str(tmp_path / "a"), eval_fraction=0.25, progress=False)
    # the same documents in another order: same per-document split decision
    src2 = _write_jsonl(tmp_path / "rev.jsonl", texts[::-1])
    b = prepare_data([src2], tok, str(tmp_path / "b"), eval_fraction=0.25, progress=False)
    n_eval = a["splits"]["eval"]["documents"]
    assert 20 < n_eval < 80
    assert n_eval + a["splits"]["train"]["documents"] == len(texts)
    assert b["splits"]["eval"]["documents"] == n_eval
    ev_a = _split_docs(_stream(tmp_path / "a", "eval"), tok.eos_token_id)
    ev_b = _split_docs(_stream(tmp_path / "b", "eval"), tok.eos_token_id)
    assert sorted(map(tuple, ev_a)) == sorted(map(tuple, ev_b))
    held = [t for t in texts if prepare_mod._doc_hash_fraction(t) < 0.25]
    assert ev_a == [_expected_ids(tok, t) for t in held]
    c = prepare_data([src], tok, str(tmp_path / "c"), eval_fraction=0.25, progress=False)
    assert c["content_hash"] == a["content_hash"]


def test_txt_json_inputs_and_max_documents(tmp_path, tok):
    (tmp_path / "a.txt").write_text("first line\n\nsecond line\n   \nthird\n", encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps([{"content": "json one"}, {"content": "json two"}]), encoding="utf-8")
    meta = prepare_data([str(tmp_path / "a.txt")], tok, str(tmp_path / "o1"), progress=False)
    assert meta["splits"]["train"]["documents"] == 3
    docs = _split_docs(_stream(tmp_path / "o1"), tok.eos_token_id)
    assert docs == [_expected_ids(tok, t) for t in ("first line", "second line", "third")]
    meta = prepare_data([str(tmp_path / "b.json")], tok, str(tmp_path / "o2"), text_field="content", progress=False)
    assert meta["splits"]["train"]["documents"] == 2
    meta = prepare_data(
        [str(tmp_path / "a.txt"), str(tmp_path / "b.json")],
        tok,
        str(tmp_path / "o3"),
        text_field="content",
        max_documents=4,
        progress=False,
    )
    assert meta["splits"]["train"]["documents"] == 4


def test_extra_splits(tmp_path, tok):
    a = _write_jsonl(tmp_path / "a.jsonl", _paragraphs(20))
    b = _write_jsonl(tmp_path / "b.jsonl", ["extra doc one", "extra doc two"])
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


def test_missing_or_empty_inputs_raise(tmp_path, tok):
    pattern = str(tmp_path / "nothing_here" / "*.parquet")
    with pytest.raises(ValueError, match="nothing_here"):
        prepare_data([pattern], tok, str(tmp_path / "o"), progress=False)
    with pytest.raises(ValueError, match="missing.jsonl"):
        prepare_data([str(tmp_path / "missing.jsonl")], tok, str(tmp_path / "o"), progress=False)
    empty = _write_jsonl(tmp_path / "empty.jsonl", ["", "  ", "\n"])
    with pytest.raises(ValueError, match="zero non-empty documents.*empty.jsonl"):
        prepare_data([empty], tok, str(tmp_path / "o"), progress=False)
    with pytest.raises(ValueError, match="no field 'body'"):
        prepare_data([empty], tok, str(tmp_path / "o"), text_field="body", progress=False)
    with pytest.raises(ValueError, match="no inputs"):
        prepare_data([], tok, str(tmp_path / "o"), progress=False)


def test_hub_dataset_id_fails_clearly_offline(tmp_path, tok, monkeypatch):
    import datasets
    from huggingface_hub import constants

    def no_network(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hub")

    monkeypatch.setattr(datasets, "load_dataset", no_network)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(ValueError, match="Hugging Face dataset id.*failed"):
        prepare_data(["someorg/some-dataset"], tok, str(tmp_path / "o"), progress=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE"):
        prepare_data(["someorg/some-dataset"], tok, str(tmp_path / "o"), progress=False)


def test_tokenizer_without_eos_raises(tmp_path, tok):
    src = _write_jsonl(tmp_path / "d.jsonl", ["hello"])
    no_eos = _BigVocabTokenizer()
    no_eos.eos_token_id = None
    with pytest.raises(ValueError, match="no eos_token"):
        prepare_data([src], no_eos, str(tmp_path / "o"), progress=False)


def test_num_workers_gives_identical_output(tmp_path, tok):
    texts = _paragraphs(700)
    src = _write_jsonl(tmp_path / "d.jsonl", texts)
    one = prepare_data([src], tok, str(tmp_path / "one"), shard_tokens=20_000, eval_fraction=0.1, progress=False)
    two = prepare_data(
        [src], tok, str(tmp_path / "two"), shard_tokens=20_000, eval_fraction=0.1, num_workers=2, progress=False
    )
    assert one["content_hash"] == two["content_hash"]
    assert one["splits"] == two["splits"]


@pytest.mark.slow
def test_num_workers_spawn_start_method(tmp_path, tok, monkeypatch):
    """The spawn path (non-Linux) reloads the saved tokenizer in each worker; slow (workers import depthbench)."""
    monkeypatch.setattr(prepare_mod.multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    src = _write_jsonl(tmp_path / "d.jsonl", _paragraphs(300))
    one = prepare_data([src], tok, str(tmp_path / "one"), shard_tokens=20_000, progress=False)
    two = prepare_data([src], tok, str(tmp_path / "two"), shard_tokens=20_000, num_workers=2, progress=False)
    assert one["content_hash"] == two["content_hash"]


# ------------------------------------------------------------------------------------------------ TokenShards


def test_truncated_or_corrupt_shard_names_the_file(tmp_path, tok):
    src = _write_jsonl(tmp_path / "d.jsonl", _paragraphs(100))
    out = tmp_path / "out"
    meta = prepare_data([src], tok, str(out), shard_tokens=2000, progress=False)
    shard = out / meta["splits"]["train"]["shards"][1]["file"]
    raw = shard.read_bytes()
    shard.write_bytes(raw[:-6])
    with pytest.raises(ValueError, match=r"shard_00001\.bin.*truncated"):
        TokenShards(out)
    flipped = bytearray(raw)
    flipped[10] ^= 0xFF
    shard.write_bytes(bytes(flipped))
    TokenShards(out)  # same size: only detected with verify=True
    with pytest.raises(ValueError, match=r"shard_00001\.bin.*sha256"):
        TokenShards(out, verify=True)
    os.remove(shard)
    with pytest.raises(FileNotFoundError, match=r"shard_00001\.bin"):
        TokenShards(out)
    with pytest.raises(FileNotFoundError, match="meta.json"):
        TokenShards(tmp_path / "not_prepared")


# ------------------------------------------------------------------------------------------------ windows / loader


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tok):
    root = tmp_path_factory.mktemp("prepared")
    src = _write_jsonl(root / "d.jsonl", _paragraphs(300))
    prepare_data([src], tok, str(root / "out"), shard_tokens=5000, progress=False)
    return root / "out"


def test_token_windows_match_stream(prepared):
    shards = TokenShards(prepared)
    stream = shards.read(0, shards.num_tokens).astype(np.int64)
    seq = 64
    win = TokenWindows(shards, seq)
    assert len(win) == shards.num_tokens // seq
    assert TokenWindows(str(prepared), seq).shards.num_tokens == shards.num_tokens
    for i in (0, 1, len(win) // 2, len(win) - 1):
        item = win[i]["input_ids"]
        assert item.dtype == torch.long and item.shape == (seq,)
        np.testing.assert_array_equal(item.numpy(), stream[i * seq : (i + 1) * seq])
    np.testing.assert_array_equal(win[-1]["input_ids"].numpy(), stream[(len(win) - 1) * seq : len(win) * seq])
    batch = win.get_batch([3, 0, 3])
    assert batch.shape == (3, seq)
    np.testing.assert_array_equal(batch[1].numpy(), stream[:seq])
    with pytest.raises(IndexError):
        win[len(win)]
    allw = torch.cat([win[i]["input_ids"] for i in range(len(win))]).numpy()
    np.testing.assert_array_equal(allw, stream[: len(win) * seq])
    order = win.window_order(seed=3, epoch=0)
    assert sorted(order.tolist()) == list(range(len(win)))
    np.testing.assert_array_equal(order, win.window_order(3, 0))
    assert not np.array_equal(order, win.window_order(3, 1))
    assert not np.array_equal(order, win.window_order(4, 0))


def _take(it, n):
    return [next(it) for _ in range(n)]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_loader_deterministic_and_epochs(prepared, prefetch):
    win = TokenWindows(prepared, 32)
    n = len(win)
    a = _take(iter(WindowLoader(win, 4, seed=7, prefetch=prefetch)), 5)
    b = _take(iter(WindowLoader(win, 4, seed=7, prefetch=0)), 5)
    c = _take(iter(WindowLoader(win, 4, seed=8, prefetch=prefetch)), 5)
    assert all(x.shape == (4, 32) and x.dtype == torch.long for x in a)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))
    # the stream visits every window once per epoch and continues across epochs
    loader = WindowLoader(win, 3, seed=1, prefetch=prefetch)
    idx = np.concatenate([loader.micro_batch_indices(p) for p in range(0, 2 * n + 3, 3)])
    assert sorted(idx[:n].tolist()) == list(range(n))
    np.testing.assert_array_equal(idx[:n], win.window_order(1, 0))
    np.testing.assert_array_equal(idx[n : 2 * n], win.window_order(1, 1))


@pytest.mark.parametrize("prefetch", [0, 3])
def test_loader_state_dict_resume_is_exact(prepared, prefetch):
    win = TokenWindows(prepared, 32)
    n = len(win)
    steps = n // 4 + 5  # crosses an epoch boundary
    reference = _take(iter(WindowLoader(win, 4, seed=11, prefetch=prefetch)), steps + 6)

    loader = WindowLoader(win, 4, seed=11, prefetch=prefetch)
    it = iter(loader)
    first = _take(it, steps)
    state = loader.state_dict()
    assert state["position"] == steps * 4  # what was yielded, not what was prefetched
    assert state["epoch"] == steps * 4 // n == loader.epoch
    json.dumps(state)
    del it

    resumed = WindowLoader(win, 4, seed=11, prefetch=prefetch)
    resumed.load_state_dict(state)
    rest = _take(iter(resumed), 6)
    assert all(torch.equal(x, y) for x, y in zip(first + rest, reference))
    with pytest.raises(ValueError, match="seed"):
        WindowLoader(win, 4, seed=12).load_state_dict(state)
    # start_step counts optimizer steps of micro_batch_size * grad_accum * world_size sequences
    skip = WindowLoader(win, 4, seed=11, start_step=3, grad_accum=2, prefetch=prefetch)
    assert skip.position == 24
    assert all(torch.equal(x, y) for x, y in zip(_take(iter(skip), 4), reference[6:10]))


def _rows(tensors) -> list[tuple[int, ...]]:
    return sorted(tuple(r.tolist()) for t in tensors for r in t)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_two_ranks_cover_single_process_global_batches(prepared, prefetch):
    win = TokenWindows(prepared, 16)
    mb, accum, world = 2, 3, 2
    global_batch = mb * accum * world
    single = WindowLoader(win, micro_batch_size=4, seed=5, prefetch=prefetch)
    ranks = [WindowLoader(win, mb, seed=5, rank=r, world_size=world, prefetch=prefetch) for r in range(world)]
    single_steps = single.global_micro_batches(global_batch)
    rank_steps = [r.global_micro_batches(global_batch) for r in ranks]
    n_steps = len(win) // global_batch + 2  # crosses an epoch boundary
    for _ in range(n_steps):
        ref = next(single_steps)
        assert len(ref) == global_batch // 4
        per_rank = [next(s) for s in rank_steps]
        assert all(len(p) == accum and all(b.shape == (mb, 16) for b in p) for p in per_rank)
        r0, r1 = _rows(per_rank[0]), _rows(per_rank[1])
        assert not set(r0) & set(r1)
        assert sorted(r0 + r1) == _rows(ref)
    # states agree across ranks and with the single process
    assert ranks[0].state_dict()["position"] == ranks[1].state_dict()["position"] == single.position
    assert single.position == n_steps * global_batch
    # index-level check: disjoint and covering
    p = 4 * global_batch
    i0, i1 = ranks[0].micro_batch_indices(p), ranks[1].micro_batch_indices(p)
    assert not set(i0.tolist()) & set(i1.tolist())
    assert sorted(np.concatenate([i0, i1]).tolist()) == sorted(single.stream_indices(p, mb * world).tolist())
    with pytest.raises(ValueError, match="multiple"):
        next(ranks[0].global_micro_batches(global_batch + 1))


def test_loader_validation(prepared):
    win = TokenWindows(prepared, 16)
    with pytest.raises(ValueError):
        WindowLoader(win, 2, seed=0, rank=2, world_size=2)
    with pytest.raises(ValueError, match="no training windows"):
        WindowLoader(TokenWindows(prepared, 10**9), 2, seed=0)
    loader = WindowLoader(win, 2, seed=0)
    assert loader.grad_accum_steps(8) == 4
    it = iter(loader)
    next(it)
    it2 = iter(loader)  # a new iterator invalidates the old one and continues from the yielded position
    assert loader.position == 2
    next(it2)
    with pytest.raises(StopIteration):
        next(it)
    assert loader.position == 4
