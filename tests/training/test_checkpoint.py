"""``depthbench.training.checkpoint``: resume without the ``latest`` pointer, incomplete checkpoints, elastic
resume across micro-batch sizes, a full disk during a checkpoint;
and whose checkpoint it is.

A checkpoint records the model that wrote it, and a run refuses another model's checkpoint in every format.

``trainer_state.json`` records ``"model": {"arch", "keys"}`` (every tensor's name and shape). A checkpoint of
another architecture copied into a run folder as ``latest`` is refused on resume, naming both architectures and
the first differing keys: in the one-process format (accelerate's ``model.safetensors``) and in the sharded one
(``torch.distributed.checkpoint``, whose loader fills only the keys the model asks for and so loaded an HC
checkpoint into a Pre-LN run without a word). ``pre_ln`` and ``post_ln`` have the same tensor names and shapes,
so only the recorded architecture tells their checkpoints apart. A checkpoint written before the record is
checked by the key set its files hold, and the run says that the architecture could not be checked.

The 2-process FSDP2 case (and the launcher's exit code) is in ``tests/training/test_fsdp2.py``.

Run: ``python -m pytest tests/training/test_checkpoint.py -q``
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from depthbench import atomic
from depthbench.config import load_run_config
from depthbench.errors import exit_code
from depthbench.training import checkpoint
from depthbench.training.errors import CheckpointError, CheckpointWriteError
from depthbench.training.trainer import train
from tests.helpers import REPO_ROOT, TINY_FIELDS, make_train_data
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


# ================================================================ whose checkpoint it is
@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_train_data(tmp_path_factory.mktemp("ckpt_data") / "data")


def run_dict(data_dir: Path, out: Path, arch: str, **train_settings) -> dict:
    return {
        "model": {"arch": arch, "fields": dict(TINY_FIELDS)},
        "data": {"data_dir": str(data_dir), "seq_len": 32, "eval_sequences": 2},
        "train": {"global_batch_size": 4, "micro_batch_size": 4, "max_steps": 4, "stop_at_step": 2,
                  "progress": False, "mixed_precision": "no", **train_settings},
        "checkpoint": {"every": 2, "hf_export": False},
        "output_dir": str(out),
    }


def copy_in_as_latest(source_run: Path, target_run: Path) -> Path:
    """Replace ``target_run``'s latest checkpoint by ``source_run``'s (the mix-up of a copied folder)."""
    ckpts = target_run / "checkpoints"
    name = (ckpts / "latest").read_text().strip()
    shutil.rmtree(ckpts / name)
    shutil.copytree(source_run / "checkpoints" / name, ckpts / name)
    return ckpts / name


def record(ckpt: Path) -> dict:
    return json.loads((ckpt / "trainer_state.json").read_text())


def resume(data_dir: Path, out: Path, arch: str) -> dict:
    return train(load_run_config(run_dict(data_dir, out, arch, stop_at_step=None), ["resume=true"]))


@pytest.fixture(scope="module")
def stopped_runs(data_dir, tmp_path_factory) -> dict[str, Path]:
    """One-process runs stopped at their step-2 checkpoint, per architecture."""
    root = tmp_path_factory.mktemp("ckpt_runs")
    runs = {}
    for arch in ("pre_ln", "post_ln", "hc"):
        train(load_run_config(run_dict(data_dir, root / arch, arch)))
        runs[arch] = root / arch
    return runs


def fresh_copy(run: Path, tmp_path: Path) -> Path:
    dest = tmp_path / run.name
    shutil.copytree(run, dest)
    return dest


def test_every_checkpoint_records_its_architecture_and_key_set(stopped_runs):
    from depthbench.training.model_state import saved_keys

    for arch, run in stopped_runs.items():
        ckpt = run / "checkpoints" / "ckpt-000002"
        model = record(ckpt)["model"]
        assert model["arch"] == arch
        # the record is the key set the checkpoint's files hold (read from the safetensors header)
        assert model["keys"] == saved_keys(str(ckpt / "state"))
        assert "model.embed_tokens.weight" in model["keys"]
        assert model["keys"]["model.embed_tokens.weight"] == [300, TINY_FIELDS["hidden_size"]]


def test_a_checkpoint_of_another_architecture_with_the_same_keys_is_refused(data_dir, stopped_runs, tmp_path):
    """``post_ln`` and ``pre_ln`` hold the same tensors: only the record tells them apart."""
    run = fresh_copy(stopped_runs["pre_ln"], tmp_path)
    ckpt = copy_in_as_latest(stopped_runs["post_ln"], run)
    assert record(ckpt)["model"]["keys"] == record(stopped_runs["pre_ln"] / "checkpoints" / "ckpt-000002")["model"][
        "keys"]
    before = (run / "metrics.jsonl").read_text()
    with pytest.raises(CheckpointError, match=r"written by a post_ln model, and this run trains pre_ln: refusing .*"
                                              r"same tensor names and shapes, another architecture"):
        resume(data_dir, run, "pre_ln")
    assert (run / "metrics.jsonl").read_text() == before


def test_a_checkpoint_with_other_keys_is_refused_naming_them(data_dir, stopped_runs, tmp_path):
    run = fresh_copy(stopped_runs["pre_ln"], tmp_path)
    copy_in_as_latest(stopped_runs["hc"], run)
    with pytest.raises(CheckpointError) as err:
        resume(data_dir, run, "pre_ln")
    message = str(err.value)
    assert "written by a hc model, and this run trains pre_ln" in message
    assert "24 only in the checkpoint: " in message and " and 21 more" in message  # HC's 45 tensors vs Pre-LN's 21


def test_an_old_checkpoint_without_the_record_is_checked_by_its_files(data_dir, stopped_runs, tmp_path, capsys):
    """Written before the record: the key set its files hold must match; the architecture cannot be checked
    (said once), so a same-keys architecture resumes, another key set is refused."""
    for source, refused in (("hc", True), ("pre_ln", False)):
        run = fresh_copy(stopped_runs["pre_ln"], tmp_path / source)
        ckpt = copy_in_as_latest(stopped_runs[source], run)
        old = record(ckpt)
        del old["model"]
        (ckpt / "trainer_state.json").write_text(json.dumps(old))
        if refused:
            with pytest.raises(CheckpointError, match="written by a model of unrecorded architecture, and this run "
                                                      "trains pre_ln: .* only in the checkpoint"):
                resume(data_dir, run, "pre_ln")
        else:
            capsys.readouterr()
            assert resume(data_dir, run, "pre_ln")["steps"] == 4
            err = capsys.readouterr().err
            assert err.count("does not record the model that wrote it") == 1
            assert "its architecture cannot be" in err


def test_a_sharded_checkpoint_of_another_architecture_is_refused(data_dir, tmp_path):
    """FSDP2 in one process (``train.parallelism=fsdp2``, the sharded format): before, the HC checkpoint resumed
    into the Pre-LN run, exit code 0. Now the command exits 2 with one line naming both architectures."""
    from depthbench.training.model_state import saved_keys

    runs = {}
    for arch in ("pre_ln", "hc"):
        runs[arch] = tmp_path / arch
        (tmp_path / f"{arch}.json").write_text(json.dumps(run_dict(data_dir, runs[arch], arch,
                                                                   parallelism="fsdp2")))
    env = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "tests.training.fsdp_runs", str(tmp_path / "pre_ln.json"),
                           str(tmp_path / "hc.json")], cwd=REPO_ROOT, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ckpt = copy_in_as_latest(runs["hc"], runs["pre_ln"])
    assert (ckpt / "state" / "dcp" / ".metadata").is_file()
    assert record(ckpt)["model"]["keys"] == saved_keys(str(ckpt / "state"))  # the dcp metadata's model tensors
    second = run_dict(data_dir, runs["pre_ln"], "pre_ln", parallelism="fsdp2", stop_at_step=None)
    (tmp_path / "second.json").write_text(json.dumps({**second, "resume": True}))
    proc = subprocess.run([sys.executable, "-m", "depthbench.training", "-c", str(tmp_path / "second.json")],
                          cwd=REPO_ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-4000:]
    lines = [line for line in proc.stderr.splitlines() if "refusing to load another model's state" in line]
    assert len(lines) == 1 and "written by a hc model, and this run trains pre_ln" in lines[0], proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr
