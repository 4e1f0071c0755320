"""Token shards and training windows: the depthbench data pipeline.

This module turns raw text into the binary token format the trainer reads, and serves fixed-length
training windows from it.  It mirrors the reference pipeline (FineWeb-Edu parquet shards, one held-out
shard as the eval split, each document ending in exactly one EOS, raw little-endian ``uint16`` token
files, OLMo-style fixed-sequence-length windows over the concatenated stream, shuffled by seed).

Modules (every public name is importable from ``depthbench.data``, loaded on first use): ``prepare`` (the
:func:`prepare_data` pipeline), ``sources`` (inputs and their readers), ``tokenizers`` (loading, saving, the tiny
tokenizer), ``encode`` (tokenizing chunks of documents in threads or processes), ``writer`` (shards and completion
records), ``loader`` (reading shards, windows, the batch loader), ``command`` (``depthbench prepare-data``) and
``synthetic`` (the synthetic depth tasks and the demo corpus). The main pieces:

* :func:`prepare_data` tokenizes parquet / jsonl / json / txt files (or a streamed Hugging Face
  dataset) into shards under ``output_dir`` and writes ``meta.json``; it is parallel, resumable and
  deterministic (the output does not depend on ``num_workers``).
* :class:`TokenShards` memory-maps one prepared split and reads any range of the concatenated stream.
* :class:`TokenWindows` is a ``torch`` dataset of consecutive non-overlapping ``seq_len`` windows.
* :class:`WindowLoader` is the deterministic, exactly resumable, rank-aware micro-batch iterator that the
  trainer uses.
* :func:`make_tiny_tokenizer` trains a small byte-level BPE for tests and the offline demo.

On-disk format (``FORMAT_VERSION`` 1)::

    output_dir/
      meta.json                      # see below
      tokenizer/                     # tokenizer.save_pretrained(...)
      train/shard_00000.bin          # raw little-endian token ids, no header
      train/shard_00000.done.json    # completion record of that shard (used for resuming)
      eval/shard_00000.bin ...       # only when an eval split was requested
      <extra split>/shard_00000.bin  # extra named splits (``extra_splits``)
      .verified.json                 # written by training: shards whose sha256 was checked (``verify_data``)

Token ids are stored as ``uint16`` when ``len(tokenizer) <= 65536`` and as ``uint32`` otherwise.
Documents are concatenated in input order; each one is tokenized with ``add_special_tokens=True`` and
EOS is appended unless the last token already is EOS, so every document ends in exactly one EOS.
Documents never straddle shards: a shard is closed as soon as it holds ``>= shard_tokens`` tokens.

``meta.json`` holds ``format_version``, ``tokenizer`` (name_or_path), ``tokenizer_dir``,
``vocab_size`` (``len(tokenizer)``), ``eos_token_id``, ``pad_token_id``, ``bos_token_id``, ``dtype``,
``splits`` (per split: ``documents``, ``tokens``, ``shards`` = list of ``{"file", "tokens",
"documents", "sha256"}``), ``sources`` (each resolved input and the split it feeds), the preparation
settings, ``config_fingerprint``, ``content_hash`` and ``created`` (UTC, ISO 8601).

``content_hash`` is the sha256 over the per-shard sha256 digests (each digest taken over that shard's raw
bytes), visiting splits in sorted name order and shards in order; identical token data gives an identical
hash regardless of timestamps or paths.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DataError": "loader", "TokenShards": "loader", "TokenWindows": "loader", "WindowLoader": "loader",
    "load_meta": "loader", "verify_data": "loader", "prepare_data": "prepare", "LOCAL_EXTENSIONS": "sources",
    "EOS_TOKEN": "tokenizers", "PAD_TOKEN": "tokenizers", "finalize_tokenizer_config": "tokenizers",
    "make_tiny_tokenizer": "tokenizers", "save_tokenizer": "tokenizers", "FORMAT_VERSION": "writer",
    "token_dtype": "writer",
}
"""Public name -> submodule defining it. Imported on first use (PEP 562), so ``depthbench prepare-data`` does not
load torch (``loader``) and the command line answers at once."""

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'depthbench.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"depthbench.data.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
