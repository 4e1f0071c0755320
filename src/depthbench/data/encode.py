"""Tokenizing the documents of ``prepare_data``: chunks of texts in, ``(flat token array, per-document lengths)`` out,
in order, every document ending in exactly one EOS.

Where the time goes (issue 37): the tokenizer's work itself is Rust and releases the GIL, so the pipeline calls the
``tokenizers`` batch API directly (``Tokenizer.encode_batch_fast`` on a copy of the transformers tokenizer's backend,
configured as ``tokenizer(texts, add_special_tokens=True)`` configures it: no truncation, no padding, the same
special-token splitting) from ``num_workers`` threads of this process, one core each (the library's own Rust thread pool
off, so one worker is one core and two are two; ``prepare-data``'s default is every usable core), which skips
transformers' per-document ``BatchEncoding`` work and the inter-process copies of a process pool. The token lists become
one numpy array per chunk (no per-document arrays). Above :data:`THREADS_UP_TO` workers the Python work left per chunk
(building the id lists) would cap the threads, so a process pool takes over. Any tokenizer that is not a transformers
fast tokenizer (or whose backend gives other ids on the first texts, checked against the tokenizer's own call) is called
as ``tokenizer(texts, add_special_tokens=True)["input_ids"]``.
"""

from __future__ import annotations

import collections
import itertools
import multiprocessing
import os
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

THREADS_UP_TO = 4
"""``num_workers`` up to this tokenize in threads of this process; more use a process pool."""

_CHECK_TEXTS = 16  # first texts on which the backend's ids are compared with the tokenizer's own call


def fast_backend(tokenizer: Any) -> Any | None:
    """A ``tokenizers.Tokenizer`` giving the ids ``tokenizer(texts, add_special_tokens=True)`` gives, for a
    transformers fast tokenizer or a :class:`depthbench.data.tokenizers.DirectTokenizer` (a copy of its backend: the
    wrapper's own backend is reconfigured on every call); ``None`` for any other tokenizer."""
    from depthbench.data.tokenizers import DirectTokenizer, call_backend

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(tokenizer, DirectTokenizer):
        transformers = sys.modules.get("transformers")  # a transformers tokenizer implies transformers is loaded
        if transformers is None or backend is None or not getattr(tokenizer, "is_fast", False):
            return None
        if not isinstance(tokenizer, transformers.PreTrainedTokenizerBase):
            return None
    return call_backend(backend, getattr(tokenizer, "split_special_tokens", False))


class Encoder:
    """``texts -> list of id lists``, the ids of ``tokenizer(texts, add_special_tokens=True)["input_ids"]`` (through
    :func:`fast_backend` where there is one). Picklable: a worker process rebuilds the backend from the tokenizer."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.backend = fast_backend(tokenizer)
        self.checked = False  # whether :meth:`check` compared the backend with the tokenizer's own call

    def __getstate__(self) -> dict:
        return {"tokenizer": self.tokenizer}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["tokenizer"])

    def check(self, texts: list[str]) -> None:
        """Use the backend only if it gives the tokenizer's own ids on ``texts`` (else call the tokenizer). A
        ``DirectTokenizer``'s call is its backend, checked against transformers when it was recorded."""
        from depthbench.data.tokenizers import DirectTokenizer

        if self.backend is not None and texts and not isinstance(self.tokenizer, DirectTokenizer):
            sample = texts[:_CHECK_TEXTS]
            if self._backend_ids(sample) != [list(x) for x in self.tokenizer(sample, add_special_tokens=True)[
                    "input_ids"]]:
                self.backend = None
            self.checked = True

    def _backend_ids(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch_fast(texts, add_special_tokens=True)]

    def __call__(self, texts: list[str]) -> list:
        if self.backend is not None:
            return self._backend_ids(texts)
        return self.tokenizer(texts, add_special_tokens=True)["input_ids"]


def encode_documents(encoder: Any, texts: list[str], eos_id: int, append_eos: bool,
                     dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Tokenize ``texts`` with ``encoder`` (``texts -> id lists``); return (flat token array of ``dtype``,
    per-document lengths), EOS appended to every document not already ending in it when ``append_eos``.

    Raises:
        ValueError: A token id does not fit ``dtype``.
    """
    ids = encoder(texts)
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
    if append_eos and len(ids):
        ends = np.cumsum(lengths)
        last = np.full(len(ids), -1, dtype=np.int64)
        nonempty = lengths > 0
        last[nonempty] = flat[ends[nonempty] - 1]
        need = last != eos_id
        if need.any():
            flat = np.insert(flat, ends[need], eos_id)
            lengths = lengths + need
    if flat.size and (flat.min() < 0 or flat.max() > np.iinfo(dtype).max):
        raise ValueError(f"token id out of range for dtype {dtype}: min {flat.min()}, max {flat.max()}")
    return flat.astype(dtype), lengths


def encode_chunks(chunks: Iterable[tuple[Any, list[str]]], tokenizer: Any, num_workers: int, eos_id: int,
                  append_eos: bool, dtype: np.dtype, tokenizer_dir: str) -> Iterator[tuple]:
    """``(meta, flat tokens, lengths)`` of each ``(meta, texts)`` chunk, in order: in this thread (``num_workers <=
    1``), in ``num_workers`` threads (up to :data:`THREADS_UP_TO`) or processes (more), each worker on one core (the
    tokenizers library's own thread pool is off, so ``num_workers`` is the number of cores used), at most two chunks
    per worker in flight (memory is bounded by the workers and the chunk size, not the corpus). ``tokenizer`` may be an
    :class:`Encoder` (its :meth:`Encoder.check` result then stays readable)."""
    encoder = tokenizer if isinstance(tokenizer, Encoder) else Encoder(tokenizer)
    tokenizer = encoder.tokenizer
    chunks = iter(chunks)
    first = next(chunks, None)
    if first is None:
        return
    encoder.check(first[1])
    chunks = itertools.chain([first], chunks)
    args = (eos_id, append_eos, dtype)
    with _no_tokenizers_parallelism():  # each worker is one thread on one core: no nested Rust thread pool
        if num_workers <= 1:
            for meta, texts in chunks:
                yield meta, *encode_documents(encoder, texts, *args)
        elif num_workers <= THREADS_UP_TO:
            with ThreadPoolExecutor(num_workers, thread_name_prefix="depthbench-tokenize") as pool:
                yield from _in_order(chunks, lambda texts: pool.submit(encode_documents, encoder, texts, *args),
                                     num_workers, lambda future: future.result())
        else:
            with _worker_pool(tokenizer, encoder.backend is not None, num_workers, tokenizer_dir, args) as pool:
                yield from _in_order(chunks, lambda texts: pool.apply_async(_worker_encode, (texts,)), num_workers,
                                     lambda result: result.get())


def _in_order(chunks: Iterable[tuple[Any, list[str]]], submit, num_workers: int, result) -> Iterator[tuple]:
    pending: collections.deque = collections.deque()
    try:
        for meta, texts in chunks:
            pending.append((meta, submit(texts)))
            while len(pending) >= 2 * num_workers:
                done, handle = pending.popleft()
                yield done, *result(handle)
        while pending:
            done, handle = pending.popleft()
            yield done, *result(handle)
    finally:  # an error or an abandoned generator: no more chunks start
        for _, handle in pending:
            getattr(handle, "cancel", lambda: None)()


class _no_tokenizers_parallelism:
    """``TOKENIZERS_PARALLELISM=false`` for the duration (read by ``tokenizers`` at each call; also inherited by forked
    workers, which then do not warn about a fork after parallelism)."""

    def __enter__(self) -> None:
        self.saved = os.environ.get("TOKENIZERS_PARALLELISM")
        os.environ["TOKENIZERS_PARALLELISM"] = "false"

    def __exit__(self, *exc: Any) -> None:
        if self.saved is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = self.saved


def _worker_pool(tokenizer: Any, use_backend: bool, num_workers: int, tokenizer_dir: str, args: tuple) -> Any:
    """A pool of tokenization processes. fork (Linux) starts workers instantly with the tokenizer inherited; elsewhere
    spawn reloads it from the saved copy (scripts then need the usual ``if __name__ == "__main__":`` guard)."""
    use_fork = "fork" in multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if use_fork else "spawn")
    eos_id, append_eos, dtype = args
    return ctx.Pool(num_workers, initializer=_worker_init,
                    initargs=(tokenizer if use_fork else tokenizer_dir, use_backend, eos_id, append_eos,
                              np.dtype(dtype).str))


# Worker-process state for parallel tokenization.
_WORKER: dict[str, Any] = {}


def _worker_init(tokenizer: Any, use_backend: bool, eos_id: int, append_eos: bool, dtype_str: str) -> None:
    """Pool initializer: ``tokenizer`` is the object itself (fork) or its saved directory (spawn); ``use_backend``:
    whether the parent's :meth:`Encoder.check` kept the fast backend."""
    from depthbench.data.tokenizers import load_tokenizer

    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    _WORKER["encoder"] = Encoder(load_tokenizer(tokenizer))
    if not use_backend:
        _WORKER["encoder"].backend = None
    _WORKER["args"] = (eos_id, append_eos, np.dtype(dtype_str))


def _worker_encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    return encode_documents(_WORKER["encoder"], texts, *_WORKER["args"])
