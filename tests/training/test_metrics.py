"""Tests of ``depthbench.training.metrics``: a step's metric row and MFU (the 6N rule, computed by hand), the
progress-bar postfix, ``metrics.jsonl`` appends and the resume truncation, trackers, flattened hyperparameters and
the ``--profile`` summary.

Run: ``python -m pytest tests/training/test_metrics.py -q``
"""

from __future__ import annotations

import json

import pytest
import torch

from depthbench.config import RunConfigError, load_run_config
from depthbench.training import metrics


def test_a_step_row_reports_throughput_and_mfu_by_the_6n_rule():
    n_params = 1_000_000
    m = metrics.StepMetrics(tokens_per_step=4096, flops_per_token=6 * n_params, peak_flops=1e12, world_size=2)
    row = m.row(loss=2.5, lr=1e-3, grad_norm=0.75, tokens=8192, t_step=0.5)
    # 4096 tokens in 0.5 s = 8192 tok/s; 6 * 1e6 * 8192 / (1e12 * 2) = 0.024576
    assert row == {"train/loss": 2.5, "train/lr": 1e-3, "train/grad_norm": 0.75, "tokens": 8192,
                   "perf/tokens_per_s": 8192.0, "perf/step_time_s": 0.5, "perf/mfu": pytest.approx(0.024576)}
    assert metrics.StepMetrics.postfix(row) == {"loss": "2.5000", "tok/s": "8.19e+03", "mfu": "2.5%"}
    bare = metrics.StepMetrics(4096, 6 * n_params, None, 1).row(2.5, 1e-3, 0.75, 8192, 0.5)
    assert "perf/mfu" not in bare and "mfu" not in metrics.StepMetrics.postfix(bare)


def test_no_default_peak_off_a_gpu_and_the_table_matches_longest_names_first():
    assert metrics.default_peak_flops(torch.device("cpu")) is None
    keys = [key for key, _ in metrics.PEAK_FLOPS]
    for i, key in enumerate(keys):  # a name that contains an earlier key's text must not be shadowed by it
        assert not any(earlier in key for earlier in keys[:i]), (key, keys[:i])


def test_rows_are_appended_with_non_finite_numbers_as_null_and_truncated_on_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for step in (1, 2, 3):
        metrics.log_row(str(path), {"train/loss": float("nan") if step == 2 else 1.0 / step}, step)
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"step": 4, "train/lo')  # a row cut by a crash
    lines = path.read_text().splitlines()
    assert json.loads(lines[1]) == {"step": 2, "train/loss": None}
    metrics.truncate_metrics(str(path), 2)
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"step": 1, "train/loss": 1.0}, {"step": 2, "train/loss": None}]
    metrics.truncate_metrics(str(tmp_path / "absent.jsonl"), 1)
    assert not (tmp_path / "absent.jsonl").exists()


def test_trackers_are_the_wanted_ones_and_a_missing_package_is_a_clear_error(monkeypatch):
    import accelerate.utils

    assert metrics.trackers(load_run_config()) == []
    monkeypatch.setattr(accelerate.utils, "is_tensorboard_available", lambda: True)
    monkeypatch.setattr(accelerate.utils, "is_wandb_available", lambda: False)
    assert metrics.trackers(load_run_config(None, ["track.tensorboard=true"])) == ["tensorboard"]
    with pytest.raises(RunConfigError, match="track.wandb=true but the 'wandb' package is not installed"):
        metrics.trackers(load_run_config(None, ["track.wandb=true"]))


def test_hyperparameters_are_flattened_to_dotted_scalars():
    tree = {"model": {"arch": "hc", "fields": {"hidden_size": 32}}, "optim": {"lr": 1e-3, "betas": (0.9, 0.95)},
            "resume": None, "compile": False}
    assert metrics.flat_hparams(tree) == {"model.arch": "hc", "model.fields.hidden_size": 32, "optim.lr": 1e-3,
                                          "optim.betas": "(0.9, 0.95)", "resume": "None", "compile": False}


def test_the_profile_summary_leaves_out_the_warm_up_step():
    timings = [(9.0, 1.0, 5.0), (1.0, 0.8, 0.1), (2.0, 1.2, 0.3)]  # (step, model, data wait) seconds
    summary = metrics.profile_summary(timings)
    assert summary == pytest.approx({"steps": 2, "step_time_s": 1.5, "model_time_s": 1.0, "data_wait_s": 0.2,
                                     "overhead_fraction": 1 / 3, "data_wait_fraction": 0.4 / 3})
    assert metrics.profile_summary([(2.0, 1.0, 0.5)])["overhead_fraction"] == 0.5  # only a warm-up step
    assert metrics.profile_summary([]) == {}
