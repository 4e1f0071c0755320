"""Atomic file writes: the one helper every writer of the package uses (shards, meta.json, checkpoints,
summaries, sweep results).

A file is written to a temporary sibling, flushed and fsynced, renamed over the target with ``os.replace`` and
the folder is fsynced, so a reader (or a crash at any point) sees either the old file or the complete new one,
never a partial file.
"""

from __future__ import annotations

import contextlib
import json
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


def write_json(path: str, obj: Any, *, sort_keys: bool = False) -> None:
    """Write ``obj`` as indented JSON (values JSON cannot hold are written as ``str``) to ``path`` atomically."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=sort_keys, default=str) + "\n")
