"""The writing side of the shard format (described in ``depthbench.data``): the storage dtype of token ids, shard
names, :class:`ShardFile` (a shard streamed to disk atomically), :class:`SplitWriter` (one split's shards, each
with a completion record, resuming from the completed ones), the content hash of the written splits, and the
detection of a complete earlier output.
"""

from __future__ import annotations

import contextlib
import hashlib
import os

import numpy as np

from depthbench import atomic, runs

FORMAT_VERSION = 1
"""Version of the shard/meta format written by :func:`prepare_data`."""


def token_dtype(vocab_size: int) -> np.dtype:
    """Storage dtype for token ids: little-endian uint16 if ``vocab_size <= 65536``, else uint32."""
    return np.dtype("<u2") if vocab_size <= 65536 else np.dtype("<u4")


def shard_name(index: int) -> str:
    """The file stem of shard ``index`` of a split (``shard_00000``)."""
    return f"shard_{index:05d}"


class ShardFile:
    """One shard written as a stream, atomically: the bytes go to a temporary sibling as they arrive (sha256 taken
    on the way), and :meth:`commit` fsyncs it, renames it over ``path`` and fsyncs the folder, like
    :func:`depthbench.atomic.write_bytes` but without holding the shard in memory. Until then ``path`` does not
    exist; :meth:`abort` removes the temporary file (a process killed before either leaves a ``shard_*.tmp*``
    file, which the next run's :class:`SplitWriter` deletes)."""

    def __init__(self, path: str):
        self.path = path
        self.tmp = f"{path}.tmp{os.getpid()}"
        self.sha256 = hashlib.sha256()
        self.file = open(self.tmp, "wb")  # noqa: SIM115 - closed by commit/abort

    def write(self, data) -> None:
        try:
            self.file.write(data)
        except OSError as exc:  # a full disk names no file: name the shard
            raise OSError(exc.errno, exc.strerror, exc.filename or self.path) from None
        self.sha256.update(data)

    def commit(self) -> str:
        """Make the shard visible at ``path``; returns its sha256 (hex)."""
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.abort()
            raise OSError(exc.errno, exc.strerror, exc.filename or self.path) from None
        atomic.fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        return self.sha256.hexdigest()

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(OSError):
            os.remove(self.tmp)


class SplitWriter:
    """Writes one split's shards as its documents arrive (each shard streamed to disk through a :class:`ShardFile`,
    so memory does not grow with the shard or the corpus), resuming from the completed ones."""

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
        self.file: ShardFile | None = None
        self.buffer_tokens = 0
        self.buffer_docs = 0

    def _load_completed(self) -> None:
        """Keep the consecutive prefix of valid shards made with the same configuration; delete the rest (also the
        temporary files of a run killed while writing)."""
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

    def _write(self, tokens: np.ndarray, documents: int) -> None:
        if self.file is None:
            self.file = ShardFile(os.path.join(self.dir, shard_name(len(self.shards)) + ".bin"))
        self.file.write(np.ascontiguousarray(tokens, dtype=self.dtype).data)
        self.buffer_tokens += len(tokens)
        self.buffer_docs += documents

    def add(self, doc_index: int, tokens: np.ndarray) -> None:
        """Append one document (global index ``doc_index``); closes the shard once it holds ``shard_tokens``."""
        self._write(tokens, 1)
        if self.buffer_tokens >= self.shard_tokens:
            self.flush(doc_index + 1)

    def add_documents(self, doc_indices: np.ndarray, lengths: np.ndarray, tokens: np.ndarray) -> None:
        """Append consecutive documents of this split (global indices ``doc_indices``, token counts ``lengths``,
        ``tokens`` their concatenation), closing a shard after the first document that fills it, exactly as
        :meth:`add` one document at a time would."""
        ends = np.cumsum(lengths)
        start_doc, start_tok = 0, 0
        while start_doc < len(lengths):
            room = self.shard_tokens - self.buffer_tokens  # > 0: a full shard is always closed at once
            base = ends[start_doc - 1] if start_doc else 0
            last = int(np.searchsorted(ends[start_doc:] - base, room))  # first document that fills the shard
            if start_doc + last >= len(lengths):
                self._write(tokens[start_tok:], len(lengths) - start_doc)
                return
            stop_doc = start_doc + last + 1
            stop_tok = int(ends[stop_doc - 1])
            self._write(tokens[start_tok:stop_tok], stop_doc - start_doc)
            self.flush(int(doc_indices[stop_doc - 1]) + 1)
            start_doc, start_tok = stop_doc, stop_tok

    def flush(self, doc_end: int) -> None:
        """Close the open shard (documents up to global index ``doc_end``): commit it, then its ``.done.json``."""
        if self.file is None:
            return
        name = shard_name(len(self.shards))
        record = {
            "file": f"{self.split}/{name}.bin",
            "tokens": self.buffer_tokens,
            "documents": self.buffer_docs,
            "sha256": self.file.commit(),
        }
        self.file = None
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
        self.buffer_tokens, self.buffer_docs = 0, 0

    def abort(self) -> None:
        """Drop the open shard (on an error: nothing half-written stays)."""
        if self.file is not None:
            self.file.abort()
            self.file = None

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
        meta = atomic.read_json(os.path.join(output_dir, runs.DATA_META))
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
