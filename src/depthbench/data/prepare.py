"""The ``prepare_data`` pipeline: plan a preparation (inputs resolved into sources, the tokenizer, the splits and
the configuration fingerprint used for resuming), read the documents in input order and give each one its split,
tokenize them in chunks (in this process or a pool of workers, with identical output), hand the tokens to the
split writers and write ``meta.json``. The on-disk format is described in ``depthbench.data``; its pieces live in
``depthbench.data.sources`` (inputs), ``depthbench.data.tokenizers``, ``depthbench.data.writer`` (shards) and
``depthbench.data.loader`` (reading); the command is ``depthbench.data.command``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from depthbench import atomic, runs
from depthbench.data.encode import Encoder, encode_chunks
from depthbench.data.sources import Source, iter_source_texts, resolve_sources, source_fingerprint
from depthbench.data.tokenizers import (
    DirectTokenizer,
    load_direct,
    load_tokenizer,
    record_direct,
    save_tokenizer,
    tokenizer_class_name,
    tokenizer_fingerprint,
)
from depthbench.data.writer import FORMAT_VERSION, SplitWriter, completed_meta, content_hash, token_dtype
from depthbench.procfs import usable_cores

_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_CHUNK_DOCS = 1024  # documents per tokenization task


def prepare_data(
    inputs: list[str],
    tokenizer: Any,
    output_dir: str,
    *,
    text_field: str = "text",
    eval_fraction: float = 0.0,
    eval_files: list[str] | None = None,
    shard_tokens: int = 50_000_000,
    num_workers: int | None = None,
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
          per line, field ``text_field``), ``.json`` (a list of objects or strings, streamed; a ``{text_field: [...]}``
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
        num_workers: Tokenizing workers, one core each (``<= 1``: in this thread; ``None``: every core this
            process may use, :func:`depthbench.procfs.usable_cores`).
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
    settings = _Settings(text_field=text_field, eval_fraction=eval_fraction, shard_tokens=shard_tokens,
                         max_documents=max_documents, dataset_config=dataset_config, hf_split=split,
                         append_eos=append_eos)
    plan = _plan(inputs, tokenizer, settings, _split_files(eval_files, extra_splits), model_max_length)
    os.makedirs(output_dir, exist_ok=True)
    existing = completed_meta(output_dir, plan.fingerprint)
    if existing is not None:
        return existing

    tokenizer_dir = os.path.join(output_dir, "tokenizer")
    save_tokenizer(plan.tokenizer, tokenizer_dir, model_max_length)
    writers = {name: SplitWriter(output_dir, name, plan.dtype, shard_tokens, plan.fingerprint)
               for name in plan.split_names}
    from tqdm.auto import tqdm

    bar = tqdm(desc=f"tokenizing -> {output_dir}", unit="doc", disable=not progress, mininterval=1.0)
    encoder = Encoder(plan.tokenizer)
    try:
        workers = usable_cores() if num_workers is None else num_workers
        total_docs = _tokenize_into(writers, plan, encoder, workers, tokenizer_dir, bar)
    finally:
        bar.close()

    if total_docs == 0:
        searched = [s.path for s in plan.sources]
        raise ValueError(f"prepare_data: found zero non-empty documents (field {text_field!r}) in {searched}")
    for w in writers.values():
        w.flush(total_docs)  # the global index after the last document
    splits = {name: w.summary() for name, w in writers.items()}
    for name, s in splits.items():
        if s["documents"] == 0:
            warnings.warn(f"prepare_data: split {name!r} received no documents", stacklevel=2)
    meta = _meta(plan, splits)
    atomic.write_json(os.path.join(output_dir, runs.DATA_META), meta, sort_keys=True)
    if encoder.backend is not None and encoder.checked and not isinstance(plan.tokenizer, DirectTokenizer):
        record_direct(plan.tokenizer, tokenizer, tokenizer_dir, model_max_length)  # next runs skip transformers
    return meta


# ---------------------------------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Settings:
    """The preparation settings that shape the output (part of the fingerprint and of ``meta.json``)."""

    text_field: str
    eval_fraction: float
    shard_tokens: int
    max_documents: int | None
    dataset_config: str | None
    hf_split: str
    append_eos: bool

    def __post_init__(self) -> None:
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in [0, 1), got {self.eval_fraction}")
        if self.shard_tokens <= 0:
            raise ValueError(f"shard_tokens must be positive, got {self.shard_tokens}")


@dataclass(frozen=True)
class _Plan:
    """What a preparation will write, fixed before anything is written."""

    sources: list[Source]
    tokenizer: Any
    eos_id: int
    vocab_size: int
    dtype: np.dtype
    split_names: list[str]
    settings: _Settings
    fingerprint: str


def _split_files(eval_files: list[str] | str | None, extra_splits: dict[str, list[str]] | None) -> dict[str, list]:
    """``{split: [files or globs]}`` of the splits fed by named files (``eval`` from ``eval_files``, then the extra
    splits), the split names checked."""
    split_files: dict[str, list[str]] = {}
    if eval_files:
        split_files["eval"] = [eval_files] if isinstance(eval_files, str) else list(eval_files)
    for name, files in (extra_splits or {}).items():
        if not _SPLIT_NAME.match(name) or name in ("train", "tokenizer"):
            raise ValueError(f"invalid extra split name {name!r}")
        files = [files] if isinstance(files, str) else list(files)
        split_files.setdefault(name, []).extend(files)
    return split_files


def _plan(inputs: list[str], tokenizer: Any, settings: _Settings, split_files: dict[str, list[str]],
          model_max_length: int | None = None) -> _Plan:
    """Resolve the sources, load the tokenizer (it must have an EOS; without transformers where an earlier run's
    check allows it, ``depthbench.data.tokenizers.load_direct``), choose the dtype and the splits, and compute the
    configuration fingerprint."""
    sources = resolve_sources(inputs, split_files)
    tok = load_direct(tokenizer, model_max_length) or load_tokenizer(tokenizer)
    eos_id = getattr(tok, "eos_token_id", None)
    if eos_id is None:
        raise ValueError(
            f"tokenizer {getattr(tok, 'name_or_path', '')!r} has no eos_token; set one (tokenizer.eos_token = ...) "
            "so documents can be separated"
        )
    vocab_size = len(tok)
    dtype = token_dtype(vocab_size)
    auto_eval = ["eval"] if settings.eval_fraction > 0 and "eval" not in split_files else []
    split_names = ["train", *auto_eval, *split_files]
    fingerprint_obj = {
        "format_version": FORMAT_VERSION,
        "tokenizer": tokenizer_fingerprint(tok),
        "dtype": dtype.str,
        "splits": split_names,
        "sources": [source_fingerprint(s) for s in sources],
        "settings": asdict(settings),
    }
    fingerprint = hashlib.sha256(json.dumps(fingerprint_obj, sort_keys=True).encode()).hexdigest()
    return _Plan(sources, tok, eos_id, vocab_size, dtype, split_names, settings, fingerprint)


def _meta(plan: _Plan, splits: dict[str, dict]) -> dict:
    """The content of ``meta.json`` (see ``depthbench.data``)."""
    tok = plan.tokenizer
    return {
        "format_version": FORMAT_VERSION,
        "format": "raw little-endian token ids; documents concatenated, each ending in exactly one EOS",
        "tokenizer": getattr(tok, "name_or_path", "") or "<in-memory tokenizer>",
        "tokenizer_class": tokenizer_class_name(tok),
        "tokenizer_dir": "tokenizer",
        "vocab_size": plan.vocab_size,
        "eos_token_id": plan.eos_id,
        "pad_token_id": getattr(tok, "pad_token_id", None),
        "bos_token_id": getattr(tok, "bos_token_id", None),
        "dtype": plan.dtype.name,
        "splits": splits,
        "sources": [s.describe() for s in plan.sources],
        **asdict(plan.settings),
        "config_fingerprint": plan.fingerprint,
        "content_hash": content_hash(splits),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


# ---------------------------------------------------------------------------------------------------
# Documents and their splits
# ---------------------------------------------------------------------------------------------------


def _documents(plan: _Plan) -> Iterator[tuple[int, str, str]]:
    """Yield (global doc index, split, text) for every non-empty document, honouring max_documents."""
    s = plan.settings
    index = 0
    for src in plan.sources:
        for raw in iter_source_texts(src, s.text_field, s.dataset_config, s.hf_split):
            if s.max_documents is not None and index >= s.max_documents:
                return
            text = _document_text(raw)
            if text is None:
                continue
            yield index, _split_of(src, text, s.eval_fraction), text
            index += 1


def _document_text(raw: Any) -> str | None:
    """The text of a raw document value (non-strings as ``str``); ``None`` for ``None`` or whitespace-only text."""
    if raw is None:
        return None
    text = raw if isinstance(raw, str) else str(raw)
    return text if text.strip() else None


def _split_of(src: Source, text: str, eval_fraction: float) -> str:
    """The split a document goes to: its source's, else ``eval`` when its content hash is below ``eval_fraction``,
    else ``train``."""
    if src.split is not None:
        return src.split
    if eval_fraction > 0 and _doc_hash_fraction(text) < eval_fraction:
        return "eval"
    return "train"


def _doc_hash_fraction(text: str) -> float:
    """Deterministic pseudo-uniform value in [0, 1) from a document's content (blake2b, 64 bits)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


class _Chunks:
    """The documents still to tokenize, as chunks ``((doc indices, splits), texts)`` of up to ``_CHUNK_DOCS``
    documents. Documents already in completed shards (index below ``resume[split]``) are counted in :attr:`seen` and
    the progress bar but skipped."""

    def __init__(self, documents: Iterator[tuple[int, str, str]], resume: dict[str, int], bar: Any):
        self.documents, self.resume, self.bar = documents, resume, bar
        self.seen = 0

    def __iter__(self) -> Iterator[tuple[tuple[list[int], list[str]], list[str]]]:
        indices: list[int] = []
        targets: list[str] = []
        texts: list[str] = []
        resume = self.resume
        skipping = any(resume.values())
        read = 0
        for idx, target, text in self.documents:
            read += 1
            if skipping and idx < resume[target]:
                continue  # already in a completed shard
            indices.append(idx)
            targets.append(target)
            texts.append(text)
            if len(texts) >= _CHUNK_DOCS:
                self._count(read)
                read = 0
                yield (indices, targets), texts
                indices, targets, texts = [], [], []
        self._count(read)
        if texts:
            yield (indices, targets), texts

    def _count(self, read: int) -> None:
        self.seen += read
        self.bar.update(read)


# ---------------------------------------------------------------------------------------------------
# Tokenization
# ---------------------------------------------------------------------------------------------------


def _tokenize_into(writers: dict[str, SplitWriter], plan: _Plan, encoder: Encoder, num_workers: int,
                   tokenizer_dir: str, bar: Any) -> int:
    """Tokenize every document of ``plan`` not yet written (``depthbench.data.encode``) and hand each split's tokens
    to its writer; returns the number of documents read (written before or now)."""
    # Documents of split s with index < resume[s] are already in completed shards (snapshot before writing).
    chunks = _Chunks(_documents(plan), {name: w.resume_doc for name, w in writers.items()}, bar)
    encoded = encode_chunks(chunks, encoder, num_workers, plan.eos_id, plan.settings.append_eos, plan.dtype,
                            tokenizer_dir)
    try:
        for (indices, targets), flat, lengths in encoded:
            doc_indices = np.asarray(indices, dtype=np.int64)
            first = targets[0]
            if targets.count(first) == len(targets):
                writers[first].add_documents(doc_indices, lengths, flat)
                continue
            names = np.asarray(targets)
            for name in dict.fromkeys(targets):
                sel = names == name
                writers[name].add_documents(doc_indices[sel], lengths[sel], flat[np.repeat(sel, lengths)])
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    finally:
        encoded.close()
    return chunks.seen
