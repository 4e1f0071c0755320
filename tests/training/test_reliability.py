"""Reliability of ``depthbench train`` and its inputs, in one process with a tiny model: resume without
the ``latest`` pointer, elastic resume across micro-batch sizes, overrides allowed on resume, shard verification and
out-of-vocab ids, a missing tokenizer, bad inputs named, non-finite / unknown config keys, an unwritable output
folder, a full disk during a checkpoint, a crash before step 1, valid JSON after a NaN, exit codes, and a corrupt
checkpoint met inside a sweep. The multi-process cases (signals to every rank, 2 -> 1 processes) are in
``tests/training/test_signals.py``.

Run: ``python -m pytest tests/training/test_reliability.py -q``
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from depthbench import atomic
from depthbench.config import RunConfigError, load_run_config
from depthbench.data import DataError, TokenShards, load_meta, prepare_data, verify_data
from depthbench.errors import exit_code
from depthbench.model_config import resolve_model_config
from depthbench.training import checkpoint
from depthbench.training import run as run_mod
from depthbench.training.errors import CheckpointError, CheckpointWriteError, NonFiniteLossError
from depthbench.training.optim import lr_lambda
from depthbench.training.trainer import train
from tests.helpers import TINY_FIELDS, make_train_data


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_train_data(tmp_path_factory.mktemp("reliability_data") / "data")


def run_dict(data_dir: Path, out: Path) -> dict:
    return {
        "model": {"arch": "pre_ln", "fields": TINY_FIELDS},
        "data": {"data_dir": str(data_dir), "seq_len": 32, "eval_sequences": 4, "prefetch": 1},
        "train": {"global_batch_size": 8, "micro_batch_size": 4, "max_steps": 6, "progress": False,
                  "mixed_precision": "no"},
        "optim": {"lr": 5e-3},
        "checkpoint": {"every": 2, "keep_last": 3, "hf_export": False},
        "output_dir": str(out),
    }


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def losses(out: Path) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in rows(out) if "train/loss" in r}


@pytest.fixture(scope="module")
def straight(data_dir, tmp_path_factory) -> Path:
    """The uninterrupted reference run (6 steps, checkpoints at 2, 4, 6)."""
    out = tmp_path_factory.mktemp("straight") / "run"
    train(load_run_config(run_dict(data_dir, out)))
    return out


def copy_data(data_dir: Path, dst: Path) -> Path:
    shutil.copytree(data_dir, dst)
    return dst


# ==================================================================================== resume without the latest pointer
def test_missing_latest_pointer_resumes_the_newest_complete_checkpoint(data_dir, straight, tmp_path, capsys):
    out = tmp_path / "run"
    train(load_run_config(run_dict(data_dir, out), ["train.stop_at_step=4"]))
    ckpts = out / "checkpoints"
    (ckpts / "latest").unlink()
    (ckpts / "ckpt-000004" / "state" / "optimizer.bin").write_bytes(b"cut")  # newest one incomplete: skipped
    capsys.readouterr()
    summary = train(load_run_config(run_dict(data_dir, out), ["resume=auto"]))
    err = capsys.readouterr().err
    assert f"{ckpts / 'latest'} is missing: resuming from {ckpts / 'ckpt-000002'}" in err
    assert summary["status"] == "finished" and summary["steps"] == 6
    assert losses(out) == losses(straight)  # continued from step 2, not restarted


def test_no_fresh_start_while_only_incomplete_checkpoints_exist(data_dir, tmp_path):
    out = tmp_path / "run"
    train(load_run_config(run_dict(data_dir, out), ["train.stop_at_step=2"]))
    (out / "checkpoints" / "latest").unlink()
    (out / "checkpoints" / "ckpt-000002" / "trainer_state.json").unlink()
    before = (out / "metrics.jsonl").read_text()
    with pytest.raises(CheckpointError, match=r"none of the checkpoint folders .* \(ckpt-000002\) is complete.*"
                                              r"refusing to start fresh"):
        train(load_run_config(run_dict(data_dir, out), ["resume=auto"]))
    assert (out / "metrics.jsonl").read_text() == before
    assert (out / "checkpoints" / "ckpt-000002" / "state").is_dir()


# ============================================================================================ stop signals (in-process)
def test_preempt_signal_and_repeated_signals_checkpoint_once(data_dir, tmp_path, monkeypatch, capsys):
    import signal

    real, calls = run_mod.forward_loss, {"n": 0}

    def signalling(model, ids):  # the scheduler's warning arrives during step 2, then two more stop signals
        calls["n"] += 1
        if calls["n"] == 3:
            for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
                os.kill(os.getpid(), sig)
        return real(model, ids)

    monkeypatch.setattr(run_mod, "forward_loss", signalling)
    # (SIGINT is Python's default_int_handler in a terminal, SIG_IGN when the tests run as a background job)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)}
    out = tmp_path / "run"
    summary = train(load_run_config(run_dict(data_dir, out), ["checkpoint.every=0"]))
    assert summary["status"] == "stopped" and summary["stopped_by"] == "SIGUSR1" and summary["steps"] == 2
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["ckpt-000002", "latest"]
    assert capsys.readouterr().err.count("received: checkpointing after the current step") == 1
    assert {sig: signal.getsignal(sig) for sig in before} == before  # handlers restored afterwards


# ========================================================================================== elastic resume (in-process)
def test_micro_batch_change_on_resume_matches_the_uninterrupted_run(data_dir, straight, tmp_path):
    out = tmp_path / "run"
    train(load_run_config(run_dict(data_dir, out), ["train.stop_at_step=2"]))  # micro-batch 4: 2 micro-steps
    summary = train(load_run_config(run_dict(data_dir, out), ["resume=true", "train.micro_batch_size=2"]))
    assert summary["status"] == "finished" and summary["steps"] == 6
    a, b = losses(straight), losses(out)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5, 6]
    for step in a:
        assert b[step] == pytest.approx(a[step], abs=1e-5), step
    record = json.loads((out / "run_config.json").read_text())
    assert record["resolved"]["grad_accum_steps"] == 4
    assert record["history"][-1]["resumed_at_step"] == 2
    assert record["history"][-1]["changes"]["train.micro_batch_size"] == [4, 2]


# ================================================================================================== overrides on resume
def test_safe_overrides_on_resume_apply_and_are_recorded(data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    train(load_run_config(run_dict(data_dir, out), ["train.stop_at_step=2"]))
    capsys.readouterr()
    summary = train(load_run_config(run_dict(data_dir, out),
                                    ["resume=true", "optim.lr=1e-3", "train.max_steps=10", "train.stop_at_step=4"]))
    err = capsys.readouterr().err
    assert summary["steps"] == 4 and summary["max_steps"] == 10
    assert "optim.lr 0.005 -> 0.001" in err and "train.max_steps 6 -> 10" in err
    assert "the LR schedule changes from step 3 on (warmup 1 -> 1 steps, cosine decay now ends at step 10)" in err
    lrs = {r["step"]: r["train/lr"] for r in rows(out) if "train/lr" in r}
    schedule = lr_lambda(1, 10, 0.1)
    assert lrs[3] == pytest.approx(1e-3 * schedule(2), rel=1e-9)
    assert lrs[4] == pytest.approx(1e-3 * schedule(3), rel=1e-9)
    history = json.loads((out / "run_config.json").read_text())["history"]
    assert history[-1]["changes"]["optim.lr"] == [5e-3, 1e-3]
    assert history[-1]["changes"]["train.max_steps"] == [6, 10]


@pytest.mark.parametrize("override, reason", [
    ("train.seed=7", r"train.seed \(42 in the run, 7 now\): the data order depends on it"),
    ("optim.betas=[0.9,0.99]", r"optim.betas .*restored from the optimizer state"),
    ("model.fields.intermediate_size=32", r"model.fields .*weights in the checkpoint were built from them"),
])
def test_unsafe_overrides_on_resume_are_refused_with_the_reason(data_dir, tmp_path, override, reason):
    out = tmp_path / "run"
    train(load_run_config(run_dict(data_dir, out), ["train.stop_at_step=2", "checkpoint.every=0"]))
    with pytest.raises(RunConfigError, match=reason + r".*On resume only optim.lr"):
        train(load_run_config(run_dict(data_dir, out), ["resume=true", override]))


def test_relative_data_path_is_the_same_folder_on_resume(data_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    train(load_run_config(run_dict(data_dir, out), ["train.stop_at_step=2", "train.max_steps=3"]))
    monkeypatch.chdir(data_dir.parent)
    summary = train(load_run_config(run_dict(data_dir, out), ["resume=true", f"data.data_dir={data_dir.name}",
                                                              "train.max_steps=3"]))
    assert summary["status"] == "finished" and summary["steps"] == 3


def test_crash_before_the_first_step_does_not_block_the_same_command(data_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"

    def crash(self, micro_batches):
        raise RuntimeError("killed before step 1 (simulated)")

    monkeypatch.setattr(run_mod.Run, "optimizer_step", crash)
    with pytest.raises(RuntimeError, match="simulated"):
        train(load_run_config(run_dict(data_dir, out), ["train.max_steps=2"]))
    monkeypatch.undo()
    assert (out / "run_config.json").exists() and not (out / "metrics.jsonl").exists()
    summary = train(load_run_config(run_dict(data_dir, out), ["train.max_steps=2"]))  # the same command, no flags
    assert summary["status"] == "finished"
    assert "stopped before its first step; starting it again" in capsys.readouterr().err


# =========================================================== a full disk, a crash before step 1, valid JSON after a NaN
class _FullDisk:
    """``depthbench.atomic`` whose ``write_json`` of the second checkpoint's trainer_state.json fails with ENOSPC."""

    def __init__(self):
        self.fsync_dir, self.write_text, self.json_safe = atomic.fsync_dir, atomic.write_text, atomic.json_safe

    def write_json(self, path, obj, **kw):
        if path.endswith(os.path.join("ckpt-000004.tmp", "trainer_state.json")):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return atomic.write_json(path, obj, **kw)


def test_disk_full_during_a_checkpoint_names_the_last_good_one(data_dir, straight, tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setattr(checkpoint, "atomic", _FullDisk())
    with pytest.raises(CheckpointWriteError) as info:
        train(load_run_config(run_dict(data_dir, out)))
    monkeypatch.undo()
    message = str(info.value)
    assert "cannot write checkpoint" in message and "ckpt-000004: no space left on the device" in message
    assert f"The last good checkpoint is {out / 'checkpoints' / 'ckpt-000002'}" in message
    assert f"depthbench train -c {out / 'run_config.json'} --resume" in message
    assert exit_code(info.value) == 1
    assert not (out / "checkpoints" / "ckpt-000004.tmp").exists()  # the partial copy was removed (frees space)
    summary = train(load_run_config(run_dict(data_dir, out), ["resume=true"]))
    assert summary["status"] == "finished" and losses(out) == losses(straight)


def test_unwritable_output_folder_is_refused_up_front(data_dir, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(RunConfigError, match=r"output_dir .*file/run is not writable .*nothing was written"):
        train(load_run_config(run_dict(data_dir, blocker / "run")))


def test_nan_in_json_files_is_written_as_null(data_dir, tmp_path, monkeypatch):
    path = tmp_path / "x.json"
    atomic.write_json(str(path), {"loss": float("nan"), "eval": {"a": float("inf")}, "ok": [1.5, float("-inf")]})
    assert json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}")) == {
        "loss": None, "eval": {"a": None}, "ok": [1.5, None]}
    real = run_mod.forward_loss
    monkeypatch.setattr(run_mod, "forward_loss", lambda m, ids: real(m, ids) * float("nan"))
    out = tmp_path / "run"
    with pytest.raises(NonFiniteLossError, match=r"--resume optim.lr=<lower>"):
        train(load_run_config(run_dict(data_dir, out)))
    text = (out / "summary.json").read_text()
    summary = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in summary.json"))
    assert summary["status"] == "diverged" and summary["final_train_loss"] is None


# =============================================================================== data verification and out-of-vocab ids
def _flip_token(shard: Path, offset: int, value: int) -> None:
    ids = np.fromfile(shard, dtype="<u2")
    ids[offset] = value
    st = shard.stat()
    ids.tofile(shard)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))  # keep the mtime: only a full check can see it


def test_shard_hash_is_verified_incrementally_and_on_demand(data_dir, tmp_path):
    data = copy_data(data_dir, tmp_path / "data")
    first = verify_data(str(data), progress=False)
    cache = json.loads((data / ".verified.json").read_text())
    assert set(cache) == set(first) and all("max_id" in v for v in cache.values())
    shard = data / "train" / "shard_00000.bin"
    original = int(np.fromfile(shard, dtype="<u2")[10])
    _flip_token(shard, 10, (original + 1) % 300)  # another valid id, same size, same mtime
    verify_data(str(data), progress=False)  # cached: path, size and mtime unchanged, not re-read
    with pytest.raises(DataError, match=r"shard_00000.bin is corrupt: its sha256 differs from .*meta.json"):
        verify_data(str(data), force=True, progress=False)
    os.utime(shard)  # a normal edit changes the mtime: the cached check re-hashes that shard
    with pytest.raises(DataError, match="shard_00000.bin is corrupt"):
        verify_data(str(data), progress=False)
    out = tmp_path / "run"
    with pytest.raises(DataError, match="shard_00000.bin is corrupt"):  # train checks before step 1
        train(load_run_config(run_dict(data, out), ["train.max_steps=1"]))
    with pytest.raises(DataError, match="shard_00000.bin is corrupt"):  # --verify-data ignores the cache
        train(load_run_config(run_dict(data, out), ["train.max_steps=1", "data.verify=always"]))


@pytest.mark.parametrize("verify", ["cached", "off"])
def test_out_of_vocab_token_ids_are_refused_naming_shard_and_offset(data_dir, tmp_path, verify):
    data = copy_data(data_dir, tmp_path / "data")
    shard = data / "train" / "shard_00000.bin"
    ids = np.fromfile(shard, dtype="<u2")
    ids[1234:] = 4000  # the model has 300 ids: tokenized with another tokenizer from offset 1234 on
    ids.tofile(shard)
    meta = load_meta(str(data))  # a consistent folder (hash matches), just the wrong vocabulary
    import hashlib

    meta["splits"]["train"]["shards"][0]["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()
    (data / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"shard_00000.bin holds token id 4000 at token offset (\d+) \(byte \d+\), "
                                        r"outside the model's vocabulary \(vocab_size=300\)") as info:
        train(load_run_config(run_dict(data, tmp_path / "run"), ["checkpoint.every=0", f"data.verify={verify}"]))
    offset = int(str(info.value).split("token offset ")[1].split(" ")[0])
    if verify == "cached":  # checked before training: the first bad id of the shard
        assert offset == 1234 and not (tmp_path / "run" / "metrics.jsonl").exists()
    else:  # checked per batch: the first bad id of the window that met it
        assert offset >= 1234 and ids[offset] == 4000


# ================================================================================ a missing tokenizer, bad inputs named
def test_missing_tokenizer_is_refused(data_dir, tmp_path):
    data = copy_data(data_dir, tmp_path / "data")
    shutil.rmtree(data / "tokenizer")
    with pytest.raises(RunConfigError, match=r"has no tokenizer .*could not be evaluated"):
        train(load_run_config(run_dict(data, tmp_path / "run")))
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_corrupt_meta_json_names_the_file(data_dir, tmp_path):
    data = copy_data(data_dir, tmp_path / "data")
    text = (data / "meta.json").read_text()
    (data / "meta.json").write_text(text[: len(text) // 2])
    with pytest.raises(DataError, match=rf"{data / 'meta.json'} is corrupt \(not valid JSON: "):
        TokenShards(str(data))
    with pytest.raises(DataError, match="meta.json is corrupt"):
        train(load_run_config(run_dict(data, tmp_path / "run")))


@pytest.mark.parametrize("name, content, match", [
    ("binary.txt", b"fine line\n\x89PNG\r\n\x1a\n\x00\xff\xfe", r"binary.txt:2: not UTF-8 text .*binary file"),
    ("bad.jsonl", b'{"text": "a"}\n{"text": "b"}\n{"text": "c\n', r"bad.jsonl:3: malformed JSON line"),
    ("bad.jsonl", b'{"text": "a"}\n\xff\n', r"bad.jsonl:2: not UTF-8 text"),
])
def test_bad_input_files_name_the_file_and_line(tmp_path, name, content, match):
    from tests.helpers import make_tokenizer

    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError, match=match):
        prepare_data([str(tmp_path / name)], make_tokenizer(), str(tmp_path / "out"), progress=False)


# ======================================================================== bad input is named before anything is written
@pytest.mark.parametrize("override, match", [
    ("optim.lr=inf", r"optim.lr=inf is not allowed: numbers in the run config must be finite"),
    ("optim.lr=.nan", r"optim.lr=nan is not allowed"),
    ("model.fields.rope_theta=.inf", r"model.fields.rope_theta=inf is not allowed"),
    ("optim.betas=[0.9,.inf]", r"optim.betas\[1\]=inf is not allowed"),
    ("train.preempt_signal=SIGNOPE", r"train.preempt_signal='SIGNOPE' is not allowed"),
    ("data.verify=sometimes", r"data.verify='sometimes' is not allowed"),
])
def test_non_finite_numbers_and_bad_values_are_refused(data_dir, tmp_path, override, match):
    with pytest.raises(RunConfigError, match=match):
        load_run_config(run_dict(data_dir, tmp_path / "run"), [override])


def test_unknown_model_fields_are_refused_naming_the_key(data_dir, tmp_path):
    cfg = load_run_config(run_dict(data_dir, tmp_path / "run"), ["model.fields.hiden_size=32"])
    with pytest.raises(RunConfigError, match=r"unknown config key 'model.fields.hiden_size'.*did you mean hidden_size"):
        resolve_model_config(cfg.model, TokenShards(str(data_dir)), seq_len=cfg.data.seq_len)
    with pytest.raises(RunConfigError, match="model.fields.hiden_size"):  # before anything is written
        train(cfg)
    assert not (tmp_path / "run" / "run_config.json").exists()


# ====================================================================== exit codes, a corrupt checkpoint inside a sweep
def test_exit_codes_follow_one_convention(data_dir, tmp_path, capsys):
    from depthbench.cli import main

    base = ["--arch", "pre_ln", "--data", str(data_dir), "-o", str(tmp_path / "run"), "data.seq_len=32",
            f"model.fields={json.dumps(TINY_FIELDS)}"]
    assert main(["train", *base, "optim.lr=inf"]) == 2  # bad config
    assert "optim.lr=inf is not allowed" in capsys.readouterr().err
    assert main(["train", *base, "--resume"]) == 2  # nothing to resume: bad usage
    assert main(["prepare-data", str(tmp_path / "missing.txt"), "--tokenizer", str(data_dir / "tokenizer"),
                 "-o", str(tmp_path / "p")]) == 2
    assert main(["sweep", "--archs", "nope", "--shapes", "tiny-L2", "--data", str(data_dir),
                 "--out", str(tmp_path / "s")]) == 2
    assert exit_code(NonFiniteLossError("x")) == 1 and exit_code(CheckpointError("x")) == 2


def test_corrupt_checkpoint_inside_a_sweep_is_a_message(data_dir, tmp_path, capsys):
    from depthbench.cli import main

    out = tmp_path / "sweep"
    argv = ["sweep", "--archs", "pre_ln", "--shapes", "tiny-L2", "--data", str(data_dir), "--out", str(out),
            "--set", "train.max_steps=2", "--set", "train.stop_at_step=1", "--set", "data.seq_len=32",
            "--set", "train.global_batch_size=4", "--set", "train.micro_batch_size=4",
            "--set", "train.progress=false",
            "--set", "checkpoint.hf_export=false", "--set", "data.eval_sequences=0"]
    for field, value in {**TINY_FIELDS, "head_dim": 8, "vocab_size": 300}.items():
        argv += ["--set", f"model.fields.{field}={value}"]
    assert main(argv) == 0  # stopped at step 1 with a checkpoint
    ckpt = next(out.glob("runs/*/checkpoints/ckpt-000001"))
    (ckpt / "state" / "model.safetensors").write_bytes(b"garbage")
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "cannot continue: checkpoint file" in err and "model.safetensors is corrupt" in err


# ====================================================================================== one writer per run folder
HOLDER = """
import sys, time
from depthbench import lease
held = lease.acquire(sys.argv[1], what="depthbench train")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
held.release()
"""


def _hold(folder: Path, seconds: float = 120):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), str(seconds)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_of_a_run_folder_is_refused_naming_the_holder(data_dir, tmp_path, capsys):
    import socket

    from depthbench.cli import main

    out = tmp_path / "run"
    (tmp_path / "run.json").write_text(json.dumps(run_dict(data_dir, out)))
    holder = _hold(out)
    try:
        assert main(["train", "-c", str(tmp_path / "run.json"), "resume=auto"]) == 2
        err = capsys.readouterr().err
        assert f"is held by another live writer: depthbench train pid {holder.pid} on {socket.gethostname()}" in err
        assert "since" in err and "--wait-for-writer" in err and "Traceback" not in err
        assert sorted(os.listdir(out)) == ["writer.lease"]  # nothing written, the holder's lease untouched
    finally:
        holder.kill()
        holder.wait()
    holder = _hold(out, seconds=1.5)  # a writer about to finish: wait for it, then train
    assert main(["train", "-c", str(tmp_path / "run.json"), "resume=auto", "--wait-for-writer", "60"]) == 0
    holder.wait()
    assert f"pid {holder.pid}" in capsys.readouterr().err and (out / "summary.json").exists()
    assert main(["train", "-c", str(tmp_path / "run.json"), "wait_for_writer=-1"]) == 2
    assert "wait_for_writer=-1.0 is not allowed" in capsys.readouterr().err


def test_a_resume_after_the_writer_was_killed_proceeds(data_dir, tmp_path):
    import signal

    out = tmp_path / "run"
    train(load_run_config({**run_dict(data_dir, out), "train": {**run_dict(data_dir, out)["train"],
                                                                 "stop_at_step": 2}}))
    holder = _hold(out)  # a writer that is then killed: kill -9 leaves its lease behind
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert (out / "writer.lease").exists()
    summary = train(load_run_config({**run_dict(data_dir, out), "resume": "auto"}))
    assert summary["status"] == "finished" and summary["steps"] == 6
    assert not (out / "writer.lease").exists()  # released when train() returned


@pytest.mark.slow
def test_two_trainers_on_one_run_folder(data_dir, tmp_path):
    """A real trainer holds its folder: a second ``depthbench train ... resume=auto`` started beside it is refused
    naming it (before: it loaded the checkpoints the first one was writing and pruning); once the first stops,
    the resume proceeds."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    cfg = run_dict(data_dir, out)
    cfg["train"].update(max_steps=100000, log_every=1)
    cfg["checkpoint"].update(every=3, keep_last=1)
    (tmp_path / "run.json").write_text(json.dumps(cfg))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "depthbench.training", "-c", str(tmp_path / "run.json"), "resume=auto"]
    first = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not list(out.glob("checkpoints/ckpt-*")) and time.time() < deadline:
            time.sleep(0.2)
        second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"depthbench train pid {first.pid} on" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)  # stops after a checkpoint, exit 0
        first.communicate(timeout=120)
    assert first.returncode == 0
    step = json.loads((out / "summary.json").read_text())["steps"]
    third = subprocess.run([*cmd, f"train.max_steps={step + 2}"], env=env, capture_output=True, text=True,
                           timeout=180)
    assert third.returncode == 0, third.stderr[-2000:]
    assert json.loads((out / "summary.json").read_text())["steps"] == step + 2
