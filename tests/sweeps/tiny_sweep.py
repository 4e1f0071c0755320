"""The tiny real sweep of the sweep family's tests (2 archs x 2 shapes x 2 learning rates, a few steps on a tiny
prepared corpus; built once per session by ``tests/sweeps/conftest.py``) and the helpers that read it."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from depthbench.sweeps.spec import SweepSpec

# The tiny grid's shapes with the width shrunk (model.fields win over the shape): every run takes ~1 s of compute.
SMALL_FIELDS = ["model.fields.hidden_size=32", "model.fields.intermediate_size=64", "model.fields.head_dim=8",
                "model.fields.vocab_size=300", "model.fields.max_position_embeddings=64"]
BASE = {
    "data": {"seq_len": 32, "eval_sequences": 4, "prefetch": 1},
    "train": {"global_batch_size": 4, "micro_batch_size": 4, "max_steps": 3, "progress": False, "log_every": 1},
    "checkpoint": {"hf_export": False, "hash_files": False},
}
ARCHS, SHAPES, LRS = ["pre_ln", "hc"], ["tiny-L2", "tiny-L4"], [1e-3, 3e-3]


def make_spec(data_dir: Path, **kw) -> SweepSpec:
    base = json.loads(json.dumps(BASE))
    base["data"]["data_dir"] = str(data_dir)
    if "steps" in kw:
        base["train"]["max_steps"] = kw.pop("steps")
    args = {"archs": ARCHS, "shapes": SHAPES, "lrs": LRS, "seeds": [0], "base": base, "overrides": SMALL_FIELDS,
            "name": "test"}
    return SweepSpec(**{**args, **kw})


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def copy_sweep(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
