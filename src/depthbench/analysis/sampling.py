"""Input windows for the layer analyses: seeded, without replacement, inside documents (study §5.1, fixed).

The study samples its analysis windows as random contiguous spans of the pre-tokenized stream, or, for a text
file, as random start offsets into the whole file repeated until long enough: windows overlap, are drawn with
replacement and cross document boundaries (arXiv 2609.32534, analysis setup). Here a window never crosses a
document boundary (an EOS token) unless ``cross_documents=True``, windows never overlap and are drawn without
replacement, and the draw depends only on ``seed``.

Two sources: a token-shard folder written by ``depthbench prepare-data`` (read with
:class:`depthbench.data.TokenShards`)
or a plain text file (one document per non-empty line, tokenized with the model's tokenizer, each document
followed by the EOS *id*).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

#: At most this many tokens of a shard folder are scanned for document boundaries (from the start of the split).
SCAN_LIMIT = 1 << 26


@dataclass
class WindowSpec:
    """How windows are drawn (recorded in every result file)."""

    num_samples: int = 16
    seq_len: int = 128
    seed: int = 42
    split: str | None = None
    cross_documents: bool = False

    def describe(self) -> dict:
        return dict(self.__dict__)


def _candidate_starts(doc_bounds: list[tuple[int, int]], seq_len: int) -> np.ndarray:
    """Start offsets of every non-overlapping ``seq_len`` window that fits inside one document."""
    starts = [np.arange(a, b - seq_len + 1, seq_len, dtype=np.int64) for a, b in doc_bounds if b - a >= seq_len]
    return np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)


def _documents(tokens: np.ndarray, eos_id: int | None) -> list[tuple[int, int]]:
    """``[start, end)`` of every document of a token stream (each document ends with its EOS, when present)."""
    if eos_id is None:
        return [(0, len(tokens))]
    ends = np.flatnonzero(tokens == eos_id) + 1
    bounds, start = [], 0
    for end in ends.tolist():
        bounds.append((start, end))
        start = end
    if start < len(tokens):
        bounds.append((start, len(tokens)))
    return bounds


def draw_windows(tokens: np.ndarray, eos_id: int | None, spec: WindowSpec) -> np.ndarray:
    """``spec.num_samples`` windows ``[N, seq_len]`` (int64) drawn without replacement from ``tokens``.

    Raises:
        ValueError: Fewer than ``num_samples`` windows fit (the message says how many do and what to change).
    """
    if spec.num_samples < 1 or spec.seq_len < 2:
        raise ValueError(f"need num_samples >= 1 and seq_len >= 2, got {spec.num_samples} and {spec.seq_len}")
    bounds = [(0, len(tokens))] if spec.cross_documents else _documents(tokens, eos_id)
    starts = _candidate_starts(bounds, spec.seq_len)
    if len(starts) < spec.num_samples:
        hint = "" if spec.cross_documents else " or allow windows across documents (--cross-documents)"
        raise ValueError(
            f"only {len(starts)} non-overlapping {spec.seq_len}-token windows fit "
            f"{'in the data' if spec.cross_documents else 'inside single documents'} "
            f"({len(tokens)} tokens); {spec.num_samples} were asked for: lower --num-samples or --seq-len{hint}"
        )
    rng = np.random.default_rng(spec.seed)
    chosen = np.sort(rng.choice(len(starts), size=spec.num_samples, replace=False))
    idx = starts[chosen][:, None] + np.arange(spec.seq_len)[None, :]
    return tokens[idx].astype(np.int64)


def _split_tokens(data_dir: str, split: str) -> tuple[np.ndarray, int | None]:
    from depthbench.data import TokenShards

    shards = TokenShards(data_dir, split)
    tokens = shards.read(0, min(shards.num_tokens, SCAN_LIMIT))
    return np.asarray(tokens, dtype=np.int64), shards.eos_token_id


def count_windows(tokens: np.ndarray, eos_id: int | None, spec: WindowSpec) -> int:
    """How many non-overlapping ``spec.seq_len`` windows :func:`draw_windows` can draw from ``tokens``."""
    bounds = [(0, len(tokens))] if spec.cross_documents else _documents(tokens, eos_id)
    return len(_candidate_starts(bounds, spec.seq_len))


def windows_from_shards(data_dir: str, spec: WindowSpec) -> np.ndarray:
    """Windows from a ``prepare-data`` folder (split ``spec.split``; its first :data:`SCAN_LIMIT` tokens).

    Without a split: the first of ``eval``, the splits whose name starts with ``eval`` (sorted), ``train`` in which
    ``spec.num_samples`` windows fit (``spec.split`` is set to it, so result files record it). When the split
    cannot give them, the error names every split of the folder that can (or says that none can, and how many
    windows each holds)."""
    from depthbench.data import load_meta

    splits = sorted(load_meta(data_dir)["splits"])
    if spec.split is not None:
        if spec.split not in splits:
            raise ValueError(f"--split {spec.split!r} is not a split of {data_dir}; its splits: {', '.join(splits)}")
        order = [spec.split]
    else:
        order = (["eval"] if "eval" in splits else []) + [s for s in splits if s.startswith("eval") and s != "eval"]
        order += ["train"] if "train" in splits else []
        order = order or splits
    counts: dict[str, int] = {}
    for split in order:
        tokens, eos = _split_tokens(data_dir, split)
        counts[split] = count_windows(tokens, eos, spec)
        if counts[split] >= spec.num_samples:
            spec.split = split
            return draw_windows(tokens, eos, spec)
    for split in splits:  # which other splits would give the windows
        if split not in counts:
            counts[split] = count_windows(*_split_tokens(data_dir, split), spec)
    fits = [s for s in splits if counts[s] >= spec.num_samples]
    held = ", ".join(f"{s} {counts[s]}" for s in splits)
    where = "inside single documents" if not spec.cross_documents else "in the data"
    tried = f"split {order[0]!r}" if len(order) == 1 else f"splits {', '.join(order)}"
    if fits:
        hint = f"pass --split {fits[0]}" + (f" (or {', '.join(fits[1:])})" if fits[1:] else "")
    else:
        hint = "lower --num-samples or --seq-len" + ("" if spec.cross_documents else
                                                     " or allow windows across documents (--cross-documents)")
    raise ValueError(f"{spec.num_samples} windows of {spec.seq_len} tokens do not fit {where} of {tried} of "
                     f"{data_dir} (windows per split: {held}): {hint}")


def windows_from_text(path: str, tokenizer, spec: WindowSpec) -> np.ndarray:
    """Windows from a text file: one document per non-empty line, each followed by the tokenizer's EOS id."""
    eos = tokenizer.eos_token_id
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    if not lines:
        raise ValueError(f"{path} has no non-empty lines")
    ids: list[int] = []
    for encoded in tokenizer(lines, add_special_tokens=False)["input_ids"]:
        ids.extend(encoded)
        if eos is not None:
            ids.append(eos)
    return draw_windows(np.asarray(ids, dtype=np.int64), eos, spec)


def load_windows(data: str, spec: WindowSpec, tokenizer=None) -> np.ndarray:
    """Windows from ``data``: a token-shard folder (has ``meta.json``) or a text file (needs ``tokenizer``)."""
    if os.path.isdir(data):
        return windows_from_shards(data, spec)
    if os.path.isfile(data):
        if tokenizer is None:
            raise ValueError(f"{data} is a text file: a tokenizer is needed (none found with the model)")
        return windows_from_text(data, tokenizer, spec)
    raise FileNotFoundError(f"--data {data!r} is neither a token-shard folder (prepare-data output) nor a text file")


def micro_batches(windows: np.ndarray, micro_batch_size: int):
    """Consecutive micro-batches of windows as int64 tensors."""
    import torch

    for i in range(0, len(windows), micro_batch_size):
        yield torch.from_numpy(np.ascontiguousarray(windows[i : i + micro_batch_size]))
