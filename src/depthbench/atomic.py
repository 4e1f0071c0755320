"""Atomic file writes and the JSON reader: the one helper every writer of the package uses (shards, meta.json,
checkpoints, summaries, sweep results), and the one way its JSON files are read back.

A file is written to a temporary sibling, flushed and fsynced, renamed over the target with ``os.replace`` and
the folder is fsynced, so a reader (or a crash at any point) sees either the old file or the complete new one,
never a partial file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from typing import Any


def fsync_dir(path: str) -> None:
    """fsync the folder ``path`` so a rename inside it is durable (a no-op where the OS does not allow it)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, rename, fsync the folder)."""
    tmp = f"{path}.tmp{os.getpid()}"  # per process: two processes never share a temporary file
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    write_bytes(path, text.encode("utf-8"))


def json_safe(obj: Any) -> Any:
    """``obj`` as plain JSON values: every non-finite float (NaN, +-inf) replaced by ``None`` (JSON has no such
    numbers, and ``json.dumps`` would otherwise write a bare ``NaN`` that strict parsers refuse), arrays, tensors and
    their scalars (anything with ``tolist()``: numpy, torch) as lists and numbers, keys JSON cannot hold (a numpy
    integer) as ``str``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k if isinstance(k, (str, int, float, bool)) or k is None else str(k): json_safe(v)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if not isinstance(obj, (str, int)) and callable(getattr(obj, "tolist", None)):  # numpy / torch, not importing them
        return json_safe(obj.tolist())
    return obj


def write_json(path: str, obj: Any, *, sort_keys: bool = False) -> None:
    """Write ``obj`` as indented, valid JSON to ``path`` atomically (values JSON cannot hold are written as
    ``str``; NaN and infinities as ``null``, see :func:`json_safe`)."""
    text = json.dumps(json_safe(obj), indent=2, sort_keys=sort_keys, default=str, allow_nan=False)
    write_text(path, text + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """The JSON content of ``path``; ``None`` when the file does not exist. The reading side of the writers above
    (every JSON file of a run, a sweep or a checkpoint is read through it).

    Raises:
        ValueError: The file exists but is not valid JSON (files written here are never partial, so this is a
            damaged file; the message names it).
    """
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, NotADirectoryError):  # no such file (also: a path through a file)
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{os.fspath(path)} is not valid JSON ({exc}); restore or delete the file") from None
