"""``depthbench.training.run``: a diverged run's files are valid JSON, a data folder without a tokenizer.

Run: ``python -m pytest tests/training/test_run.py -q``
"""

from __future__ import annotations

import json
import shutil

import pytest

from depthbench.config import RunConfigError, load_run_config
from depthbench.training import run as run_mod
from depthbench.training.errors import NonFiniteLossError
from depthbench.training.trainer import train
from tests.tiny_runs import copy_data, tiny_run


def test_a_diverged_run_writes_valid_json(train_data, tmp_path, monkeypatch):
    real = run_mod.forward_loss
    monkeypatch.setattr(run_mod, "forward_loss", lambda m, ids: real(m, ids) * float("nan"))
    out = tmp_path / "run"
    with pytest.raises(NonFiniteLossError, match=r"--resume optim.lr=<lower>"):
        train(load_run_config(tiny_run(train_data, out)))
    text = (out / "summary.json").read_text()
    summary = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in summary.json"))
    assert summary["status"] == "diverged" and summary["final_train_loss"] is None


def test_missing_tokenizer_is_refused(train_data, tmp_path):
    data = copy_data(train_data, tmp_path / "data")
    shutil.rmtree(data / "tokenizer")
    with pytest.raises(RunConfigError, match=r"has no tokenizer .*could not be evaluated"):
        train(load_run_config(tiny_run(data, tmp_path / "run")))
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
