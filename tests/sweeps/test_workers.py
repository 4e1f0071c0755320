"""Tests of the parallel worker pool of sweeps (``depthbench.sweeps.workers``) with stand-in training functions:
jobs run in separate processes, never more than ``workers`` at a time, with the requested torch threads; what a job
prints (also straight to its file descriptors) lands in its ``console.log``; the first error stops the rest and is
raised; a stop signal to the calling process stops the jobs in flight, which report ``stopped``, and starts no new
one. The same sweep trained by two workers and by one process gives the same results (a real tiny sweep).

Run: ``python -m pytest tests/sweeps/test_workers.py -q``
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from depthbench.sweeps.runner import SweepRunFailed
from depthbench.sweeps.workers import CONSOLE_LOG, Job, run_in_workers


# ---- stand-in training functions (module level: a spawned worker imports them by name)
def record(config, log, run_dir):
    """Sleeps a little and records its process, its torch threads and when it ran; prints on both channels."""
    import torch

    start = time.time()
    print("hello from", os.path.basename(run_dir))
    os.write(2, b"straight to fd 2\n")
    time.sleep(config.get("sleep", 0.3))
    Path(run_dir, "record.json").write_text(json.dumps({"pid": os.getpid(), "threads": torch.get_num_threads(),
                                                        "start": start, "end": time.time()}))
    return config.get("status", "finished")


def fail_on_second(config, log, run_dir):
    Path(run_dir, "started").write_text("")
    if run_dir.endswith("job1"):
        raise SweepRunFailed(f"run {run_dir} failed: stand-in failure")
    return "finished"


def die(config, log, run_dir):
    """A worker that dies (killed, out of memory): the pool breaks."""
    os._exit(3)


def wait_for_stop(config, log, run_dir):
    """What the trainer does on SIGTERM: finish the current step and return ``stopped``."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    Path(run_dir, "started").write_text("")
    deadline = time.time() + 60
    while not stop and time.time() < deadline:
        time.sleep(0.05)
    return "stopped" if stop else "finished"


def jobs(tmp_path: Path, n: int, **config) -> list[Job]:
    return [Job(f"job{k}", dict(config), str(tmp_path / f"job{k}")) for k in range(n)]


def test_jobs_run_side_by_side_never_more_than_the_workers(tmp_path):
    done = []
    todo = jobs(tmp_path, 5, sleep=1.0)
    status = run_in_workers(todo, record, 2, threads=1, on_done=lambda job, s, sec: done.append((job.label, s)),
                            log=lambda *a: None)
    assert status == "finished" and sorted(done) == [(f"job{k}", "finished") for k in range(5)]
    recs = [json.loads(Path(j.run_dir, "record.json").read_text()) for j in todo]
    assert len({r["pid"] for r in recs}) == 2 and os.getpid() not in {r["pid"] for r in recs}
    assert {r["threads"] for r in recs} == {1}
    for r in recs:  # at any job's start, at most two jobs are running
        assert sum(q["start"] <= r["start"] < q["end"] for q in recs) <= 2
    assert any(q is not r and q["start"] < r["end"] and r["start"] < q["end"] for r in recs for q in recs)
    console = Path(todo[0].run_dir, CONSOLE_LOG).read_text()
    assert "hello from job0" in console and "straight to fd 2" in console


def test_the_first_error_stops_the_sweep_and_is_raised(tmp_path):
    todo = jobs(tmp_path, 4)
    with pytest.raises(SweepRunFailed, match="stand-in failure"):
        run_in_workers(todo, fail_on_second, 1, log=lambda *a: None)
    assert [Path(j.run_dir, "started").exists() for j in todo] == [True, True, False, False]


def test_a_worker_that_dies_is_a_failure_naming_the_run(tmp_path):
    from depthbench.errors import exit_code
    from depthbench.sweeps.workers import WorkerFailed

    todo = jobs(tmp_path, 2)
    with pytest.raises(WorkerFailed, match=r"job\d failed in its worker process .*console.log") as info:
        run_in_workers(todo, die, 1, log=lambda *a: None)
    assert exit_code(info.value) == 1


def test_a_stop_signal_stops_the_runs_in_flight_and_starts_no_new_one(tmp_path):
    todo = jobs(tmp_path, 4)
    done = []

    def signal_when_both_started():
        deadline = time.time() + 60
        while time.time() < deadline and sum(Path(j.run_dir, "started").exists() for j in todo) < 2:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=signal_when_both_started, daemon=True).start()
    status = run_in_workers(todo, wait_for_stop, 2, on_done=lambda job, s, sec: done.append((job.label, s)),
                            log=lambda *a: None)
    assert status == "stopped"
    assert sorted(done) == [("job0", "stopped"), ("job1", "stopped")]
    assert not Path(todo[2].run_dir).exists() and not Path(todo[3].run_dir).exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the forwarding handler is gone afterwards


@pytest.mark.slow  # 12-32 s on 2 cores: the default suite stays near 10 minutes
def test_two_workers_train_the_same_results_as_one_process(tmp_path):
    """A real tiny sweep: 4 runs with 2 workers (one thread each) and in this process (one thread, as the test
    session runs) give identical held-out losses, run by run. A worker's ``console.log`` reads in a text editor: the
    training progress is there as plain lines with step counts, no ``\r`` frames, no overlong line."""
    import torch

    from depthbench.data.synthetic import build_demo_corpus
    from depthbench.sweeps.results import collect_results
    from depthbench.sweeps.runner import run_sweep
    from depthbench.sweeps.spec import SweepSpec

    assert torch.get_num_threads() == 1  # tests/conftest.py: the reference runs single-threaded like the workers
    data = tmp_path / "data"
    build_demo_corpus(str(data), synthetic_docs=300, eval_synthetic_docs=20, text_fraction=0.3, vocab_size=300)
    base = {"data": {"data_dir": str(data), "seq_len": 32, "eval_sequences": 4},
            "train": {"global_batch_size": 4, "micro_batch_size": 4, "max_steps": 3, "progress": True},
            "checkpoint": {"hf_export": False, "hash_files": False}}
    small = ["model.fields.hidden_size=32", "model.fields.intermediate_size=64", "model.fields.head_dim=8",
             "model.fields.vocab_size=300"]
    results = {}
    for workers in (1, 2):
        spec = SweepSpec(archs=["pre_ln", "hc"], shapes=["tiny-L2", "tiny-L4"], lrs=[2e-3], seeds=[0], base=base,
                         overrides=small, name="w")
        out = tmp_path / f"out{workers}"
        run_sweep(spec, str(out), workers=workers, threads=1, log=lambda *a: None)
        results[workers] = {Path(r["run_dir"]).name: (r["status"], r["eval_synthetic"], r["eval_text"])
                            for r in collect_results(str(out))}
    assert len(results[1]) == 4 and {v[0] for v in results[1].values()} == {"finished"}
    assert results[2] == results[1]
    for log in (tmp_path / "out2" / "runs").glob(f"*/{CONSOLE_LOG}"):
        text = log.read_text(encoding="utf-8")
        assert "\r" not in text and max(map(len, text.splitlines())) < 200, text
        assert [line for line in text.splitlines() if line.startswith("train:")][-1].count("3/3") == 1, text
