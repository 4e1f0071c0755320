"""Writing token shards: input sources, tokenization (parallel, deterministic), the split writer, the dataset
fingerprint used for resuming, :func:`prepare_data`, the tiny tokenizer of tests and the demo, and the
``depthbench prepare-data`` command. The on-disk format is described in ``depthbench.data``; reading it is
``depthbench.data.loader``.
"""

from __future__ import annotations

import collections
import datetime as _dt
import glob
import hashlib
import json
import multiprocessing
import os
import re
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from depthbench import atomic

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


TOKENIZER_CONFIG = "tokenizer_config.json"


def finalize_tokenizer_config(directory: str, tokenizer_class: str | None = None,
                              model_max_length: int | None = None) -> dict:
    """Make a saved tokenizer self-describing: ``tokenizer_config.json`` in ``directory`` names its class (so
    ``AutoTokenizer`` picks it from the file, with no model config or package needed) and, when given, the
    maximum length of the model it belongs to (instead of transformers' "unset" 1e30, which lets users encode
    past the model's context without a warning). Returns the updated config; other fields are kept.

    Raises:
        ValueError: ``directory`` holds no tokenizer_config.json, or ``model_max_length`` is not a positive int.
    """
    path = os.path.join(directory, TOKENIZER_CONFIG)
    if not os.path.isfile(path):
        raise ValueError(f"{directory} holds no {TOKENIZER_CONFIG}: save the tokenizer there first")
    if model_max_length is not None and (isinstance(model_max_length, bool) or not isinstance(model_max_length, int)
                                         or model_max_length < 1):
        raise ValueError(f"model_max_length={model_max_length!r} is not allowed: it must be a positive integer (the "
                         "model's context length, e.g. its config.max_position_embeddings)")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    if tokenizer_class is not None:
        config["tokenizer_class"] = tokenizer_class
    config.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
    if model_max_length is not None:
        config["model_max_length"] = model_max_length
    atomic.write_json(path, config, sort_keys=True)
    return config


def save_tokenizer(tokenizer: Any, directory: str, model_max_length: int | None = None) -> None:
    """``tokenizer.save_pretrained(directory)`` plus :func:`finalize_tokenizer_config` (its class and, when given,
    the model's maximum length, also set on ``tokenizer`` itself)."""
    if model_max_length is not None:
        tokenizer.model_max_length = model_max_length
    tokenizer.save_pretrained(str(directory))
    if os.path.isfile(os.path.join(str(directory), TOKENIZER_CONFIG)):  # a transformers tokenizer (not a stand-in)
        finalize_tokenizer_config(str(directory), type(tokenizer).__name__, model_max_length)


def make_tiny_tokenizer(texts: Iterable[str], vocab_size: int = 512, save_dir: str | None = None, *,
                        full_alphabet: bool = True, model_max_length: int | None = None) -> Any:
    """Train a small deterministic byte-level BPE tokenizer.

    The tokenizer has two special tokens, ``<|endoftext|>`` (EOS, id 0) and ``<|pad|>`` (PAD, id 1). With
    ``full_alphabet`` (the default) it holds the full 256-symbol byte alphabet, so it can encode any text;
    without, its alphabet is only the bytes occurring in ``texts`` (for vocabularies below 258, e.g. the
    128-token models of the tests; text with other bytes is then not encodable). Training on ~1 MB of text
    takes well under a second and is deterministic (same texts and vocab size give the same tokenizer).

    Args:
        texts: Training texts.
        vocab_size: Target vocabulary size including the two special tokens; at least 258 with
            ``full_alphabet``, else at least the number of distinct bytes of ``texts`` plus 2.
        save_dir: If given, the tokenizer is saved there with ``save_pretrained`` and that path becomes
            its ``name_or_path``.
        full_alphabet: Keep all 256 bytes in the alphabet (``False``: only the bytes of ``texts``).
        model_max_length: The context length of the model the tokenizer is for (saved with it); ``None`` leaves
            transformers' "unset" value.

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` with ``eos_token`` and ``pad_token`` set.

    Raises:
        ValueError: If ``vocab_size`` is smaller than the alphabet plus the two special tokens.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if full_alphabet:
        alphabet, limit = sorted(pre_tokenizers.ByteLevel.alphabet()), {}
        if vocab_size < len(alphabet) + 2:
            raise ValueError(f"vocab_size must be >= {len(alphabet) + 2} (256 bytes + 2 special tokens), got "
                             f"{vocab_size}")
    else:
        texts = list(texts)
        alphabet = sorted({ch for text in texts for piece, _ in byte_level.pre_tokenize_str(text) for ch in piece})
        limit = {"limit_alphabet": len(alphabet)}
        if vocab_size < len(alphabet) + 2:
            raise ValueError(f"vocab_size={vocab_size} is smaller than the {len(alphabet)} bytes used + 2 special "
                             "tokens")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=alphabet,
        **limit,
    )
    tok.train_from_iterator(iter(texts), trainer)
    kwargs: dict[str, Any] = {}
    if save_dir is not None:
        kwargs["name_or_path"] = str(save_dir)
    if model_max_length is not None:
        kwargs["model_max_length"] = model_max_length
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, **kwargs)
    if save_dir is not None:
        save_tokenizer(fast, str(save_dir), model_max_length)
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

        try:
            pf = pq.ParquetFile(src.path)
        except Exception as exc:  # noqa: BLE001 - pyarrow's errors do not name the file
            raise ValueError(f"{src.path}: cannot read as parquet ({type(exc).__name__}: {exc})") from None
        names = pf.schema_arrow.names
        if text_field not in names:
            raise ValueError(f"{src.path}: parquet file has no column {text_field!r} (columns: {names})")
        for batch in pf.iter_batches(columns=[text_field], batch_size=1024):
            yield from batch.column(0).to_pylist()
    elif src.kind == "jsonl":
        with open(src.path, "rb") as f:
            for lineno, raw_line in enumerate(f, 1):
                line = _decode_line(raw_line, src.path, lineno)
                if line.strip():
                    yield _extract_text(_json_line(line, src.path, lineno), text_field, f"{src.path}:{lineno}")
    elif src.kind == "json":
        with open(src.path, "rb") as f:
            raw = _decode_line(f.read(), src.path, None)
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:  # JSON lines with a .json extension
            data = [_json_line(line, src.path, n) for n, line in enumerate(raw.splitlines(), 1) if line.strip()]
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
        with open(src.path, "rb") as f:
            for lineno, raw_line in enumerate(f, 1):
                yield _decode_line(raw_line, src.path, lineno).rstrip("\r\n")
    elif src.kind == "hf":
        yield from _iter_hf_dataset(src.path, text_field, dataset_config, split)
    else:  # pragma: no cover - guarded by _file_kind
        raise ValueError(f"unsupported source kind {src.kind!r}")


def _decode_line(raw: bytes, path: str, lineno: int | None) -> str:
    """UTF-8 text of ``raw`` (line ``lineno`` of ``path``, or the whole file); a clear error for binary files."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"{path}:{lineno}" if lineno is not None else path
        raise ValueError(f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at position {exc.start}"
                         f"{' of the line' if lineno is not None else ''}); is it a binary file? Input files must "
                         "be UTF-8 text (.txt/.jsonl/.json) or parquet") from None


def _json_line(line: str, path: str, lineno: int) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{lineno}: malformed JSON line ({exc.msg} at column {exc.colno}); each line of a "
                         "JSON-lines file must be one JSON object") from None


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
    model_max_length: int | None = None,
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
        model_max_length: Context length of the model the data is for, saved in ``tokenizer/`` (the tokenizer
            then truncates/warns at the model's limit); ``None`` keeps the tokenizer's own value. Training
            exports write the trained model's ``max_position_embeddings`` into their tokenizer copy anyway.

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
    save_tokenizer(tok, tokenizer_dir, model_max_length)

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
    atomic.write_json(os.path.join(output_dir, "meta.json"), meta, sort_keys=True)
    return meta


# ================================================================================================ CLI
def _cmd_prepare_data(args) -> int:
    """``depthbench prepare-data`` (errors and exit codes: ``depthbench.errors``)."""
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
        model_max_length=args.model_max_length,
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
    p.add_argument("--model-max-length", type=int,
                   help="context length of the model the data is for (max_position_embeddings), saved with the "
                   "tokenizer")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_prepare_data)
