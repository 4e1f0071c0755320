"""Resume tests of ``depthbench train``: exact continuation (every logged loss and the final parameters equal an
uninterrupted run), SIGTERM in a subprocess, corrupt / incomplete checkpoints, crashes during a save, and the
rules for resuming into an output folder.

Run: ``python -m pytest tests/training/test_resume.py -q``
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from depthbench.config import RunConfigError, load_run_config
from depthbench.training import checkpoint as checkpoint_mod
from depthbench.training.errors import CheckpointError
from depthbench.training.trainer import train
from tests.helpers import TINY_FIELDS, make_train_data


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_train_data(tmp_path_factory.mktemp("resume_data") / "data")


def run_dict(data_dir: Path, out: Path) -> dict:
    return {
        "model": {"arch": "pre_ln", "fields": TINY_FIELDS},
        "data": {"data_dir": str(data_dir), "seq_len": 32, "eval_sequences": 4, "prefetch": 2},
        "train": {"global_batch_size": 8, "micro_batch_size": 4, "max_steps": 6, "eval_every": 2, "progress": False,
                  "mixed_precision": "no"},
        "optim": {"lr": 5e-3},
        "checkpoint": {"every": 2, "keep_last": 2, "hf_export": False},
        "output_dir": str(out),
    }


def losses(out: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["train/loss"] for r in rows if "train/loss" in r}


def eval_losses(out: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["eval/eval/loss"] for r in rows if "eval/eval/loss" in r}


def test_resume_is_exact(data_dir, tmp_path):
    straight = tmp_path / "straight"
    train(load_run_config(run_dict(data_dir, straight)))

    sliced = tmp_path / "sliced"
    first = train(load_run_config(run_dict(data_dir, sliced), ["train.stop_at_step=3"]))
    assert first["status"] == "stopped" and first["steps"] == 3
    assert (sliced / "checkpoints" / "latest").read_text() == "ckpt-000003"
    second = train(load_run_config(run_dict(data_dir, sliced), ["resume=true"]))
    assert second["status"] == "finished" and second["steps"] == 6 and second["tokens"] == 6 * 8 * 32

    a, b = losses(straight), losses(sliced)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5, 6]
    assert a == b  # exact equality of every logged loss
    assert eval_losses(straight) == eval_losses(sliced)
    pa, pb = load_file(straight / "final" / "model.safetensors"), load_file(sliced / "final" / "model.safetensors")
    assert pa.keys() == pb.keys()
    assert all(torch.equal(pa[k], pb[k]) for k in pa)


def test_resume_auto_and_refusals(data_dir, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(CheckpointError, match="no checkpoint to resume"):
        train(load_run_config(run_dict(data_dir, out), ["resume=true"]))
    summary = train(load_run_config(run_dict(data_dir, out), ["resume=auto", "train.stop_at_step=2"]))
    assert summary["steps"] == 2  # "auto" with nothing to resume starts fresh
    with pytest.raises(RunConfigError, match=r"differs in optim.weight_decay \(0.1 in the run, 0.2 now\): it is "):
        train(load_run_config(run_dict(data_dir, out), ["resume=true", "optim.weight_decay=0.2"]))
    summary = train(load_run_config(run_dict(data_dir, out), ["resume=auto", "train.stop_at_step=3"]))
    assert summary["steps"] == 3 and sorted(losses(out)) == [1, 2, 3]


def _checkpointed_run(data_dir: Path, out: Path) -> Path:
    train(load_run_config(run_dict(data_dir, out), ["train.stop_at_step=2"]))
    return out / "checkpoints" / "ckpt-000002"


@pytest.mark.parametrize("damage, match", [
    ("flip", r"model.safetensors is corrupt: sha256"),
    ("truncate", r"optimizer.bin is corrupt: \d+ bytes"),
    ("delete_state", r"cannot read .*trainer_state.json"),
    ("delete_file", r"random_states_0.pkl is missing"),
    ("dangling_latest", r"latest names 'ckpt-000009'"),
])
def test_corrupt_checkpoint_is_a_clear_error(data_dir, tmp_path, damage, match):
    out = tmp_path / "run"
    ckpt = _checkpointed_run(data_dir, out)
    if damage == "flip":
        path = ckpt / "state" / "model.safetensors"
        data = bytearray(path.read_bytes())
        data[-3] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path = ckpt / "state" / "optimizer.bin"
        path.write_bytes(path.read_bytes()[:-10])
    elif damage == "delete_state":
        (ckpt / "trainer_state.json").unlink()
    elif damage == "delete_file":
        (ckpt / "state" / "random_states_0.pkl").unlink()
    else:
        (out / "checkpoints" / "latest").write_text("ckpt-000009")
    before = (out / "metrics.jsonl").read_text()
    with pytest.raises(CheckpointError, match=match):
        train(load_run_config(run_dict(data_dir, out), ["resume=true"]))
    assert (out / "metrics.jsonl").read_text() == before  # nothing was restarted from scratch


def test_crash_during_save_keeps_the_previous_checkpoint(data_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    real_save_state = checkpoint_mod.Checkpointer.save
    calls = {"n": 0}

    def crashing_save(self, state, model, tokenizer_dir, hf_export=True):
        calls["n"] += 1
        if calls["n"] == 2:  # the second save dies half-way: state written, nothing renamed
            self.acc.save_state(os.path.join(self.root, f"ckpt-{state.step:06d}.tmp", "state"))
            raise OSError("disk full (simulated)")
        return real_save_state(self, state, model, tokenizer_dir, hf_export)

    monkeypatch.setattr(checkpoint_mod.Checkpointer, "save", crashing_save)
    with pytest.raises(OSError, match="simulated"):
        train(load_run_config(run_dict(data_dir, out)))
    monkeypatch.undo()
    ckpts = out / "checkpoints"
    assert (ckpts / "latest").read_text() == "ckpt-000002"
    assert (ckpts / "ckpt-000004.tmp").is_dir()
    summary = train(load_run_config(run_dict(data_dir, out), ["resume=true"]))
    assert summary["status"] == "finished" and summary["steps"] == 6
    assert not (ckpts / "ckpt-000004.tmp").exists()  # stale partial save cleaned up
    assert sorted(p.name for p in ckpts.iterdir()) == ["ckpt-000004", "ckpt-000006", "latest"]


def test_sigterm_saves_a_checkpoint_and_exits_cleanly(data_dir, tmp_path):
    out = tmp_path / "run"
    cfg = run_dict(data_dir, out)
    cfg["train"].update(max_steps=100000, eval_every=0)
    cfg["checkpoint"]["every"] = 0
    (tmp_path / "run.json").write_text(json.dumps(cfg))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "depthbench.training", "-c", str(tmp_path / "run.json")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            metrics = out / "metrics.jsonl"
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["stopped_by"] == "SIGTERM"
    step = summary["steps"]
    assert step >= 3
    assert (out / "checkpoints" / "latest").read_text() == f"ckpt-{step:06d}"
    assert "continue with --resume" in err
    resumed = train(load_run_config(cfg, ["resume=true", f"train.stop_at_step={step + 1}"]))
    assert resumed["steps"] == step + 1
    assert sorted(losses(out)) == list(range(1, step + 2))


def test_resuming_a_finished_run_changes_nothing(data_dir, tmp_path):
    out = tmp_path / "run"
    first = train(load_run_config(run_dict(data_dir, out), ["train.max_steps=2"]))
    assert first["status"] == "finished"
    before = (out / "summary.json").read_bytes()
    again = train(load_run_config(run_dict(data_dir, out), ["train.max_steps=2", "resume=true"]))
    assert again == json.loads(before)
    assert (out / "summary.json").read_bytes() == before
