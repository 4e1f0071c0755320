"""Multi-process test of ``depthbench train``: two CPU processes (torchrun, gloo) on the same global batch give the
same per-step losses, eval loss and final weights as one process (within 1e-5), with layer statistics reduced
across ranks.

Run: ``python -m pytest tests/training/test_multiprocess.py -q`` (about 30-60 s: two fresh Python processes)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from depthbench.config import load_run_config
from depthbench.training.trainer import train
from tests.helpers import TINY_FIELDS, make_train_data


def run_dict(data_dir: Path, out: Path) -> dict:
    return {
        "model": {"arch": "pre_ln", "fields": TINY_FIELDS},
        "data": {"data_dir": str(data_dir), "seq_len": 32, "eval_sequences": 6},
        "train": {"global_batch_size": 8, "micro_batch_size": 2, "max_steps": 4, "progress": False,
                  "layer_stats_every": 2, "mixed_precision": "no"},
        "optim": {"lr": 5e-3},
        "checkpoint": {"every": 0, "hf_export": False},
        "output_dir": str(out),
    }


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # 12-32 s on 2 cores: the default suite stays near 10 minutes
def test_two_processes_match_one(tmp_path):
    data_dir = make_train_data(tmp_path / "data")
    single = tmp_path / "single"
    train(load_run_config(run_dict(data_dir, single)))

    double = tmp_path / "double"
    (tmp_path / "run.json").write_text(json.dumps(run_dict(data_dir, double)))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "depthbench.training", "-c", str(tmp_path / "run.json")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]

    resolved = json.loads((double / "run_config.json").read_text())["resolved"]
    assert resolved["world_size"] == 2 and resolved["grad_accum_steps"] == 2
    assert json.loads((single / "run_config.json").read_text())["resolved"]["grad_accum_steps"] == 4

    a, b = rows(single), rows(double)
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        for key, value in ra.items():
            if key.startswith(("train/loss", "eval/")):
                assert rb[key] == pytest.approx(value, abs=1e-5), (ra["step"], key)
            elif key.startswith("layer_stats/") and key.endswith(("forward/rms", "forward/mean_abs")):
                assert rb[key] == pytest.approx(value, rel=1e-4), (ra["step"], key)
    assert any("layer_stats/block_01/backward/rms" in r for r in b)
    sa = json.loads((single / "summary.json").read_text())
    sb = json.loads((double / "summary.json").read_text())
    assert sb["world_size"] == 2 and sb["tokens"] == sa["tokens"] == 4 * 8 * 32
    assert not (double / "writer.lease").exists()  # held by the main process only, released at the end
    pa, pb = load_file(single / "final" / "model.safetensors"), load_file(double / "final" / "model.safetensors")
    assert pa.keys() == pb.keys()
    for key in pa:
        assert torch.allclose(pa[key], pb[key], atol=1e-5, rtol=0), key


HOLDER = """
import sys, time
from depthbench import lease
lease.acquire(sys.argv[1], what="depthbench train")
print("held", flush=True)
time.sleep(300)
"""


@pytest.mark.slow
def test_every_rank_stops_when_another_process_holds_the_run_folder(tmp_path):
    data_dir = make_train_data(tmp_path / "data")
    out = tmp_path / "run"
    (tmp_path / "run.json").write_text(json.dumps(run_dict(data_dir, out)))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    try:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "depthbench.training", "-c", str(tmp_path / "run.json")]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)  # no rank left waiting
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode != 0
    assert f"depthbench train pid {holder.pid} on" in proc.stderr  # the main rank names the holder
    assert proc.stderr.count("depthbench train: error:") == 1  # once, not once per rank (the other stops with it)
    assert "exitcode  : 2" in proc.stderr  # bad input: the launcher reports the workers' exit code
    assert sorted(os.listdir(out)) == ["writer.lease"]
