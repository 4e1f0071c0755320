"""Inputs of ``prepare_data``: resolving files, folders, globs and Hugging Face dataset ids into :class:`Source`
objects (each feeding one split, or the automatic train/eval split), the fingerprint of a source's content, and
the readers that yield the raw document texts of each format (parquet, JSON lines, JSON, text lines, a streamed
Hub dataset). Every reading error names the file (and line) it comes from.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

LOCAL_EXTENSIONS = (".parquet", ".jsonl", ".json", ".txt")
"""File types :func:`prepare_data` reads from local paths."""

_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Source:
    """One input: a local file or a streamed Hugging Face dataset, feeding one split (or ``None`` = auto)."""

    kind: str  # "parquet" | "jsonl" | "json" | "txt" | "hf"
    path: str
    split: str | None

    def describe(self) -> dict:
        return {"kind": self.kind, "path": self.path, "split": self.split or "auto"}


# ---------------------------------------------------------------------------------------------------
# Resolving inputs
# ---------------------------------------------------------------------------------------------------


def file_kind(path: str) -> str | None:
    """The source kind of a local file from its extension (``None``: not a supported type)."""
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
            if file_kind(f) and os.path.isfile(os.path.join(spec, f))
        )
        if not found:
            raise ValueError(f"input directory {spec!r} contains no {'/'.join(LOCAL_EXTENSIONS)} files")
        return found
    if os.path.isfile(spec):
        if file_kind(spec) is None:
            raise ValueError(f"input file {spec!r} has an unsupported type; expected one of {LOCAL_EXTENSIONS}")
        return [os.path.abspath(spec)]
    if _GLOB_CHARS.search(spec):
        found = sorted(os.path.abspath(p) for p in glob.glob(spec, recursive=True) if os.path.isfile(p))
        found = [p for p in found if file_kind(p)]
        if not found:
            raise ValueError(f"no input files match {spec!r} (searched for {'/'.join(LOCAL_EXTENSIONS)} files)")
        return found
    if file_kind(spec) or spec.startswith((".", "/", "~")) or os.sep + os.sep in spec:
        raise ValueError(f"input file {spec!r} does not exist")
    return None


def resolve_sources(inputs: list[str], split_files: dict[str, list[str]]) -> list[Source]:
    """Resolve inputs (auto split) and per-split file lists into an ordered list of sources.

    Files named for a specific split are removed from the auto-split inputs, so
    ``inputs=["data/*.parquet"], eval_files=["data/x.parquet"]`` holds out exactly ``x.parquet``.
    """
    if isinstance(inputs, str):
        inputs = [inputs]
    if not inputs:
        raise ValueError("prepare_data: no inputs given")
    fixed: list[Source] = []
    claimed: set[str] = set()
    for split, specs in split_files.items():
        for spec in specs:
            local = _expand_local(spec)
            if local is None:
                fixed.append(Source("hf", spec, split))
                continue
            for p in local:
                if p in claimed:
                    raise ValueError(f"file {p!r} is listed for more than one split")
                claimed.add(p)
                fixed.append(Source(file_kind(p), p, split))
    auto: list[Source] = []
    seen: set[str] = set()
    for spec in inputs:
        local = _expand_local(spec)
        if local is None:
            auto.append(Source("hf", spec, None))
            continue
        for p in local:
            if p not in claimed and p not in seen:
                seen.add(p)
                auto.append(Source(file_kind(p), p, None))
    return auto + fixed


def source_fingerprint(src: Source) -> dict:
    """:meth:`Source.describe` plus what identifies the content of a local file: its size and, up to 256 MiB, its
    sha256 (larger files: their modification time)."""
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


# ---------------------------------------------------------------------------------------------------
# Reading documents
# ---------------------------------------------------------------------------------------------------


def iter_source_texts(src: Source, text_field: str, dataset_config: str | None, split: str) -> Iterator[Any]:
    """Yield raw document texts of one source (may include empty / None values; filtered by the caller)."""
    if src.kind == "hf":
        return _iter_hf_dataset(src.path, text_field, dataset_config, split)
    reader = _READERS.get(src.kind)
    if reader is None:  # pragma: no cover - guarded by file_kind
        raise ValueError(f"unsupported source kind {src.kind!r}")
    return reader(src.path, text_field)


def _iter_parquet(path: str, text_field: str) -> Iterator[Any]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors do not name the file
        raise ValueError(f"{path}: cannot read as parquet ({type(exc).__name__}: {exc})") from None
    names = pf.schema_arrow.names
    if text_field not in names:
        raise ValueError(f"{path}: parquet file has no column {text_field!r} (columns: {names})")
    for batch in pf.iter_batches(columns=[text_field], batch_size=1024):
        yield from batch.column(0).to_pylist()


def _iter_jsonl(path: str, text_field: str) -> Iterator[Any]:
    with open(path, "rb") as f:
        for lineno, raw_line in enumerate(f, 1):
            line = _decode_line(raw_line, path, lineno)
            if line.strip():
                yield extract_text(_json_line(line, path, lineno), text_field, f"{path}:{lineno}")


def _iter_json(path: str, text_field: str) -> Iterator[Any]:
    # An input file, not one of ours: not atomic.read_json, because it may be JSON lines under a .json name and a
    # decoding error must name the byte.
    with open(path, "rb") as f:
        raw = _decode_line(f.read(), path, None)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:  # JSON lines with a .json extension
        data = [_json_line(line, path, n) for n, line in enumerate(raw.splitlines(), 1) if line.strip()]
    if isinstance(data, dict):
        if isinstance(data.get(text_field), list):
            data = data[text_field]
        elif isinstance(data.get("data"), list):
            data = data["data"]
        else:
            data = [data]
    for i, rec in enumerate(data):
        yield extract_text(rec, text_field, f"{path}[{i}]")


def _iter_txt(path: str, text_field: str) -> Iterator[Any]:
    with open(path, "rb") as f:
        for lineno, raw_line in enumerate(f, 1):
            yield _decode_line(raw_line, path, lineno).rstrip("\r\n")


_READERS = {"parquet": _iter_parquet, "jsonl": _iter_jsonl, "json": _iter_json, "txt": _iter_txt}
"""Reader of each local file kind: ``reader(path, text_field)`` yields the file's raw document texts."""


def extract_text(record: Any, text_field: str, where: str) -> Any:
    """The text of one record: the record itself when it is a string, else its ``text_field``."""
    if isinstance(record, str):
        return record
    if isinstance(record, dict):
        if text_field not in record:
            raise ValueError(f"{where}: record has no field {text_field!r} (fields: {sorted(record)[:20]})")
        return record[text_field]
    raise ValueError(f"{where}: expected a JSON object or string, got {type(record).__name__}")


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
        yield extract_text(rec, text_field, name)


def _chain_first(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest
