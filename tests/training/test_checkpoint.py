"""``depthbench.training.checkpoint``: resume without the ``latest`` pointer, incomplete checkpoints, elastic
resume across micro-batch sizes, a full disk during a checkpoint.

Run: ``python -m pytest tests/training/test_checkpoint.py -q``
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from depthbench import atomic
from depthbench.config import load_run_config
from depthbench.errors import exit_code
from depthbench.training import checkpoint
from depthbench.training.errors import CheckpointError, CheckpointWriteError
from depthbench.training.trainer import train
from tests.tiny_runs import tiny_run, train_losses


@pytest.fixture(scope="module")
def straight(train_data, tmp_path_factory) -> Path:
    """The uninterrupted reference run (6 steps, checkpoints at 2, 4, 6)."""
    out = tmp_path_factory.mktemp("straight") / "run"
    train(load_run_config(tiny_run(train_data, out)))
    return out


def test_missing_latest_pointer_resumes_the_newest_complete_checkpoint(train_data, straight, tmp_path, capsys):
    out = tmp_path / "run"
    train(load_run_config(tiny_run(train_data, out), ["train.stop_at_step=4"]))
    ckpts = out / "checkpoints"
    (ckpts / "latest").unlink()
    (ckpts / "ckpt-000004" / "state" / "optimizer.bin").write_bytes(b"cut")  # newest one incomplete: skipped
    capsys.readouterr()
    summary = train(load_run_config(tiny_run(train_data, out), ["resume=auto"]))
    err = capsys.readouterr().err
    assert f"{ckpts / 'latest'} is missing: resuming from {ckpts / 'ckpt-000002'}" in err
    assert summary["status"] == "finished" and summary["steps"] == 6
    assert train_losses(out) == train_losses(straight)  # continued from step 2, not restarted


def test_no_fresh_start_while_only_incomplete_checkpoints_exist(train_data, tmp_path):
    out = tmp_path / "run"
    train(load_run_config(tiny_run(train_data, out), ["train.stop_at_step=2"]))
    (out / "checkpoints" / "latest").unlink()
    (out / "checkpoints" / "ckpt-000002" / "trainer_state.json").unlink()
    before = (out / "metrics.jsonl").read_text()
    with pytest.raises(CheckpointError, match=r"none of the checkpoint folders .* \(ckpt-000002\) is complete.*"
                                              r"refusing to start fresh"):
        train(load_run_config(tiny_run(train_data, out), ["resume=auto"]))
    assert (out / "metrics.jsonl").read_text() == before
    assert (out / "checkpoints" / "ckpt-000002" / "state").is_dir()


def test_micro_batch_change_on_resume_matches_the_uninterrupted_run(train_data, straight, tmp_path):
    out = tmp_path / "run"
    train(load_run_config(tiny_run(train_data, out), ["train.stop_at_step=2"]))  # micro-batch 4: 2 micro-steps
    summary = train(load_run_config(tiny_run(train_data, out), ["resume=true", "train.micro_batch_size=2"]))
    assert summary["status"] == "finished" and summary["steps"] == 6
    a, b = train_losses(straight), train_losses(out)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5, 6]
    for step in a:
        assert b[step] == pytest.approx(a[step], abs=1e-5), step
    record = json.loads((out / "run_config.json").read_text())
    assert record["resolved"]["grad_accum_steps"] == 4
    assert record["history"][-1]["resumed_at_step"] == 2
    assert record["history"][-1]["changes"]["train.micro_batch_size"] == [4, 2]


class _FullDisk:
    """``depthbench.atomic`` whose ``write_json`` of the second checkpoint's trainer_state.json fails with ENOSPC."""

    def __init__(self):
        self.fsync_dir, self.write_text, self.json_safe = atomic.fsync_dir, atomic.write_text, atomic.json_safe

    def write_json(self, path, obj, **kw):
        if path.endswith(os.path.join("ckpt-000004.tmp", "trainer_state.json")):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return atomic.write_json(path, obj, **kw)


def test_disk_full_during_a_checkpoint_names_the_last_good_one(train_data, straight, tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setattr(checkpoint, "atomic", _FullDisk())
    with pytest.raises(CheckpointWriteError) as info:
        train(load_run_config(tiny_run(train_data, out)))
    monkeypatch.undo()
    message = str(info.value)
    assert "cannot write checkpoint" in message and "ckpt-000004: no space left on the device" in message
    assert f"The last good checkpoint is {out / 'checkpoints' / 'ckpt-000002'}" in message
    assert f"depthbench train -c {out / 'run_config.json'} --resume" in message
    assert exit_code(info.value) == 1
    assert not (out / "checkpoints" / "ckpt-000004.tmp").exists()  # the partial copy was removed (frees space)
    summary = train(load_run_config(tiny_run(train_data, out), ["resume=true"]))
    assert summary["status"] == "finished" and train_losses(out) == train_losses(straight)
