"""A tiny training run of ``depthbench train`` (six steps, checkpoints at 2, 4, 6) for the tests of the
trainer's parts, and readers of its files. The prepared data is the session fixture ``train_data``
(tests/conftest.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.helpers import TINY_FIELDS


def tiny_run(train_data: Path, out: Path) -> dict:
    return {
        "model": {"arch": "pre_ln", "fields": TINY_FIELDS},
        "data": {"data_dir": str(train_data), "seq_len": 32, "eval_sequences": 4, "prefetch": 1},
        "train": {"global_batch_size": 8, "micro_batch_size": 4, "max_steps": 6, "progress": False,
                  "mixed_precision": "no"},
        "optim": {"lr": 5e-3},
        "checkpoint": {"every": 2, "keep_last": 3, "hf_export": False},
        "output_dir": str(out),
    }


def metric_rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def train_losses(out: Path) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in metric_rows(out) if "train/loss" in r}


def copy_data(train_data: Path, dst: Path) -> Path:
    shutil.copytree(train_data, dst)
    return dst
