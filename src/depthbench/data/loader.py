"""Reading token shards: :func:`load_meta`, :class:`TokenShards` (memory-mapped split), :class:`TokenWindows`
(fixed-length windows) and :class:`WindowLoader` (the deterministic, resumable, rank-aware loader of the trainer).
The on-disk format is described in ``depthbench.data``; writing it is ``depthbench.data.prepare``.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from collections.abc import Iterable, Iterator

import numpy as np
import torch

from depthbench import atomic, runs


class DataError(ValueError):
    """Prepared data is unreadable, corrupt or does not fit the model (the message names the file)."""


def load_meta(data_dir: str) -> dict:
    """Read ``data_dir/meta.json``.

    Raises:
        FileNotFoundError: If the file does not exist (the directory was not prepared).
        DataError: If it is not valid JSON or lacks the keys the loader needs (names the file and the position).
    """
    path = os.path.join(data_dir, runs.DATA_META)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: {data_dir!r} is not a prepared data directory (run prepare_data)")
    try:
        meta = atomic.read_json(path)
    except ValueError as exc:
        detail = exc.__context__ or exc  # the decoder's message (atomic.read_json's names the file, as this does)
        raise DataError(f"{path} is corrupt (not valid JSON: {detail}); re-run depthbench prepare-data with the same "
                        "arguments to rewrite it (finished shards are kept)") from None
    missing = [k for k in ("splits", "dtype", "vocab_size", "eos_token_id")
               if not isinstance(meta, dict) or k not in meta]
    if missing:
        raise DataError(f"{path} is not a depthbench meta.json: it lacks {', '.join(missing)}; re-run depthbench "
                        "prepare-data")
    return meta


_VERIFY_CACHE = ".verified.json"


def _verify_cache_path(data_dir: str, meta: dict) -> str:
    """``data_dir/.verified.json``, or a per-dataset file under ``~/.cache/depthbench`` when the folder is
    read-only."""
    local = os.path.join(data_dir, _VERIFY_CACHE)
    if os.access(data_dir, os.W_OK):
        return local
    root = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "depthbench", "verified")
    os.makedirs(root, exist_ok=True)
    return os.path.join(root, f"{str(meta.get('content_hash', 'unknown'))[:24]}.json")


def verify_data(data_dir: str, splits: Iterable[str] | None = None, *, force: bool = False,
                vocab_size: int | None = None, progress: bool = True) -> dict[str, dict]:
    """Check every shard of ``splits`` (default: all) against ``meta.json``: the sha256 of its bytes, and, with
    ``vocab_size``, that no token id is ``>= vocab_size``.

    Incremental and cached: a shard hashed before is skipped while its path, size, modification time and expected
    hash are unchanged (the cache is ``data_dir/.verified.json``, or ``~/.cache/depthbench/verified/`` for a
    read-only folder, updated after every shard so an interrupted check keeps its progress). ``force`` hashes
    every shard again. Cost: one sequential read and sha256 of each new or changed shard (measured figures in
    docs/reliability.md#data-checks); cached shards cost one ``stat``.

    Returns:
        ``{shard file: {"sha256", "bytes", "mtime_ns", "max_id"}}`` for the checked shards.

    Raises:
        DataError: A shard's content differs from ``meta.json`` or holds ids outside the vocabulary (names the shard
            and the offset).
    """
    from depthbench.progress import progress_bar

    meta = load_meta(data_dir)
    cache_path = _verify_cache_path(data_dir, meta)
    cache: dict = {}
    if not force and os.path.exists(cache_path):
        try:
            cache = atomic.read_json(cache_path)
        except (OSError, ValueError):
            cache = {}
    cache = cache if isinstance(cache, dict) else {}
    dtype = np.dtype(meta["dtype"]).newbyteorder("<")
    shards = [s for name in (splits if splits is not None else meta["splits"]) for s in meta["splits"][name]["shards"]]
    todo, checked = [], {}
    for shard in shards:
        path = os.path.join(data_dir, shard["file"])
        st = os.stat(path)
        entry = cache.get(shard["file"])
        if (isinstance(entry, dict) and entry.get("sha256") == shard["sha256"] and entry.get("bytes") == st.st_size
                and entry.get("mtime_ns") == st.st_mtime_ns):
            checked[shard["file"]] = entry
        else:
            todo.append((shard, path, st))
    total = sum(st.st_size for _, _, st in todo)
    with progress_bar(total=total, unit="B", unit_scale=True, desc=f"verifying {len(todo)} shard(s) of {data_dir}",
              disable=not (progress and todo), mininterval=1.0) as bar:
        for shard, path, st in todo:
            h, max_id = hashlib.sha256(), -1
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 24), b""):
                    h.update(block)
                    ids = np.frombuffer(block[: len(block) - len(block) % dtype.itemsize], dtype=dtype)
                    if ids.size:
                        max_id = max(max_id, int(ids.max()))
                    bar.update(len(block))
            if h.hexdigest() != shard["sha256"]:
                raise DataError(
                    f"shard file {path} is corrupt: its sha256 differs from "
                    f"{os.path.join(data_dir, runs.DATA_META)} (the bytes changed after prepare-data); delete it and"
                    " its .done.json and re-run depthbench prepare-data with the same arguments to rewrite it")
            entry = {"sha256": shard["sha256"], "bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "max_id": max_id}
            checked[shard["file"]] = cache[shard["file"]] = entry
            try:
                atomic.write_json(cache_path, cache, sort_keys=True)
            except OSError:  # the check itself succeeded; only the cache could not be kept
                pass
    if vocab_size is not None:
        for shard in shards:
            entry = checked.get(shard["file"], {})
            if entry.get("max_id", -1) >= vocab_size:
                _raise_out_of_vocab(os.path.join(data_dir, shard["file"]), dtype, vocab_size)
    return checked


def _raise_out_of_vocab(path: str, dtype: np.dtype, vocab_size: int, start: int = 0) -> None:
    ids = np.memmap(path, dtype=dtype, mode="r")
    bad = int(np.flatnonzero(ids[start:] >= vocab_size)[0]) + start
    raise DataError(f"shard file {path} holds token id {int(ids[bad])} at token offset {bad} (byte "
                    f"{bad * dtype.itemsize}), outside the model's vocabulary (vocab_size={vocab_size}): the data was "
                    "tokenized with another "
                    "tokenizer, or the shard is corrupt")


class TokenShards:
    """Memory-mapped view of one prepared split as a single concatenated token stream.

    Opening checks every shard's size against ``meta.json``; ``verify=True`` also recomputes the sha256.
    The memmaps are opened lazily and dropped when pickled, so instances can be sent to DataLoader workers.

    Attributes:
        data_dir: The prepared directory.
        split: Split name (``"train"``, ``"eval"``, or an extra split).
        meta: The whole ``meta.json`` dict.
        split_meta: ``meta["splits"][split]``.
        dtype: Numpy dtype of the stored ids.
    """

    def __init__(self, data_dir: str, split: str = "train", *, verify: bool = False):
        """Open ``split`` of ``data_dir``.

        Raises:
            FileNotFoundError: ``meta.json`` or a shard file is missing (the message names it).
            KeyError: The split does not exist.
            ValueError: A shard's size (or, with ``verify``, hash) does not match the meta (names the file).
        """
        self.data_dir = str(data_dir)
        self.split = split
        self.meta = load_meta(self.data_dir)
        if split not in self.meta["splits"]:
            raise KeyError(f"split {split!r} not in {self.data_dir} (available: {sorted(self.meta['splits'])})")
        self.split_meta = self.meta["splits"][split]
        self.dtype = np.dtype(self.meta["dtype"]).newbyteorder("<")
        self._paths: list[str] = []
        sizes: list[int] = []
        for shard in self.split_meta["shards"]:
            path = os.path.join(self.data_dir, shard["file"])
            if not os.path.exists(path):
                raise FileNotFoundError(f"shard file {path} listed in meta.json is missing")
            expected = shard["tokens"] * self.dtype.itemsize
            actual = os.path.getsize(path)
            if actual != expected:
                raise ValueError(
                    f"shard file {path} is truncated or corrupt: {actual} bytes on disk, meta.json expects "
                    f"{expected} ({shard['tokens']} tokens of {self.dtype.name})"
                )
            if verify:
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(2**22), b""):
                        h.update(block)
                if h.hexdigest() != shard["sha256"]:
                    raise DataError(f"shard file {path} is corrupt: sha256 differs from meta.json")
            if shard["tokens"] > 0:
                self._paths.append(path)
                sizes.append(shard["tokens"])
        self._offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
        self._maps: list[np.memmap] | None = None
        #: token ids ``>=`` this are refused by :meth:`read` (naming shard and offset); ``None``: no check
        self.vocab_limit: int | None = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_maps"] = None
        return state

    def _memmaps(self) -> list[np.memmap]:
        if self._maps is None:
            self._maps = [np.memmap(p, dtype=self.dtype, mode="r") for p in self._paths]
        return self._maps

    @property
    def num_tokens(self) -> int:
        """Total tokens of the split."""
        return int(self._offsets[-1])

    @property
    def num_documents(self) -> int:
        """Documents of the split."""
        return int(self.split_meta["documents"])

    @property
    def vocab_size(self) -> int:
        """``len(tokenizer)`` at preparation time."""
        return int(self.meta["vocab_size"])

    @property
    def eos_token_id(self) -> int:
        """EOS id separating documents."""
        return int(self.meta["eos_token_id"])

    @property
    def pad_token_id(self) -> int | None:
        """PAD id of the tokenizer (may be ``None``)."""
        return self.meta.get("pad_token_id")

    @property
    def tokenizer_dir(self) -> str:
        """Directory holding the saved tokenizer."""
        return os.path.join(self.data_dir, self.meta.get("tokenizer_dir", "tokenizer"))

    def __len__(self) -> int:
        return self.num_tokens

    def read(self, start: int, length: int) -> np.ndarray:
        """Return tokens ``[start, start + length)`` of the concatenated stream (a copy, meta dtype).

        Raises:
            IndexError: If the range is outside ``[0, num_tokens]``.
        """
        start, length = int(start), int(length)
        if start < 0 or length < 0 or start + length > self.num_tokens:
            raise IndexError(
                f"range [{start}, {start + length}) outside [0, {self.num_tokens}) of split {self.split!r}"
            )
        out = np.empty(length, dtype=self.dtype)
        if length == 0:
            return out
        maps = self._memmaps()
        shard = int(np.searchsorted(self._offsets, start, side="right")) - 1
        pos, filled = start, 0
        while filled < length:
            local = pos - int(self._offsets[shard])
            take = min(length - filled, int(self._offsets[shard + 1]) - pos)
            piece = maps[shard][local : local + take]
            if self.vocab_limit is not None and take and int(piece.max()) >= self.vocab_limit:
                _raise_out_of_vocab(self._paths[shard], self.dtype, self.vocab_limit, start=local)
            out[filled : filled + take] = piece
            filled += take
            pos += take
            shard += 1
        return out


class TokenWindows(torch.utils.data.Dataset):
    """Consecutive, non-overlapping ``seq_len``-token windows over a split's concatenated stream.

    Window ``i`` is tokens ``[i * seq_len, (i + 1) * seq_len)``; the incomplete tail is dropped, so
    ``len(self) == num_tokens // seq_len``.  Documents are concatenated (EOS-separated) with no masking across
    document boundaries, like OLMo's fixed-sequence-length numpy dataset.  The model shifts labels itself.
    """

    def __init__(self, data: TokenShards | str, seq_len: int, split: str = "train"):
        """Create the windows.

        Args:
            data: A :class:`TokenShards` or a prepared data directory.
            seq_len: Tokens per window.
            split: Split to open when ``data`` is a directory.
        """
        if seq_len <= 0:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        self.shards = data if isinstance(data, TokenShards) else TokenShards(data, split)
        self.seq_len = int(seq_len)

    def __len__(self) -> int:
        return self.shards.num_tokens // self.seq_len

    def _index(self, i: int) -> int:
        n = len(self)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"window index {i} out of range for {n} windows")
        return i

    def window(self, i: int) -> np.ndarray:
        """Window ``i`` as a numpy array of the stored dtype."""
        return self.shards.read(self._index(i) * self.seq_len, self.seq_len)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": torch.from_numpy(self.window(i).astype(np.int64))}

    def get_batch(self, indices: Iterable[int]) -> torch.Tensor:
        """Stack windows ``indices`` into a ``LongTensor[len(indices), seq_len]``."""
        idx = list(indices)
        out = np.empty((len(idx), self.seq_len), dtype=np.int64)
        for row, i in enumerate(idx):
            out[row] = self.window(i)
        return torch.from_numpy(out)

    def window_order(self, seed: int, epoch: int) -> np.ndarray:
        """Deterministic permutation of ``range(len(self))`` for ``(seed, epoch)``.

        Uses ``numpy.random.default_rng([seed, epoch])`` (a ``SeedSequence`` over both numbers), so every
        epoch gets a different shuffle and the result does not depend on global RNG state.
        """
        return np.random.default_rng([int(seed), int(epoch)]).permutation(len(self))


class WindowLoader:
    """Deterministic, exactly resumable, rank-aware micro-batch iterator over :class:`TokenWindows`.

    **Global stream.** With ``N = len(windows)``, the global sequence stream is the concatenation of the
    per-epoch permutations ``windows.window_order(seed, 0) ++ window_order(seed, 1) ++ ...``; every epoch
    visits every window exactly once and the stream continues across epochs without dropping anything.
    ``position`` counts global stream entries consumed (by all ranks together); ``epoch = position // N``.

    **Micro-steps.** Each micro-step consumes the next ``G = micro_batch_size * world_size`` stream entries
    (a *global micro-batch group*); rank ``r`` takes the strided slice ``group[r::world_size]`` as its
    ``LongTensor[micro_batch_size, seq_len]``.  Ranks therefore never overlap and together cover the group.

    **Optimizer steps.** With ``grad_accum`` micro-steps per optimizer step, step ``s`` uses stream entries
    ``[s * B, (s + 1) * B)`` with ``B = micro_batch_size * grad_accum * world_size`` (the global batch).
    This set depends only on ``B`` (and the seed), not on how it is split into ranks and micro-batches, so a
    2-process run sees exactly the same sequences per optimizer step as a 1-process run with the same global
    batch.  :meth:`global_micro_batches` yields one optimizer step's micro-batches at a time.

    **State.** :meth:`state_dict` reports the position after the last micro-batch *handed to the caller*
    (prefetched batches are not counted); it is the same on all ranks.  After :meth:`load_state_dict`, a new
    iterator continues exactly where the saved one stopped.  Each call of ``iter()`` starts from the current
    position and invalidates earlier iterators of this loader.

    **Prefetch.** With ``prefetch > 0`` a daemon thread prepares up to ``prefetch`` micro-batches ahead.
    """

    def __init__(
        self,
        windows: TokenWindows,
        micro_batch_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        start_step: int = 0,
        grad_accum: int = 1,
        prefetch: int = 2,
    ):
        """Create the loader.

        Args:
            windows: The training windows.
            micro_batch_size: Sequences per micro-batch per rank.
            seed: Shuffle seed.
            rank: This process's rank in ``[0, world_size)``.
            world_size: Number of data-parallel processes.
            start_step: Optimizer steps already done; the loader starts at position
                ``start_step * micro_batch_size * grad_accum * world_size``.
            grad_accum: Micro-steps per optimizer step (used for ``start_step`` and :attr:`global_batch_size`).
            prefetch: Micro-batches to prepare ahead in a background thread (0 disables the thread).

        Raises:
            ValueError: On an empty dataset or inconsistent arguments.
        """
        if micro_batch_size <= 0 or world_size <= 0 or grad_accum <= 0:
            raise ValueError("micro_batch_size, world_size and grad_accum must be positive")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} not in [0, {world_size})")
        if start_step < 0 or prefetch < 0:
            raise ValueError("start_step and prefetch must be >= 0")
        self.windows = windows
        self.num_windows = len(windows)
        if self.num_windows == 0:
            raise ValueError(
                f"no training windows: the split has {windows.shards.num_tokens} tokens < seq_len {windows.seq_len}"
            )
        self.micro_batch_size = int(micro_batch_size)
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.grad_accum = int(grad_accum)
        self.prefetch = int(prefetch)
        self._position = int(start_step) * self.global_batch_size
        self._generation = 0
        self._orders: dict[int, np.ndarray] = {}

    # -- geometry ---------------------------------------------------------------------------------------------

    @property
    def group_size(self) -> int:
        """Global sequences consumed per micro-step (``micro_batch_size * world_size``)."""
        return self.micro_batch_size * self.world_size

    @property
    def global_batch_size(self) -> int:
        """Sequences per optimizer step (``micro_batch_size * grad_accum * world_size``)."""
        return self.group_size * self.grad_accum

    def grad_accum_steps(self, global_batch_size: int) -> int:
        """Micro-steps per optimizer step for ``global_batch_size``.

        Raises:
            ValueError: If ``global_batch_size`` is not a positive multiple of ``micro_batch_size * world_size``.
        """
        if global_batch_size <= 0 or global_batch_size % self.group_size:
            raise ValueError(
                f"global batch {global_batch_size} must be a positive multiple of micro_batch_size * world_size "
                f"= {self.micro_batch_size} * {self.world_size}"
            )
        return global_batch_size // self.group_size

    @property
    def position(self) -> int:
        """Global stream entries consumed up to the last micro-batch yielded."""
        return self._position

    @property
    def epoch(self) -> int:
        """Epoch of the next stream entry."""
        return self._position // self.num_windows

    # -- stream -------------------------------------------------------------------------------------------------

    def _order(self, epoch: int) -> np.ndarray:
        order = self._orders.get(epoch)
        if order is None:
            order = self.windows.window_order(self.seed, epoch)
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = order
        return order

    def stream_indices(self, start: int, count: int) -> np.ndarray:
        """Window indices of global stream entries ``[start, start + count)``."""
        out = np.empty(count, dtype=np.int64)
        pos, filled = start, 0
        while filled < count:
            epoch, offset = divmod(pos, self.num_windows)
            take = min(count - filled, self.num_windows - offset)
            out[filled : filled + take] = self._order(epoch)[offset : offset + take]
            filled += take
            pos += take
        return out

    def micro_batch_indices(self, position: int) -> np.ndarray:
        """Window indices of this rank's micro-batch for the group starting at global ``position``."""
        return self.stream_indices(position, self.group_size)[self.rank :: self.world_size]

    def _make_batch(self, position: int) -> torch.Tensor:
        return self.windows.get_batch(self.micro_batch_indices(position))

    # -- iteration ----------------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[torch.Tensor]:
        """Yield ``LongTensor[micro_batch_size, seq_len]`` micro-batches forever, from the current position."""
        self._generation += 1
        generation = self._generation
        if self.prefetch == 0:
            return self._iter_sync(generation)
        return self._iter_prefetch(generation)

    def _iter_sync(self, generation: int) -> Iterator[torch.Tensor]:
        pos = self._position
        while generation == self._generation:
            batch = self._make_batch(pos)
            pos += self.group_size
            self._position = pos
            yield batch

    def _iter_prefetch(self, generation: int) -> Iterator[torch.Tensor]:
        start = self._position
        q: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def produce() -> None:
            pos = start
            try:
                while not stop.is_set():
                    item = (self._make_batch(pos), pos + self.group_size)
                    pos += self.group_size
                    while not stop.is_set():
                        try:
                            q.put(item, timeout=0.05)
                            break
                        except queue.Full:
                            continue
            except BaseException as exc:  # noqa: BLE001 - forwarded to the consumer
                while not stop.is_set():
                    try:
                        q.put(exc, timeout=0.05)
                        break
                    except queue.Full:
                        continue

        thread = threading.Thread(target=produce, name="WindowLoader-prefetch", daemon=True)
        thread.start()
        try:
            while generation == self._generation:
                item = q.get()
                if isinstance(item, BaseException):
                    raise item
                batch, pos = item
                self._position = pos
                yield batch
        finally:
            stop.set()
            while thread.is_alive():
                try:
                    q.get_nowait()
                except queue.Empty:
                    thread.join(timeout=0.05)

    def global_micro_batches(self, global_batch_size: int | None = None) -> Iterator[list[torch.Tensor]]:
        """Yield, per optimizer step, this rank's ``grad_accum`` micro-batches (a list), forever.

        Step ``s`` (counted from the current position) covers global stream entries
        ``[position + s * B, position + (s + 1) * B)`` with ``B = global_batch_size``; the union over ranks
        of the yielded lists is exactly that set.  Save :meth:`state_dict` between steps to resume exactly.

        Args:
            global_batch_size: Sequences per optimizer step; defaults to :attr:`global_batch_size`.
        """
        accum = self.grad_accum_steps(global_batch_size or self.global_batch_size)
        it = iter(self)
        while True:
            try:
                step = [next(it) for _ in range(accum)]
            except StopIteration:  # invalidated by load_state_dict / close / a newer iterator
                return
            yield step

    def close(self) -> None:
        """Invalidate active iterators (their prefetch threads stop when the iterators are closed or freed)."""
        self._generation += 1

    # -- state --------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Resumable state: global ``position`` (entries consumed by yielded batches), ``epoch`` and identity."""
        return {
            "version": 1,
            "position": self._position,
            "epoch": self.epoch,
            "index_in_epoch": self._position % self.num_windows,
            "seed": self.seed,
            "num_windows": self.num_windows,
            "micro_batch_size": self.micro_batch_size,
            "world_size": self.world_size,
            "seq_len": self.windows.seq_len,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state`` (from :meth:`state_dict`); micro-batch size / world size may differ.

        Raises:
            ValueError: If the seed, number of windows or sequence length differ (the stream would differ).
        """
        for key, mine in (("seed", self.seed), ("num_windows", self.num_windows), ("seq_len", self.windows.seq_len)):
            if key in state and int(state[key]) != mine:
                raise ValueError(f"cannot resume: state has {key}={state[key]}, this loader has {mine}")
        self._position = int(state["position"])
        self._generation += 1
