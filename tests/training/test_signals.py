"""Stop signals under ``torchrun`` and elastic resume, with two CPU processes (gloo):

* SIGTERM to every process of the job (torchrun and both workers, as Slurm does; torchrun forwards a second copy
  to each worker): exactly one checkpoint, written by both ranks, a clean exit of the workers; then the run resumes
  in ONE process with another micro-batch size (2 -> 1 processes, same global batch) and its losses equal an
  uninterrupted one-process run within 1e-5.
* (slow) The pre-emption warning (SIGUSR1, ``train.preempt_signal``, Slurm ``--signal=USR1@90``) sent to one rank
  only: both ranks stop at the same step with one checkpoint and torchrun exits 0.

Run: ``python -m pytest tests/training/test_signals.py -q`` (one torchrun launch, about 25-45 s on 2 busy cores;
``DEPTHBENCH_RUN_SLOW=1`` adds the second)
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

from depthbench.config import load_run_config
from depthbench.training import run as run_mod
from depthbench.training.trainer import train
from tests.helpers import make_train_data
from tests.tiny_runs import tiny_run, train_losses


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_train_data(tmp_path_factory.mktemp("signal_data") / "data")


def run_dict(data_dir: Path, out: Path) -> dict:
    """The tiny run, long enough (400 steps) to be stopped mid-way, without held-out loss or periodic checkpoints."""
    cfg = tiny_run(data_dir, out)
    cfg["data"]["eval_sequences"] = 0
    cfg["train"].update(micro_batch_size=2, max_steps=400)
    cfg["checkpoint"] = {"every": 0, "hf_export": False}
    return cfg


def workers(pid: int) -> list[int]:
    """Process ids of torchrun's worker processes (its children)."""
    with open(f"/proc/{pid}/task/{pid}/children", encoding="utf-8") as f:
        return [int(p) for p in f.read().split()]


def launch_and_signal(tmp_path: Path, cfg: dict, send) -> tuple[subprocess.CompletedProcess, Path]:
    """Start a 2-process torchrun run of ``cfg``, wait for 2 logged steps, call ``send(torchrun_pid)``, wait."""
    out = Path(cfg["output_dir"])
    (tmp_path / "run.json").write_text(json.dumps(cfg))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1", "PYTHONUNBUFFERED": "1",
           "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "120"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "depthbench.training", "-c", str(tmp_path / "run.json")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            metrics = out / "metrics.jsonl"
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        send(proc.pid)
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr), out


def assert_one_checkpoint_from_both_ranks(out: Path) -> int:
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["world_size"] == 2
    step = summary["steps"]
    assert 2 <= step < 400
    ckpts = out / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == [f"ckpt-{step:06d}", "latest"]  # exactly one checkpoint
    assert (ckpts / "latest").read_text() == f"ckpt-{step:06d}"
    state = ckpts / f"ckpt-{step:06d}" / "state"
    assert (state / "random_states_0.pkl").is_file() and (state / "random_states_1.pkl").is_file()  # both ranks
    assert json.loads((ckpts / f"ckpt-{step:06d}" / "trainer_state.json").read_text())["step"] == step
    return step


@pytest.mark.slow  # 12-32 s on 2 cores: the default suite stays near 10 minutes
def test_sigterm_to_every_process_then_elastic_resume_in_one_process(data_dir, tmp_path):
    cfg = run_dict(data_dir, tmp_path / "run")
    proc, out = launch_and_signal(tmp_path, cfg, lambda pid: os.killpg(pid, signal.SIGTERM))
    step = assert_one_checkpoint_from_both_ranks(out)
    assert json.loads((out / "summary.json").read_text())["stopped_by"] == "SIGTERM"
    err = proc.stderr
    assert err.count(f"depthbench train: stopped at step {step}/400") == 2, err[-3000:]  # both workers finished
    # torchrun itself reports the SIGTERM it got with a traceback of its own; no frame of the workers' code may appear
    assert "depthbench/" not in err and "KeyboardInterrupt" not in err, err[-3000:]

    # elastic resume: 2 processes x micro-batch 2 -> 1 process x micro-batch 4 (global batch 8 kept)
    resumed = train(load_run_config(cfg, ["resume=true", "train.micro_batch_size=4", f"train.stop_at_step={step + 2}"]))
    assert resumed["steps"] == step + 2 and resumed["world_size"] == 1
    history = json.loads((out / "run_config.json").read_text())["history"]
    assert history[-1]["world_size"] == 1 and history[-1]["changes"]["train.micro_batch_size"] == [2, 4]
    reference = tmp_path / "reference"  # uninterrupted, one process, micro-batch 8
    train(load_run_config(run_dict(data_dir, reference),
                          ["train.micro_batch_size=8", f"train.stop_at_step={step + 2}"]))
    a, b = train_losses(reference), train_losses(out)
    assert sorted(a) == sorted(b) == list(range(1, step + 3))
    for s in a:
        assert b[s] == pytest.approx(a[s], abs=1e-5), s


@pytest.mark.slow  # a second torchrun launch (~40 s); the preempt signal itself is tested in one process by
# test_preempt_signal_and_repeated_signals_checkpoint_once below, the all-rank agreement by the SIGTERM test
# above (rank 0's flag stops rank 1 there too)
def test_preempt_signal_to_one_rank_stops_both(data_dir, tmp_path):
    cfg = run_dict(data_dir, tmp_path / "run")

    def usr1_to_rank1(pid: int) -> None:
        ranks = workers(pid)
        assert len(ranks) == 2, ranks
        os.kill(ranks[-1], signal.SIGUSR1)  # the pre-emption warning (train.preempt_signal, default SIGUSR1)

    proc, out = launch_and_signal(tmp_path, cfg, usr1_to_rank1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_one_checkpoint_from_both_ranks(out)
    assert "SIGUSR1 received: checkpointing after the current step" in proc.stderr


def test_preempt_signal_and_repeated_signals_checkpoint_once(train_data, tmp_path, monkeypatch, capsys):
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
    summary = train(load_run_config(tiny_run(train_data, out), ["checkpoint.every=0"]))
    assert summary["status"] == "stopped" and summary["stopped_by"] == "SIGUSR1" and summary["steps"] == 2
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["ckpt-000002", "latest"]
    assert capsys.readouterr().err.count("received: checkpointing after the current step") == 1
    assert {sig: signal.getsignal(sig) for sig in before} == before  # handlers restored afterwards
