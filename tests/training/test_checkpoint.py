"""A checkpoint records the model that wrote it, and a run refuses another model's checkpoint in every format.

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

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from depthbench.config import load_run_config
from depthbench.training.errors import CheckpointError
from depthbench.training.trainer import train
from tests.helpers import REPO_ROOT, TINY_FIELDS, make_train_data


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
