"""``depthbench bench --profile``: the op-group profile of training steps (depthbench.bench.profile)."""

from __future__ import annotations

import json

import pytest
import torch

from depthbench.bench import profile as bench_profile
from depthbench.bench.runner import run_profile
from depthbench.bench.settings import BenchSettings
from depthbench.cli import main


@pytest.mark.parametrize("name, group", [
    ("aten::mm", "gemm"), ("aten::addmm", "gemm"), ("aten::mv", "gemm"), ("aten::bmm", "small_bmm"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"), ("aten::view", "dispatch"),
    ("aten::linear", "dispatch"), ("aten::addcmul", "memory_bound"), ("aten::_foreach_mul_", "optimizer"),
    ("aten::mul", "memory_bound"), ("Optimizer.step#AdamW.step", None),
    ("autograd::engine::evaluate_function: MmBackward0", None),
])
def test_op_groups(name, group):
    assert bench_profile.op_group(name) == group


def test_profile_of_a_linear_step_counts_its_flops_and_bytes():
    """A step that is one [64, 32] x [32, 16] product: 2 * 64 * 32 * 16 FLOPs and (64*32 + 32*16) * 4 bytes read by
    the GEMM group, and the total row is the sum of the groups."""
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    rows = bench_profile.profile_steps(lambda: a @ b, steps=3)
    assert rows["gemm"]["gflop"] * 1e9 == pytest.approx(2 * 64 * 32 * 16)
    assert rows["gemm"]["gb_read"] * 1e9 == pytest.approx((64 * 32 + 32 * 16) * 4)
    assert rows["gemm"]["calls"] == 1
    for key in ("ms", "gflop", "gb_read", "calls"):
        assert rows["total"][key] == pytest.approx(sum(rows[g][key] for g in bench_profile.GROUPS))


def test_mean_rows_averages_every_figure():
    one = {"gemm": {"ms": 1.0, "calls": 2.0}, "total": {"ms": 3.0, "calls": 4.0}}
    two = {"gemm": {"ms": 3.0, "calls": 2.0}, "total": {"ms": 5.0, "calls": 8.0}}
    expected = {"gemm": {"ms": 2.0, "calls": 2.0}, "total": {"ms": 4.0, "calls": 6.0}}
    assert bench_profile.mean_rows([one, two]) == expected


def test_training_step_profile_matches_the_model_flops():
    """Forward + backward GEMM FLOPs of a training step are ~6 x (matrix parameters used in products) x tokens."""
    settings = BenchSettings(shape="d64-L2", batch_size=2, seq_len=16, steps=1, warmup=1, vocab_size=256, memory=False)
    profiles = run_profile(["hc"], settings)
    assert list(profiles) == ["pre_ln", "hc"]
    tokens = 2 * 16
    d, f, L, vocab = 64, 176, 2, 256
    matrix_params = L * (4 * d * d + 3 * d * f) + vocab * d  # blocks + LM head (the embedding is a lookup)
    assert profiles["pre_ln"]["gemm"]["gflop"] * 1e9 == pytest.approx(6 * matrix_params * tokens, rel=0.05)
    assert profiles["hc"]["small_bmm"]["calls"] > 0 and profiles["pre_ln"]["small_bmm"]["calls"] == 0
    assert profiles["hc"]["total"]["calls"] > profiles["pre_ln"]["total"]["calls"]


def test_profile_command_prints_a_table_and_json_lines(capsys, tmp_path):
    out_file = tmp_path / "profile.json"
    code = main(["bench", "--arch", "attnres", "--shape", "d64-L2-b1-s16", "--vocab-size", "256", "--steps", "1",
                 "--warmup", "0", "--profile", "--json-out", str(out_file)])
    assert code == 0
    out = capsys.readouterr().out
    assert "| memory_bound |" in out and "| time vs `pre_ln` |" in out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [line["model"] for line in lines] == ["pre_ln", "attnres"]
    assert set(json.loads(out_file.read_text())) == {"pre_ln", "attnres"}


def test_profile_refuses_many_shapes_before_running_anything(capsys):
    assert main(["bench", "--shapes", "d64-L2,d64-L4", "--profile", "--steps", "1"]) != 0
    captured = capsys.readouterr()
    assert "--profile takes one --shape" in captured.err and captured.out == ""
