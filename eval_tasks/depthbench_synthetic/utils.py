"""Data loading for the ``depthbench_synthetic`` lm-eval tasks (referenced from the YAMLs as ``!function``).

The rows live in ``data/{test,dev}.jsonl`` next to this file (written by ``make_data.py``).  They are read by
path relative to *this file*, so the tasks work from any working directory, with ``lm_eval --include_path``
pointing at ``eval_tasks/`` or at a copy of it.  Only ``datasets`` and the standard library are needed (no
``depthbench`` import), and nothing is downloaded or cached.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets

DATA_DIR = Path(__file__).resolve().parent / "data"
SPLIT_FILES = {"test": "test.jsonl", "validation": "dev.jsonl"}
FAMILIES = ("pointer", "permutation", "arithmetic", "variables")


def read_rows(split: str = "test") -> list[dict]:
    """The JSON rows of ``split`` (``"test"`` or ``"validation"``) in file order."""
    with open(DATA_DIR / SPLIT_FILES[split], encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_local(family: str | None = None, **_: Any) -> datasets.DatasetDict:
    """Build the task's ``DatasetDict`` with splits ``test`` and ``validation`` (the few-shot pool).

    lm-eval calls ``custom_dataset(**metadata, **dataset_kwargs)``; the task's ``metadata`` (``version`` and
    whatever ``--metadata`` adds) is ignored, and ``dataset_kwargs: {family: <name>}`` keeps one task family.

    Args:
        family: One of ``pointer``, ``permutation``, ``arithmetic``, ``variables``; ``None`` keeps all rows.

    Raises:
        ValueError: For an unknown ``family``.
    """
    if family is not None and family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")
    splits = {}
    for split in SPLIT_FILES:
        rows = [r for r in read_rows(split) if family is None or r["task"] == family]
        splits[split] = datasets.Dataset.from_list(rows)
    return datasets.DatasetDict(splits)
