"""The writing side of the shard format (described in ``depthbench.data``): the storage dtype of token ids, shard
names, :class:`SplitWriter` (one split's shards, each written atomically with a completion record, resuming from
the completed ones), the content hash of the written splits, and the detection of a complete earlier output.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from depthbench import atomic

FORMAT_VERSION = 1
"""Version of the shard/meta format written by :func:`prepare_data`."""


def token_dtype(vocab_size: int) -> np.dtype:
    """Storage dtype for token ids: little-endian uint16 if ``vocab_size <= 65536``, else uint32."""
    return np.dtype("<u2") if vocab_size <= 65536 else np.dtype("<u4")


def shard_name(index: int) -> str:
    """The file stem of shard ``index`` of a split (``shard_00000``)."""
    return f"shard_{index:05d}"


class SplitWriter:
    """Buffers one split's token arrays and writes shards (resuming from completed ones)."""

    def __init__(self, output_dir: str, split: str, dtype: np.dtype, shard_tokens: int, fingerprint: str):
        self.output_dir = output_dir
        self.split = split
        self.dtype = dtype
        self.shard_tokens = shard_tokens
        self.fingerprint = fingerprint
        self.dir = os.path.join(output_dir, split)
        os.makedirs(self.dir, exist_ok=True)
        self.shards: list[dict] = []
        self.resume_doc = 0  # global document index up to which this split's documents are already written
        self._load_completed()
        self.buffer: list[np.ndarray] = []
        self.buffer_tokens = 0
        self.buffer_docs = 0

    def _load_completed(self) -> None:
        """Keep the consecutive prefix of valid shards made with the same configuration; delete the rest."""
        index = 0
        while True:
            done = self._completion_record(index)
            if done is None:
                break
            self.shards.append(done["record"])
            self.resume_doc = done["doc_end"]
            index += 1
        # Remove stale shards from other configurations or interrupted runs.
        keep = {f"{shard_name(i)}{ext}" for i in range(index) for ext in (".bin", ".done.json")}
        for fname in os.listdir(self.dir):
            if fname.startswith("shard_") and fname not in keep:
                os.remove(os.path.join(self.dir, fname))

    def _completion_record(self, index: int) -> dict | None:
        """The ``.done.json`` record of shard ``index`` when the shard is complete and was made with this
        configuration; ``None`` otherwise."""
        name = shard_name(index)
        bin_path = os.path.join(self.dir, name + ".bin")
        done_path = os.path.join(self.dir, name + ".done.json")
        if not (os.path.exists(bin_path) and os.path.exists(done_path)):
            return None
        try:
            done = atomic.read_json(done_path)
        except (OSError, ValueError):  # a damaged record is not refused: its shard is simply written again
            return None
        if (
            done.get("fingerprint") != self.fingerprint
            or os.path.getsize(bin_path) != done.get("tokens", -1) * self.dtype.itemsize
        ):
            return None
        return done

    def add(self, doc_index: int, tokens: np.ndarray) -> None:
        self.buffer.append(tokens)
        self.buffer_tokens += len(tokens)
        self.buffer_docs += 1
        if self.buffer_tokens >= self.shard_tokens:
            self.flush(doc_index + 1)

    def flush(self, doc_end: int) -> None:
        if not self.buffer:
            return
        data = np.concatenate(self.buffer).astype(self.dtype, copy=False).tobytes()
        name = shard_name(len(self.shards))
        record = {
            "file": f"{self.split}/{name}.bin",
            "tokens": self.buffer_tokens,
            "documents": self.buffer_docs,
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        atomic.write_bytes(os.path.join(self.dir, name + ".bin"), data)
        atomic.write_json(
            os.path.join(self.dir, name + ".done.json"),
            {
                "fingerprint": self.fingerprint,
                "tokens": self.buffer_tokens,
                "doc_end": doc_end,
                "record": record,
            },
            sort_keys=True,
        )
        self.shards.append(record)
        self.resume_doc = doc_end
        self.buffer, self.buffer_tokens, self.buffer_docs = [], 0, 0

    def summary(self) -> dict:
        return {
            "documents": int(sum(s["documents"] for s in self.shards)),
            "tokens": int(sum(s["tokens"] for s in self.shards)),
            "shards": list(self.shards),
        }


def content_hash(splits: dict[str, dict]) -> str:
    """The sha256 over the per-shard sha256 digests, splits in sorted name order (``meta.json``'s
    ``content_hash``)."""
    h = hashlib.sha256()
    for name in sorted(splits):
        for shard in splits[name]["shards"]:
            h.update(bytes.fromhex(shard["sha256"]))
    return h.hexdigest()


def completed_meta(output_dir: str, fingerprint: str) -> dict | None:
    """Return the existing meta if it was made with ``fingerprint`` and all its shards are intact."""
    try:
        meta = atomic.read_json(os.path.join(output_dir, "meta.json"))
    except (OSError, ValueError):  # a damaged meta.json is not refused: the run redoes what is missing and rewrites it
        return None
    if meta is None:
        return None
    if meta.get("config_fingerprint") != fingerprint or meta.get("format_version") != FORMAT_VERSION:
        return None
    itemsize = np.dtype(meta["dtype"]).itemsize
    for split in meta["splits"].values():
        for shard in split["shards"]:
            p = os.path.join(output_dir, shard["file"])
            if not os.path.exists(p) or os.path.getsize(p) != shard["tokens"] * itemsize:
                return None
    if not os.path.exists(os.path.join(output_dir, meta.get("tokenizer_dir", "tokenizer"))):
        return None
    return meta
