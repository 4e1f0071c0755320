"""The GPU check (``scripts/gpu_check.sh``, ``depthbench.bench.gpu_check``) in its CPU mode: every part runs at tiny
shapes and prints the JSON lines a GPU run prints, so the script cannot rot before a GPU is lent.

Run: ``python -m pytest tests/bench/test_gpu_check.py -q`` (``DEPTHBENCH_RUN_SLOW=1`` adds the whole
``--cpu-smoke`` run: ~2-3 minutes on 2 busy cores)
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from depthbench.bench import gpu_check
from depthbench.bench.summary import GPU_COMPILED_TARGETS, MFU_TARGET
from depthbench.registry import build_config
from depthbench.shapes import get_shape
from depthbench.training import compiled
from tests.helpers import REPO_ROOT


def test_flops_per_token_by_hand():
    """400M-L24: 405,406,720 parameters of which 51,486,720 are the input embedding; 16 heads x 64; T = 2048."""
    config = build_config("pre_ln", **get_shape("400m-L24").config_fields())
    dense, with_attention = gpu_check.flops_per_token(config, 2048)
    assert dense == 6 * (405_406_720 - 51_486_720)
    assert with_attention == dense + 12 * 24 * 1024 * 2048


def test_a_used_up_budget_skips_every_measurement_and_says_so():
    out = io.StringIO()
    before = dict(compiled.COMPILE_OPTIONS)
    lines = gpu_check.run_check(replace(gpu_check.SMOKE, budget_s=1e-9), stream=out)
    assert compiled.COMPILE_OPTIONS == before  # the check's compile backend does not leak into the process
    assert [json.loads(x) for x in out.getvalue().splitlines()] == lines
    measured = [x for x in lines if x["check"] not in ("environment", "plan", "summary")]
    assert measured and all(x["status"] == "skipped" and "time budget" in x["reason"] for x in measured)
    assert len([x for x in measured if x["check"] == "train_time_ratio"]) == 2 * len(GPU_COMPILED_TARGETS)
    assert lines[-1] == {**lines[-1], "check": "summary", "skipped": len(measured), "passed": 0, "errors": 0}


@pytest.mark.parametrize("args, message", [
    (["--parts", "mfu,speed"], "'speed'"),
    ([], "needs CUDA"),
])
def test_bad_arguments_exit_2(args, message, capsys):
    if not args and gpu_check.torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    assert gpu_check.main([*args, *(["--cpu-smoke"] if args else [])]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_cpu_smoke_prints_every_part_as_json_lines():
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu_check.sh"), "--cpu-smoke"], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert all(x["smoke"] is True for x in lines)
    by_check: dict[str, list[dict]] = {}
    for x in lines:
        by_check.setdefault(x["check"], []).append(x)
    assert [x["compiled"] for x in by_check["mfu"]] == [False, True]
    for x in by_check["mfu"]:
        assert x["tokens_per_s"] > 0 and x["target"] == MFU_TARGET and x["mfu"] is None  # no GPU peak on CPU
    (fsdp2,) = by_check["fsdp2"]
    assert (fsdp2["world_size"], fsdp2["parallelism"], fsdp2["sharded_checkpoint"]) == (1, "fsdp2", True)
    assert fsdp2["resumed_loss_max_abs_diff"] == 0.0 and fsdp2["pass"] is True
    models = ["pre_ln", *GPU_COMPILED_TARGETS]
    assert sorted((x["model"], x["batch_size"]) for x in by_check["decode"]) == sorted(
        (m, bs) for m in models for bs in (1, 8))
    assert all(x["ratio_vs_pre_ln"] == 1.0 for x in by_check["decode"] if x["model"] == "pre_ln")
    ratios = by_check["train_time_ratio"]
    assert sorted((x["model"], x["shape"]) for x in ratios) == sorted(
        (a, s) for a in GPU_COMPILED_TARGETS for s in ("tiny-L2", "tiny-L4"))
    for x in ratios:
        assert x["compiled"] is True and x["target"] == GPU_COMPILED_TARGETS[x["model"]]
        assert x["pass"] is (x["ratio_vs_pre_ln"] <= x["target"])
    summary = lines[-1]
    assert summary["check"] == "summary" and summary["errors"] == 0 and summary["skipped"] == 0
    assert summary["passed"] + summary["failed"] == 1 + len(ratios)  # the fsdp2 line and every ratio line
