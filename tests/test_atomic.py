"""``depthbench.atomic``: files are replaced whole (a failed write leaves the old file and no temporary), JSON is
strict (NaN and infinities as ``null``), read back with the standard library's ``json``, and damaged JSON is
named.

Run: ``python -m pytest tests/test_atomic.py -q``
"""

from __future__ import annotations

import json
import os

import pytest

from depthbench import atomic


def test_nan_in_json_files_is_written_as_null(tmp_path):
    path = tmp_path / "x.json"
    atomic.write_json(str(path), {"loss": float("nan"), "eval": {"a": float("inf")}, "ok": [1.5, float("-inf")]})
    assert json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}")) == {
        "loss": None, "eval": {"a": None}, "ok": [1.5, None]}


def test_write_json_is_indented_sorted_on_request_and_stringifies_the_rest(tmp_path):
    path = tmp_path / "x.json"
    obj = {"b": (1, 2), "a": tmp_path}
    atomic.write_json(str(path), obj, sort_keys=True)
    text = path.read_text()
    assert text == json.dumps({"a": str(tmp_path), "b": [1, 2]}, indent=2, sort_keys=True) + "\n"
    assert atomic.read_json(path) == {"a": str(tmp_path), "b": [1, 2]}


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "f.txt"
    atomic.write_text(str(path), "old")

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space left"):
        atomic.write_bytes(str(path), b"new")
    monkeypatch.undo()
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.txt"]
    atomic.write_text(str(path), "néw")
    assert path.read_bytes() == "néw".encode()


def test_read_json_of_a_missing_or_damaged_file(tmp_path):
    assert atomic.read_json(tmp_path / "missing.json") is None
    assert atomic.read_json(tmp_path / "missing" / "x.json") is None
    (tmp_path / "file").write_text("")
    assert atomic.read_json(tmp_path / "file" / "x.json") is None  # a path through a file
    (tmp_path / "bad.json").write_text('{"a": ')
    with pytest.raises(ValueError, match=r"bad.json is not valid JSON .*restore or delete the file"):
        atomic.read_json(tmp_path / "bad.json")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ValueError, match="binary.json is not valid JSON"):
        atomic.read_json(tmp_path / "binary.json")


def test_json_safe_turns_arrays_tensors_and_non_finite_values_into_json():
    import numpy as np
    import torch

    value = {1: np.array([1.5, np.nan]), "t": torch.tensor([[2.0, float("inf")]]), "i": np.int64(3),
             "f": np.float32(0.25), "tuple": (np.float64(-np.inf), "x")}
    text = json.dumps(atomic.json_safe(value), allow_nan=False)  # strict JSON: no NaN / Infinity literals
    assert json.loads(text) == {"1": [1.5, None], "t": [[2.0, None]], "i": 3, "f": 0.25, "tuple": [None, "x"]}
