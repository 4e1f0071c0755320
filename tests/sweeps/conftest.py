"""Fixtures of the sweep family's tests: the small demo corpus and the finished tiny sweep of
``tests/sweeps/tiny_sweep.py``, built once per session (tests that modify the sweep work on a copy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from depthbench.sweeps.runner import run_sweep
from tests.sweeps.tiny_sweep import make_spec


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """A small demo corpus (train, eval_text, eval_synthetic; 300-token BPE), built in a few seconds."""
    from depthbench.data.synthetic import build_demo_corpus

    path = tmp_path_factory.mktemp("sweep_data") / "data"
    build_demo_corpus(str(path), synthetic_docs=600, eval_synthetic_docs=40, text_fraction=0.3, vocab_size=300)
    return path


@pytest.fixture(scope="session")
def sweep_dir(data_dir, tmp_path_factory) -> Path:
    """The finished tiny sweep (8 runs); tests that modify it work on a copy."""
    out = tmp_path_factory.mktemp("sweep") / "out"
    logs: list[str] = []
    rows = run_sweep(make_spec(data_dir), str(out), log=logs.append)
    assert len(rows) == 8 and all(r["status"] == "finished" for r in rows), logs
    return out
