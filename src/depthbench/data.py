"""Token shards and training windows: the depthbench data pipeline.

This module turns raw text into the binary token format the trainer reads, and serves fixed-length
training windows from it.  It mirrors the reference pipeline (FineWeb-Edu parquet shards, one held-out
shard as the eval split, each document ending in exactly one EOS, raw little-endian ``uint16`` token
files, OLMo-style fixed-sequence-length windows over the concatenated stream, shuffled by seed).

Pieces:

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

import collections
import datetime as _dt
import glob
import hashlib
import json
import multiprocessing
import os
import queue
import re
import threading
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

FORMAT_VERSION = 1
"""Version of the shard/meta format written by :func:`prepare_data`."""

EOS_TOKEN = "<|endoftext|>"
"""EOS token of :func:`make_tiny_tokenizer`."""

PAD_TOKEN = "<|pad|>"
"""PAD token of :func:`make_tiny_tokenizer` (distinct from EOS so label masking never hides EOS)."""

LOCAL_EXTENSIONS = (".parquet", ".jsonl", ".json", ".txt")
"""File types :func:`prepare_data` reads from local paths."""

_GLOB_CHARS = re.compile(r"[*?\[]")
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_CHUNK_DOCS = 256  # documents per tokenization task


# ---------------------------------------------------------------------------------------------------
# Tokenizer helpers
# ---------------------------------------------------------------------------------------------------


def make_tiny_tokenizer(texts: Iterable[str], vocab_size: int = 512, save_dir: str | None = None) -> Any:
    """Train a small deterministic byte-level BPE tokenizer.

    The tokenizer has two special tokens, ``<|endoftext|>`` (EOS, id 0) and ``<|pad|>`` (PAD, id 1), and
    the full 256-symbol byte alphabet, so it can encode any text.  Training on ~1 MB of text takes well
    under a second and is deterministic (same texts and vocab size give the same tokenizer).

    Args:
        texts: Training texts (iterated once).
        vocab_size: Target vocabulary size including the two special tokens; at least 258.
        save_dir: If given, the tokenizer is saved there with ``save_pretrained`` and that path becomes
            its ``name_or_path``.

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` with ``eos_token`` and ``pad_token`` set.

    Raises:
        ValueError: If ``vocab_size`` is smaller than 258 (bytes plus specials).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + 2:
        raise ValueError(f"vocab_size must be >= {len(alphabet) + 2} (256 bytes + 2 special tokens), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=sorted(alphabet),
    )
    tok.train_from_iterator(iter(texts), trainer)
    kwargs: dict[str, Any] = {}
    if save_dir is not None:
        kwargs["name_or_path"] = str(save_dir)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, **kwargs)
    if save_dir is not None:
        fast.save_pretrained(str(save_dir))
    return fast


def _load_tokenizer(tokenizer: Any) -> Any:
    """Return a tokenizer object from a path / hub id, or the object itself."""
    if isinstance(tokenizer, (str, os.PathLike)):
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(str(tokenizer))
        except Exception as exc:  # noqa: BLE001 - re-raised with context
            raise ValueError(
                f"could not load tokenizer {str(tokenizer)!r} (not a local tokenizer directory, and the hub is "
                f"unreachable or has no such repo): {exc}"
            ) from exc
    return tokenizer


def _tokenizer_fingerprint(tokenizer: Any) -> str:
    """A sha256 identifying the tokenizer's behaviour (backend json when available, else vocab)."""
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        h.update(backend.to_str().encode())
    else:
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    for name in ("eos_token_id", "bos_token_id", "pad_token_id"):
        h.update(f"{name}={getattr(tokenizer, name, None)}".encode())
    return h.hexdigest()


def token_dtype(vocab_size: int) -> np.dtype:
    """Storage dtype for token ids: little-endian uint16 if ``vocab_size <= 65536``, else uint32."""
    return np.dtype("<u2") if vocab_size <= 65536 else np.dtype("<u4")


def _encode_documents(tokenizer: Any, texts: list[str], eos_id: int, append_eos: bool, dtype: np.dtype):
    """Tokenize ``texts``; return (flat token array, per-document lengths)."""
    enc = tokenizer(texts, add_special_tokens=True)["input_ids"]
    arrays = []
    lengths = np.empty(len(enc), dtype=np.int64)
    for i, ids in enumerate(enc):
        if append_eos and (len(ids) == 0 or ids[-1] != eos_id):
            ids = list(ids) + [eos_id]
        arrays.append(np.asarray(ids, dtype=np.int64))
        lengths[i] = len(ids)
    flat = np.concatenate(arrays) if arrays else np.empty(0, dtype=np.int64)
    if flat.size and (flat.min() < 0 or flat.max() > np.iinfo(dtype).max):
        raise ValueError(f"token id out of range for dtype {dtype}: min {flat.min()}, max {flat.max()}")
    return flat.astype(dtype), lengths


# Worker-process state for parallel tokenization.
_WORKER: dict[str, Any] = {}


def _worker_init(tokenizer: Any, eos_id: int, append_eos: bool, dtype_str: str) -> None:
    """Pool initializer: ``tokenizer`` is the object itself (fork) or its saved directory (spawn)."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    torch.set_num_threads(1)
    _WORKER["tokenizer"] = _load_tokenizer(tokenizer)
    _WORKER["eos_id"] = eos_id
    _WORKER["append_eos"] = append_eos
    _WORKER["dtype"] = np.dtype(dtype_str)


def _worker_encode(texts: list[str]):
    return _encode_documents(_WORKER["tokenizer"], texts, _WORKER["eos_id"], _WORKER["append_eos"], _WORKER["dtype"])


# ---------------------------------------------------------------------------------------------------
# Input resolution and document reading
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """One input: a local file or a streamed Hugging Face dataset, feeding one split (or ``None`` = auto)."""

    kind: str  # "parquet" | "jsonl" | "json" | "txt" | "hf"
    path: str
    split: str | None

    def describe(self) -> dict:
        return {"kind": self.kind, "path": self.path, "split": self.split or "auto"}


def _file_kind(path: str) -> str | None:
    lower = path.lower()
    for ext in LOCAL_EXTENSIONS:
        if lower.endswith(ext):
            return ext[1:]
    return None


def _expand_local(spec: str) -> list[str] | None:
    """Expand a local file / directory / glob into sorted absolute paths; ``None`` if not a local spec.

    Raises:
        ValueError: If a glob or a path that looks local matches no readable file.
    """
    if os.path.isdir(spec):
        found = sorted(
            os.path.abspath(os.path.join(spec, f))
            for f in os.listdir(spec)
            if _file_kind(f) and os.path.isfile(os.path.join(spec, f))
        )
        if not found:
            raise ValueError(f"input directory {spec!r} contains no {'/'.join(LOCAL_EXTENSIONS)} files")
        return found
    if os.path.isfile(spec):
        if _file_kind(spec) is None:
            raise ValueError(f"input file {spec!r} has an unsupported type; expected one of {LOCAL_EXTENSIONS}")
        return [os.path.abspath(spec)]
    if _GLOB_CHARS.search(spec):
        found = sorted(os.path.abspath(p) for p in glob.glob(spec, recursive=True) if os.path.isfile(p))
        found = [p for p in found if _file_kind(p)]
        if not found:
            raise ValueError(f"no input files match {spec!r} (searched for {'/'.join(LOCAL_EXTENSIONS)} files)")
        return found
    if _file_kind(spec) or spec.startswith((".", "/", "~")) or os.sep + os.sep in spec:
        raise ValueError(f"input file {spec!r} does not exist")
    return None


def _resolve_sources(inputs: list[str], split_files: dict[str, list[str]]) -> list[_Source]:
    """Resolve inputs (auto split) and per-split file lists into an ordered list of sources.

    Files named for a specific split are removed from the auto-split inputs, so
    ``inputs=["data/*.parquet"], eval_files=["data/x.parquet"]`` holds out exactly ``x.parquet``.
    """
    if isinstance(inputs, str):
        inputs = [inputs]
    if not inputs:
        raise ValueError("prepare_data: no inputs given")
    fixed: list[_Source] = []
    claimed: set[str] = set()
    for split, specs in split_files.items():
        for spec in specs:
            local = _expand_local(spec)
            if local is None:
                fixed.append(_Source("hf", spec, split))
                continue
            for p in local:
                if p in claimed:
                    raise ValueError(f"file {p!r} is listed for more than one split")
                claimed.add(p)
                fixed.append(_Source(_file_kind(p), p, split))
    auto: list[_Source] = []
    seen: set[str] = set()
    for spec in inputs:
        local = _expand_local(spec)
        if local is None:
            auto.append(_Source("hf", spec, None))
            continue
        for p in local:
            if p not in claimed and p not in seen:
                seen.add(p)
                auto.append(_Source(_file_kind(p), p, None))
    return auto + fixed


def _source_fingerprint(src: _Source) -> dict:
    d = src.describe()
    if src.kind != "hf":
        size = os.path.getsize(src.path)
        d["size"] = size
        if size <= 256 * 2**20:
            h = hashlib.sha256()
            with open(src.path, "rb") as f:
                for block in iter(lambda: f.read(2**20), b""):
                    h.update(block)
            d["sha256"] = h.hexdigest()
        else:
            d["mtime_ns"] = os.stat(src.path).st_mtime_ns
    return d


def _extract_text(record: Any, text_field: str, where: str) -> Any:
    if isinstance(record, str):
        return record
    if isinstance(record, dict):
        if text_field not in record:
            raise ValueError(f"{where}: record has no field {text_field!r} (fields: {sorted(record)[:20]})")
        return record[text_field]
    raise ValueError(f"{where}: expected a JSON object or string, got {type(record).__name__}")


def _iter_source_texts(src: _Source, text_field: str, dataset_config: str | None, split: str) -> Iterator[Any]:
    """Yield raw document texts of one source (may include empty / None values; filtered by the caller)."""
    if src.kind == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(src.path)
        names = pf.schema_arrow.names
        if text_field not in names:
            raise ValueError(f"{src.path}: parquet file has no column {text_field!r} (columns: {names})")
        for batch in pf.iter_batches(columns=[text_field], batch_size=1024):
            yield from batch.column(0).to_pylist()
    elif src.kind == "jsonl":
        with open(src.path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    yield _extract_text(json.loads(line), text_field, f"{src.path}:{lineno}")
    elif src.kind == "json":
        with open(src.path, encoding="utf-8") as f:
            raw = f.read()
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:  # JSON lines with a .json extension
            data = [json.loads(line) for line in raw.splitlines() if line.strip()]
        if isinstance(data, dict):
            if isinstance(data.get(text_field), list):
                data = data[text_field]
            elif isinstance(data.get("data"), list):
                data = data["data"]
            else:
                data = [data]
        for i, rec in enumerate(data):
            yield _extract_text(rec, text_field, f"{src.path}[{i}]")
    elif src.kind == "txt":
        with open(src.path, encoding="utf-8") as f:
            for line in f:
                yield line.rstrip("\r\n")
    elif src.kind == "hf":
        yield from _iter_hf_dataset(src.path, text_field, dataset_config, split)
    else:  # pragma: no cover - guarded by _file_kind
        raise ValueError(f"unsupported source kind {src.kind!r}")


def _iter_hf_dataset(name: str, text_field: str, dataset_config: str | None, split: str) -> Iterator[Any]:
    hint = (
        f"{name!r} is not an existing local file, directory or glob, so it was treated as a Hugging Face dataset "
        f"id (config={dataset_config!r}, split={split!r}) and streamed with datasets.load_dataset"
    )
    try:
        from huggingface_hub import constants as hub_constants

        offline = bool(getattr(hub_constants, "HF_HUB_OFFLINE", False))
    except Exception:  # noqa: BLE001
        offline = False
    if offline:
        raise ValueError(f"{hint}, but HF_HUB_OFFLINE is set; use local parquet/jsonl/json/txt files offline")
    import datasets

    try:
        ds = datasets.load_dataset(name, dataset_config, split=split, streaming=True)
        it = iter(ds)
        first = next(it, None)
    except Exception as exc:  # noqa: BLE001 - re-raised with context
        raise ValueError(f"{hint}, but loading it failed (no internet, or no such dataset?): {exc}") from exc
    if first is None:
        return
    for rec in _chain_first(first, it):
        yield _extract_text(rec, text_field, name)


def _chain_first(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _doc_hash_fraction(text: str) -> float:
    """Deterministic pseudo-uniform value in [0, 1) from a document's content (blake2b, 64 bits)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


# ---------------------------------------------------------------------------------------------------
# Shard writing
# ---------------------------------------------------------------------------------------------------


def _atomic_write_bytes(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _atomic_write_json(path: str, obj: Any) -> None:
    _atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def _shard_name(index: int) -> str:
    return f"shard_{index:05d}"


class _SplitWriter:
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
            name = _shard_name(index)
            bin_path = os.path.join(self.dir, name + ".bin")
            done_path = os.path.join(self.dir, name + ".done.json")
            if not (os.path.exists(bin_path) and os.path.exists(done_path)):
                break
            try:
                with open(done_path, encoding="utf-8") as f:
                    done = json.load(f)
            except (OSError, json.JSONDecodeError):
                break
            if (
                done.get("fingerprint") != self.fingerprint
                or os.path.getsize(bin_path) != done.get("tokens", -1) * self.dtype.itemsize
            ):
                break
            self.shards.append(done["record"])
            self.resume_doc = done["doc_end"]
            index += 1
        # Remove stale shards from other configurations or interrupted runs.
        keep = {f"{_shard_name(i)}{ext}" for i in range(index) for ext in (".bin", ".done.json")}
        for fname in os.listdir(self.dir):
            if fname.startswith("shard_") and fname not in keep:
                os.remove(os.path.join(self.dir, fname))

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
        name = _shard_name(len(self.shards))
        record = {
            "file": f"{self.split}/{name}.bin",
            "tokens": self.buffer_tokens,
            "documents": self.buffer_docs,
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        _atomic_write_bytes(os.path.join(self.dir, name + ".bin"), data)
        _atomic_write_json(
            os.path.join(self.dir, name + ".done.json"),
            {
                "fingerprint": self.fingerprint,
                "tokens": self.buffer_tokens,
                "doc_end": doc_end,
                "record": record,
            },
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


def _content_hash(splits: dict[str, dict]) -> str:
    h = hashlib.sha256()
    for name in sorted(splits):
        for shard in splits[name]["shards"]:
            h.update(bytes.fromhex(shard["sha256"]))
    return h.hexdigest()


def _existing_meta_if_complete(output_dir: str, fingerprint: str) -> dict | None:
    """Return the existing meta if it was made with ``fingerprint`` and all its shards are intact."""
    path = os.path.join(output_dir, "meta.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, json.JSONDecodeError):
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


def prepare_data(
    inputs: list[str],
    tokenizer: Any,
    output_dir: str,
    *,
    text_field: str = "text",
    eval_fraction: float = 0.0,
    eval_files: list[str] | None = None,
    shard_tokens: int = 50_000_000,
    num_workers: int = 1,
    max_documents: int | None = None,
    dataset_config: str | None = None,
    split: str = "train",
    progress: bool = True,
    append_eos: bool = True,
    extra_splits: dict[str, list[str]] | None = None,
) -> dict:
    """Tokenize documents into token shards and write ``meta.json`` (see the module docstring for the format).

    Inputs:
        * local files, directories or globs: ``.parquet`` (column ``text_field``), ``.jsonl`` (one JSON object
          per line, field ``text_field``), ``.json`` (a list of objects or strings, a ``{text_field: [...]}``
          column dict, or JSON lines), ``.txt`` (**one document per non-empty line**). Globs are expanded
          and sorted; a directory contributes all its supported files (sorted).
        * anything that is not an existing path, glob or path-looking string is taken as a Hugging Face dataset
          id and streamed with ``datasets.load_dataset(id, dataset_config, split=split, streaming=True)``;
          that needs internet (a ``ValueError`` explains the failure offline or with ``HF_HUB_OFFLINE=1``).

    Documents whose text is ``None`` or whitespace-only are skipped and not counted.  Documents are numbered
    in input order (inputs first, then ``eval_files``, then ``extra_splits`` files); ``max_documents`` caps
    that count.

    Splits:
        * ``train``: documents of ``inputs`` not held out.
        * ``eval``: all documents of ``eval_files`` (which are removed from ``inputs`` if a glob also matched
          them), plus, when ``eval_fraction > 0``, each ``inputs`` document whose content hash
          (blake2b-64 of its UTF-8 text, mapped to [0, 1)) is below ``eval_fraction``.  The choice depends only
          on the text, so it is deterministic and identical duplicates land in the same split.
        * ``extra_splits``: ``{name: files}``; all documents of those files go to split ``name``.

    Resuming: each shard is written atomically (temporary file + ``os.replace``) followed by a
    ``shard_XXXXX.done.json`` record containing a fingerprint of the configuration (inputs and their
    content hashes or sizes, tokenizer, settings).  A re-run with the same configuration keeps completed
    shards untouched (documents already written are read but not re-tokenized) and rewrites only the rest;
    if ``meta.json`` is complete and matches, it returns immediately.  Shards from a different
    configuration are deleted.  The output does not depend on ``num_workers``.

    Args:
        inputs: Files / globs / directories, or a Hugging Face dataset id.
        tokenizer: Tokenizer object, local tokenizer directory, or hub id (``AutoTokenizer``).
        output_dir: Directory to write (created if needed).
        text_field: Column / field holding the document text.
        eval_fraction: Fraction of ``inputs`` documents (by content hash) held out for ``eval``.
        eval_files: Files / globs whose documents form (part of) the ``eval`` split.
        shard_tokens: A shard is closed once it holds at least this many tokens.
        num_workers: Tokenization processes (``<= 1``: tokenize in this process).
        max_documents: Stop after this many documents (all splits together).
        dataset_config: Config name for a Hugging Face dataset input.
        split: Split name for a Hugging Face dataset input.
        progress: Show a tqdm progress bar (documents).
        append_eos: Append EOS to documents not already ending in it (disable only for special formats).
        extra_splits: Additional named splits, ``{name: [files or globs]}``.

    Returns:
        The meta dict also written to ``output_dir/meta.json``.

    Raises:
        ValueError: Missing / unmatched inputs, zero documents, tokenizer without EOS, bad arguments.
    """
    if not 0.0 <= eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
    if shard_tokens <= 0:
        raise ValueError(f"shard_tokens must be positive, got {shard_tokens}")
    split_files: dict[str, list[str]] = {}
    if eval_files:
        split_files["eval"] = [eval_files] if isinstance(eval_files, str) else list(eval_files)
    for name, files in (extra_splits or {}).items():
        if not _SPLIT_NAME.match(name) or name in ("train", "tokenizer"):
            raise ValueError(f"invalid extra split name {name!r}")
        files = [files] if isinstance(files, str) else list(files)
        split_files.setdefault(name, []).extend(files)
    sources = _resolve_sources(inputs, split_files)

    tok = _load_tokenizer(tokenizer)
    eos_id = getattr(tok, "eos_token_id", None)
    if eos_id is None:
        raise ValueError(
            f"tokenizer {getattr(tok, 'name_or_path', '')!r} has no eos_token; set one (tokenizer.eos_token = ...) "
            "so documents can be separated"
        )
    vocab_size = len(tok)
    dtype = token_dtype(vocab_size)
    split_names = ["train"] + (["eval"] if eval_fraction > 0 and "eval" not in split_files else []) + list(split_files)

    settings = {
        "text_field": text_field,
        "eval_fraction": eval_fraction,
        "shard_tokens": shard_tokens,
        "max_documents": max_documents,
        "dataset_config": dataset_config,
        "hf_split": split,
        "append_eos": append_eos,
    }
    fingerprint_obj = {
        "format_version": FORMAT_VERSION,
        "tokenizer": _tokenizer_fingerprint(tok),
        "dtype": dtype.str,
        "splits": split_names,
        "sources": [_source_fingerprint(s) for s in sources],
        "settings": settings,
    }
    fingerprint = hashlib.sha256(json.dumps(fingerprint_obj, sort_keys=True).encode()).hexdigest()

    os.makedirs(output_dir, exist_ok=True)
    existing = _existing_meta_if_complete(output_dir, fingerprint)
    if existing is not None:
        return existing

    tokenizer_dir = os.path.join(output_dir, "tokenizer")
    tok.save_pretrained(tokenizer_dir)

    writers = {name: _SplitWriter(output_dir, name, dtype, shard_tokens, fingerprint) for name in split_names}
    # Documents of split s with index < resume[s] are already in completed shards (snapshot before writing).
    resume = {name: w.resume_doc for name, w in writers.items()}

    def documents() -> Iterator[tuple[int, str, str]]:
        """Yield (global doc index, split, text) for every non-empty document, honouring max_documents."""
        index = 0
        for src in sources:
            for text in _iter_source_texts(src, text_field, dataset_config, split):
                if max_documents is not None and index >= max_documents:
                    return
                if text is None:
                    continue
                if not isinstance(text, str):
                    text = str(text)
                if not text.strip():
                    continue
                if src.split is not None:
                    target = src.split
                elif eval_fraction > 0 and _doc_hash_fraction(text) < eval_fraction:
                    target = "eval"
                else:
                    target = "train"
                yield index, target, text
                index += 1

    from tqdm.auto import tqdm

    bar = tqdm(desc=f"tokenizing -> {output_dir}", unit="doc", disable=not progress, mininterval=1.0)
    total_docs = 0

    def consume(metas: list[tuple[int, str]], flat: np.ndarray, lengths: np.ndarray) -> None:
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        for j, (idx, target) in enumerate(metas):
            writers[target].add(idx, flat[offsets[j] : offsets[j + 1]])

    def chunks() -> Iterator[tuple[list[tuple[int, str]], list[str]]]:
        nonlocal total_docs
        metas: list[tuple[int, str]] = []
        texts: list[str] = []
        for idx, target, text in documents():
            total_docs += 1
            bar.update(1)
            if idx < resume[target]:
                continue  # already in a completed shard
            metas.append((idx, target))
            texts.append(text)
            if len(texts) >= _CHUNK_DOCS:
                yield metas, texts
                metas, texts = [], []
        if texts:
            yield metas, texts

    try:
        if num_workers <= 1:
            for metas, texts in chunks():
                consume(metas, *_encode_documents(tok, texts, eos_id, append_eos, dtype))
        else:
            # fork (Linux) starts workers instantly with the tokenizer inherited; elsewhere spawn reloads it
            # from the saved copy (scripts then need the usual ``if __name__ == "__main__":`` guard).
            use_fork = "fork" in multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context("fork" if use_fork else "spawn")
            saved_env = os.environ.get("TOKENIZERS_PARALLELISM")
            os.environ["TOKENIZERS_PARALLELISM"] = "false"  # inherited by forked workers: no fork warning
            try:
                pool = ctx.Pool(
                    num_workers,
                    initializer=_worker_init,
                    initargs=(tok if use_fork else tokenizer_dir, eos_id, append_eos, dtype.str),
                )
            finally:
                if saved_env is None:
                    os.environ.pop("TOKENIZERS_PARALLELISM", None)
                else:
                    os.environ["TOKENIZERS_PARALLELISM"] = saved_env
            with pool:
                pending: collections.deque = collections.deque()
                for metas, texts in chunks():
                    pending.append((metas, pool.apply_async(_worker_encode, (texts,))))
                    while len(pending) >= 2 * num_workers:
                        m, res = pending.popleft()
                        consume(m, *res.get())
                while pending:
                    m, res = pending.popleft()
                    consume(m, *res.get())
    finally:
        bar.close()

    if total_docs == 0:
        searched = [s.path for s in sources]
        raise ValueError(f"prepare_data: found zero non-empty documents (field {text_field!r}) in {searched}")
    end = total_docs  # global index after the last document
    for w in writers.values():
        w.flush(end)

    splits = {name: w.summary() for name, w in writers.items()}
    for name, s in splits.items():
        if s["documents"] == 0:
            warnings.warn(f"prepare_data: split {name!r} received no documents", stacklevel=2)
    meta = {
        "format_version": FORMAT_VERSION,
        "format": "raw little-endian token ids; documents concatenated, each ending in exactly one EOS",
        "tokenizer": getattr(tok, "name_or_path", "") or "<in-memory tokenizer>",
        "tokenizer_class": type(tok).__name__,
        "tokenizer_dir": "tokenizer",
        "vocab_size": vocab_size,
        "eos_token_id": eos_id,
        "pad_token_id": getattr(tok, "pad_token_id", None),
        "bos_token_id": getattr(tok, "bos_token_id", None),
        "dtype": dtype.name,
        "splits": splits,
        "sources": [s.describe() for s in sources],
        **settings,
        "config_fingerprint": fingerprint,
        "content_hash": _content_hash(splits),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    _atomic_write_json(os.path.join(output_dir, "meta.json"), meta)
    return meta


# ---------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------


def load_meta(data_dir: str) -> dict:
    """Read ``data_dir/meta.json``.

    Raises:
        FileNotFoundError: If the file does not exist (the directory was not prepared).
    """
    path = os.path.join(data_dir, "meta.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: {data_dir!r} is not a prepared data directory (run prepare_data)")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


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
                    raise ValueError(f"shard file {path} is corrupt: sha256 differs from meta.json")
            if shard["tokens"] > 0:
                self._paths.append(path)
                sizes.append(shard["tokens"])
        self._offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
        self._maps: list[np.memmap] | None = None

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
            out[filled : filled + take] = maps[shard][local : local + take]
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


# ================================================================================================ CLI
def _cmd_prepare_data(args) -> int:
    extra = {}
    for item in args.extra_split or []:
        name, sep, files = item.partition("=")
        if not sep or not name or not files:
            raise ValueError(f"--extra-split {item!r} is not of the form NAME=FILE[,FILE...]")
        extra[name] = [f for f in files.split(",") if f]
    meta = prepare_data(
        args.inputs,
        args.tokenizer,
        args.output,
        text_field=args.text_field,
        eval_fraction=args.eval_fraction,
        eval_files=args.eval_files,
        shard_tokens=args.shard_tokens,
        num_workers=args.num_workers,
        max_documents=args.max_documents,
        dataset_config=args.dataset_config,
        split=args.split,
        progress=not args.quiet,
        extra_splits=extra or None,
    )
    splits = meta.get("splits", {})
    for name, info in splits.items():
        print(f"{name}: {info.get('documents')} documents, {info.get('tokens')} tokens")
    print(f"wrote {os.path.join(args.output, 'meta.json')} (dtype {meta.get('dtype')}, vocab {meta.get('vocab_size')})")
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "prepare-data",
        help="tokenize parquet/jsonl/txt files (or a Hub dataset) into token shards + meta.json",
        description="Tokenize documents into uint16/uint32 token shards with meta.json and a held-out eval split. "
        "Example: depthbench prepare-data 'fineweb/*.parquet' --tokenizer allenai/OLMo-1B-hf "
        "--eval-files fineweb/013_00008.parquet -o data/fineweb --num-workers 16",
    )
    p.add_argument("inputs", nargs="+", help="files, folders or globs (.parquet/.jsonl/.json/.txt) or a Hub dataset id")
    p.add_argument("--tokenizer", required=True, help="tokenizer path or Hub id")
    p.add_argument("-o", "--output", required=True, help="output folder")
    p.add_argument("--text-field", default="text")
    p.add_argument("--eval-fraction", type=float, default=0.0, help="hold out this fraction of documents (by hash)")
    p.add_argument("--eval-files", nargs="*", help="files that form the eval split")
    p.add_argument("--extra-split", action="append", metavar="NAME=FILES", help="an extra named split from files")
    p.add_argument("--shard-tokens", type=int, default=50_000_000)
    p.add_argument("--num-workers", type=int, default=1)
    p.add_argument("--max-documents", type=int)
    p.add_argument("--dataset-config", help="Hub dataset config name (e.g. sample-10BT)")
    p.add_argument("--split", default="train", help="Hub dataset split")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_prepare_data)
