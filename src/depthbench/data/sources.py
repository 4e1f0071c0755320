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
        # pre_buffer=False: with pyarrow's default the batch reader buffers column chunks ahead, so its memory grows
        # with the file (a 230 MB, 100-row-group file peaked at 350 MB against 130 MB for its tenth)
        pf = pq.ParquetFile(path, pre_buffer=False)
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
    """The records of a ``.json`` file, streamed (memory bounded by the largest record, not the file): a top-level
    list of records or strings, several JSON values one after another (JSON lines under a ``.json`` name), or one
    object, which is a column dict (``{text_field: [...]}`` or ``{"data": [...]}``, read whole) or one record.
    Errors name the file and line."""
    # An input file, not one of ours: not atomic.read_json (it may be JSON lines under a .json name, is streamed, and
    # a decoding error must name the byte).
    with open(path, "rb") as f:
        stream = _JsonStream(f, path)
        first = stream.skip_space()
        if first == "":
            raise ValueError(f"{path}:1: malformed JSON (empty file); a .json file must hold a list of records, a "
                             "column dict or JSON lines")
        if first == "[":
            yield from (extract_text(rec, text_field, f"{path}[{i}]") for i, rec in enumerate(stream.list_items()))
            return
        value = stream.value(lines=False)
        if stream.skip_space() == "":  # one value
            if isinstance(value, dict):
                if isinstance(value.get(text_field), list):
                    value = value[text_field]
                elif isinstance(value.get("data"), list):
                    value = value["data"]
                else:
                    value = [value]
            if not isinstance(value, list):
                raise ValueError(f"{path}: expected a JSON list of records, a column dict or a record, got "
                                 f"{type(value).__name__}")
            for i, rec in enumerate(value):
                yield extract_text(rec, text_field, f"{path}[{i}]")
            return
        yield extract_text(value, text_field, f"{path}[0]")  # JSON lines: one record per value
        i = 1
        while stream.skip_space() != "":
            yield extract_text(stream.value(lines=True), text_field, f"{path}[{i}]")
            i += 1


class _JsonStream:
    """JSON values read one at a time from a binary file (``json.JSONDecoder.raw_decode`` over a sliding window of
    the UTF-8-decoded text, grown while a value does not fit), with the line of every error."""

    _READ = 1 << 20
    _DECODER = json.JSONDecoder()
    _SPACE = re.compile(r"[ \t\n\r]*")

    def __init__(self, file: Any, path: str):
        import codecs

        self.file, self.path = file, path
        self.utf8 = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos = "", 0
        self.bytes_read = 0
        self.lines_before = 0  # newlines in the text already dropped from the window
        self.column_before = 0  # characters of the window's first line that were dropped
        self.eof = False

    def _fill(self, at_least: int) -> bool:
        """Drop the consumed text and read at least ``at_least`` more bytes; False at the end of the file."""
        if self.eof:
            return False
        dropped_nl = self.buf.rfind("\n", 0, self.pos)
        self.lines_before += self.buf.count("\n", 0, self.pos)
        self.column_before = self.pos - dropped_nl - 1 if dropped_nl >= 0 else self.column_before + self.pos
        self.buf, self.pos = self.buf[self.pos:], 0
        raw = self.file.read(max(self._READ, at_least))
        pending = len(self.utf8.getstate()[0])
        try:
            text = self.utf8.decode(raw, final=not raw)
        except UnicodeDecodeError as exc:
            at = self.bytes_read - pending + exc.start
            raise ValueError(f"{self.path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at position {at}); "
                             "is it a binary file? Input files must be UTF-8 text (.txt/.jsonl/.json) or "
                             "parquet") from None
        self.bytes_read += len(raw)
        self.buf += text
        self.eof = not raw
        return True

    def skip_space(self) -> str:
        """Skip whitespace; the next character ('' at the end of the file)."""
        while True:
            self.pos = self._SPACE.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self._fill(0):
                return self.buf[self.pos:self.pos + 1]

    def _where(self, pos: int) -> tuple[int, int]:
        line = self.lines_before + self.buf.count("\n", 0, pos) + 1
        nl = self.buf.rfind("\n", 0, pos)
        return line, (pos - nl if nl >= 0 else self.column_before + pos + 1)

    def value(self, lines: bool) -> Any:
        """The JSON value starting at the current position (``lines``: it is a record of JSON lines, for the
        error message)."""
        while True:
            try:
                obj, end = self._DECODER.raw_decode(self.buf, self.pos)
                if end < len(self.buf) or self.eof:  # a number at the window's end may go on
                    self.pos = end
                    return obj
                error = None
            except json.JSONDecodeError as exc:
                error = exc
                # a value cut by the window's end fails near it (or as an unterminated string): read more and retry
                if not (exc.pos >= len(self.buf) - 16 or exc.msg.startswith("Unterminated string")):
                    self._fail(exc.msg, exc.pos, lines)
            if not self._fill(len(self.buf) - self.pos):
                self._fail(error.msg if error else "Expecting value", error.pos if error else len(self.buf), lines)

    def list_items(self) -> Iterator[Any]:
        """The items of the top-level list starting at the current position ('['); nothing may follow it."""
        self.pos += 1
        if self.skip_space() == "]":
            self.pos += 1
        else:
            while True:
                yield self.value(lines=False)
                c = self.skip_space()
                self.pos += 1
                if c == "]":
                    break
                if c != ",":
                    self._fail("Expecting ',' delimiter or ']'", self.pos - 1, False)
                self.skip_space()
        if self.skip_space() != "":
            self._fail("Extra data after the top-level list", self.pos, False)

    def _fail(self, msg: str, pos: int, lines: bool) -> None:
        line, column = self._where(pos)
        if lines:
            raise ValueError(f"{self.path}:{line}: malformed JSON line ({msg} at column {column}); each line of a "
                             "JSON-lines file must be one JSON object")
        raise ValueError(f"{self.path}:{line}: malformed JSON ({msg} at column {column}); a .json file must hold a "
                         "list of records, a column dict or JSON lines")


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
