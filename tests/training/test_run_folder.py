"""``depthbench.training.run_folder``: the rules of a run folder: overrides allowed and refused on resume, a
relative data path, a crash before step 1, an unwritable folder, one writer per folder (its lease).

Run: ``python -m pytest tests/training/test_run_folder.py -q``
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from depthbench.config import RunConfigError, load_run_config
from depthbench.training import run as run_mod
from depthbench.training.optim import lr_lambda
from depthbench.training.trainer import train
from tests.tiny_runs import metric_rows, tiny_run


def test_safe_overrides_on_resume_apply_and_are_recorded(train_data, tmp_path, capsys):
    out = tmp_path / "run"
    train(load_run_config(tiny_run(train_data, out), ["train.stop_at_step=2"]))
    capsys.readouterr()
    summary = train(load_run_config(tiny_run(train_data, out),
                                    ["resume=true", "optim.lr=1e-3", "train.max_steps=10", "train.stop_at_step=4"]))
    err = capsys.readouterr().err
    assert summary["steps"] == 4 and summary["max_steps"] == 10
    assert "optim.lr 0.005 -> 0.001" in err and "train.max_steps 6 -> 10" in err
    assert "the LR schedule changes from step 3 on (warmup 1 -> 1 steps, cosine decay now ends at step 10)" in err
    lrs = {r["step"]: r["train/lr"] for r in metric_rows(out) if "train/lr" in r}
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
def test_unsafe_overrides_on_resume_are_refused_with_the_reason(train_data, tmp_path, override, reason):
    out = tmp_path / "run"
    train(load_run_config(tiny_run(train_data, out), ["train.stop_at_step=2", "checkpoint.every=0"]))
    with pytest.raises(RunConfigError, match=reason + r".*On resume only optim.lr"):
        train(load_run_config(tiny_run(train_data, out), ["resume=true", override]))


def test_relative_data_path_is_the_same_folder_on_resume(train_data, tmp_path, monkeypatch):
    out = tmp_path / "run"
    train(load_run_config(tiny_run(train_data, out), ["train.stop_at_step=2", "train.max_steps=3"]))
    monkeypatch.chdir(train_data.parent)
    summary = train(load_run_config(tiny_run(train_data, out), ["resume=true", f"data.data_dir={train_data.name}",
                                                              "train.max_steps=3"]))
    assert summary["status"] == "finished" and summary["steps"] == 3


def test_crash_before_the_first_step_does_not_block_the_same_command(train_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"

    def crash(self, micro_batches):
        raise RuntimeError("killed before step 1 (simulated)")

    monkeypatch.setattr(run_mod.Run, "optimizer_step", crash)
    with pytest.raises(RuntimeError, match="simulated"):
        train(load_run_config(tiny_run(train_data, out), ["train.max_steps=2"]))
    monkeypatch.undo()
    assert (out / "run_config.json").exists() and not (out / "metrics.jsonl").exists()
    summary = train(load_run_config(tiny_run(train_data, out), ["train.max_steps=2"]))  # the same command, no flags
    assert summary["status"] == "finished"
    assert "stopped before its first step; starting it again" in capsys.readouterr().err


def test_unwritable_output_folder_is_refused_up_front(train_data, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(RunConfigError, match=r"output_dir .*file/run is not writable .*nothing was written"):
        train(load_run_config(tiny_run(train_data, blocker / "run")))


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


def test_a_second_writer_of_a_run_folder_is_refused_naming_the_holder(train_data, tmp_path, capsys):
    import socket

    from depthbench.cli import main

    out = tmp_path / "run"
    (tmp_path / "run.json").write_text(json.dumps(tiny_run(train_data, out)))
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


def test_a_resume_after_the_writer_was_killed_proceeds(train_data, tmp_path):
    import signal

    out = tmp_path / "run"
    train(load_run_config({**tiny_run(train_data, out), "train": {**tiny_run(train_data, out)["train"],
                                                                 "stop_at_step": 2}}))
    holder = _hold(out)  # a writer that is then killed: kill -9 leaves its lease behind
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert (out / "writer.lease").exists()
    summary = train(load_run_config({**tiny_run(train_data, out), "resume": "auto"}))
    assert summary["status"] == "finished" and summary["steps"] == 6
    assert not (out / "writer.lease").exists()  # released when train() returned


@pytest.mark.slow
def test_two_trainers_on_one_run_folder(train_data, tmp_path):
    """A real trainer holds its folder: a second ``depthbench train ... resume=auto`` started beside it is refused
    naming it (before: it loaded the checkpoints the first one was writing and pruning); once the first stops,
    the resume proceeds."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    cfg = tiny_run(train_data, out)
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
