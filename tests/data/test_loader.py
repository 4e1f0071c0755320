"""Reading prepared data (``depthbench.data.loader``): shard checks, training windows and the batch loader."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from depthbench.config import load_run_config
from depthbench.data import DataError, TokenShards, TokenWindows, WindowLoader, load_meta, prepare_data, verify_data
from depthbench.training.trainer import train
from tests.helpers import pydoc_paragraphs, write_jsonl
from tests.tiny_runs import copy_data, tiny_run


def test_truncated_or_corrupt_shard_names_the_file(tmp_path, tok):
    src = write_jsonl(tmp_path / "d.jsonl", pydoc_paragraphs(100))
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


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tok):
    root = tmp_path_factory.mktemp("prepared")
    src = write_jsonl(root / "d.jsonl", pydoc_paragraphs(300))
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


def _flip_token(shard: Path, offset: int, value: int) -> None:
    ids = np.fromfile(shard, dtype="<u2")
    ids[offset] = value
    st = shard.stat()
    ids.tofile(shard)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))  # keep the mtime: only a full check can see it


def test_shard_hash_is_verified_incrementally_and_on_demand(train_data, tmp_path):
    data = copy_data(train_data, tmp_path / "data")
    first = verify_data(str(data), progress=False)
    cache = json.loads((data / ".verified.json").read_text())
    assert set(cache) == set(first) and all("max_id" in v for v in cache.values())
    shard = data / "train" / "shard_00000.bin"
    original = int(np.fromfile(shard, dtype="<u2")[10])
    _flip_token(shard, 10, (original + 1) % 300)  # another valid id, same size, same mtime
    verify_data(str(data), progress=False)  # cached: path, size and mtime unchanged, not re-read
    with pytest.raises(DataError, match=r"shard_00000.bin is corrupt: its sha256 differs from .*meta.json"):
        verify_data(str(data), force=True, progress=False)
    os.utime(shard)  # a normal edit changes the mtime: the cached check re-hashes that shard
    with pytest.raises(DataError, match="shard_00000.bin is corrupt"):
        verify_data(str(data), progress=False)
    out = tmp_path / "run"
    with pytest.raises(DataError, match="shard_00000.bin is corrupt"):  # train checks before step 1
        train(load_run_config(tiny_run(data, out), ["train.max_steps=1"]))
    with pytest.raises(DataError, match="shard_00000.bin is corrupt"):  # --verify-data ignores the cache
        train(load_run_config(tiny_run(data, out), ["train.max_steps=1", "data.verify=always"]))


@pytest.mark.parametrize("verify", ["cached", "off"])
def test_out_of_vocab_token_ids_are_refused_naming_shard_and_offset(train_data, tmp_path, verify):
    data = copy_data(train_data, tmp_path / "data")
    shard = data / "train" / "shard_00000.bin"
    ids = np.fromfile(shard, dtype="<u2")
    ids[1234:] = 4000  # the model has 300 ids: tokenized with another tokenizer from offset 1234 on
    ids.tofile(shard)
    meta = load_meta(str(data))  # a consistent folder (hash matches), just the wrong vocabulary
    import hashlib

    meta["splits"]["train"]["shards"][0]["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()
    (data / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"shard_00000.bin holds token id 4000 at token offset (\d+) \(byte \d+\), "
                                        r"outside the model's vocabulary \(vocab_size=300\)") as info:
        train(load_run_config(tiny_run(data, tmp_path / "run"), ["checkpoint.every=0", f"data.verify={verify}"]))
    offset = int(str(info.value).split("token offset ")[1].split(" ")[0])
    if verify == "cached":  # checked before training: the first bad id of the shard
        assert offset == 1234 and not (tmp_path / "run" / "metrics.jsonl").exists()
    else:  # checked per batch: the first bad id of the window that met it
        assert offset >= 1234 and ids[offset] == 4000


def test_corrupt_meta_json_names_the_file(train_data, tmp_path):
    data = copy_data(train_data, tmp_path / "data")
    text = (data / "meta.json").read_text()
    (data / "meta.json").write_text(text[: len(text) // 2])
    with pytest.raises(DataError, match=rf"{data / 'meta.json'} is corrupt \(not valid JSON: "):
        TokenShards(str(data))
    with pytest.raises(DataError, match="meta.json is corrupt"):
        train(load_run_config(tiny_run(data, tmp_path / "run")))
