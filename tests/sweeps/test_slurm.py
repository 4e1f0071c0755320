"""Tests of ``depthbench.sweeps.slurm``: ``--emit slurm`` writes a job array whose lines parse back into each
run's config, and the script, executed with a stand-in ``accelerate``, launches its line's run or skips a finished
one; blank ``--sbatch`` lines are dropped, and a folder path with a space reaches the run as one argument.

Run: ``python -m pytest tests/sweeps/test_slurm.py -q``
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

from depthbench.config import load_run_config, parse_override
from depthbench.sweeps.slurm import emit_slurm
from tests.sweeps.tiny_sweep import make_spec


def test_emit_slurm_writes_a_job_array_whose_lines_parse_and_run(data_dir, tmp_path):
    spec = make_spec(data_dir, seeds=[0, 1])  # 2 archs x 2 shapes x 2 lrs x 2 seeds
    out = tmp_path / "out"
    script = Path(emit_slurm(spec, str(out), accelerate_args="--num_processes 2", sbatch="--gres=gpu:8;--time=1:00:00"))
    text = script.read_text()
    assert "#SBATCH --array=1-16\n" in text and "#SBATCH --gres=gpu:8\n" in text and "#SBATCH --time=1:00:00\n" in text
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    lines = (out / "runs.txt").read_text().splitlines()
    assert len(lines) == 16
    base = json.loads((out / "base_config.json").read_text())
    seen = set()
    for line, point in zip(lines, spec.runs()):
        run_id, *overrides = shlex.split(line)
        assert run_id == point.run_id
        assert all("=" in o and parse_override(o) for o in overrides)
        cfg = load_run_config(base, overrides)
        assert (cfg.model.arch, cfg.model.shape, cfg.optim.lr, cfg.train.seed) == (point.arch, point.shape,
                                                                                  point.lr, point.seed)
        assert cfg.output_dir == str(out.resolve() / "runs" / run_id) and cfg.resume == "auto"
        assert cfg.model.fields["hidden_size"] == 32
        seen.add(cfg.output_dir)
    assert len(seen) == 16

    # Execute array tasks with a stand-in `accelerate` that records its arguments.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "accelerate"
    fake.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$RECORD"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "RECORD": str(tmp_path / "args.txt")}
    subprocess.run(["bash", str(script)], env={**env, "SLURM_ARRAY_TASK_ID": "3"}, check=True)
    recorded = (tmp_path / "args.txt").read_text().splitlines()
    assert recorded[:6] == ["launch", "--num_processes", "2", "-m", "depthbench.cli", "train"]
    assert recorded[6:8] == ["--config", str((out / "base_config.json").resolve())]
    assert recorded[8:] == shlex.split(lines[2])[1:]
    # a finished run's task exits without launching anything
    (tmp_path / "args.txt").unlink()
    done = out / "runs" / spec.runs()[3].run_id
    done.mkdir(parents=True)
    (done / "summary.json").write_text(json.dumps({"status": "finished"}, indent=2))
    result = subprocess.run(["bash", str(script)], env={**env, "SLURM_ARRAY_TASK_ID": "4"}, check=True,
                            capture_output=True, text=True)
    assert "already done, skipped" in result.stdout and not (tmp_path / "args.txt").exists()


def test_blank_sbatch_lines_are_dropped(data_dir, tmp_path):
    spec = make_spec(data_dir, archs=["pre_ln"], shapes=["tiny-L2"], lrs=[1e-3])
    text = Path(emit_slurm(spec, str(tmp_path / "out"), sbatch=" ; --time=1:00:00 ;")).read_text()
    assert "#SBATCH --time=1:00:00\n#" in text and "#SBATCH \n" not in text


def test_a_folder_path_with_a_space_reaches_the_run_as_one_argument(data_dir, tmp_path, monkeypatch):
    """bash itself parses the script: the folder's space survives ``runs.txt``, ``eval`` and ``cd``."""
    spec = make_spec(data_dir, archs=["pre_ln"], shapes=["tiny-L2"], lrs=[1e-3])
    out = tmp_path / "a sweep"
    monkeypatch.chdir(tmp_path)
    script = emit_slurm(spec, str(out))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "accelerate"
    fake.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$RECORD"; pwd >> "$RECORD"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "RECORD": str(tmp_path / "args.txt"),
           "SLURM_ARRAY_TASK_ID": "1"}
    subprocess.run(["bash", script], env=env, check=True, cwd="/")
    recorded = (tmp_path / "args.txt").read_text().splitlines()
    run_dir = out.resolve() / "runs" / spec.runs()[0].run_id
    assert f"output_dir={json.dumps(str(run_dir))}" in recorded and recorded[-1] == str(tmp_path)
    assert recorded[recorded.index("--config") + 1] == str(out.resolve() / "base_config.json")
