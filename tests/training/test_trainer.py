"""Tests of ``depthbench train``: the recipe (schedule, no-decay groups), an end-to-end run (metrics,
eval splits, layer stats, checkpoints, HF export, TensorBoard, profile), token budgets, NaN handling, bad inputs
and the CLI.

Run: ``python -m pytest tests/training/test_trainer.py -q``
"""

from __future__ import annotations

import glob
import json
import math
from pathlib import Path

import pytest
import torch

import depthbench
from depthbench.config import RunConfigError, load_run_config
from depthbench.registry import build_model
from depthbench.training import run as run_mod
from depthbench.training.errors import NonFiniteLossError
from depthbench.training.optim import lr_lambda, param_groups
from depthbench.training.trainer import train
from tests.helpers import TINY_FIELDS, make_train_data

CONFIG_DIR = Path(depthbench.__file__).parent / "configs"
@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_train_data(tmp_path_factory.mktemp("train_data") / "data")


def tiny_run(data_dir: Path, out: Path, *overrides: str):
    base = {
        "model": {"arch": "pre_ln", "fields": TINY_FIELDS},
        "data": {"data_dir": str(data_dir), "seq_len": 32, "eval_sequences": 8, "prefetch": 1},
        "train": {"global_batch_size": 8, "micro_batch_size": 4, "max_steps": 4, "progress": False},
        "checkpoint": {"hf_export": False, "hash_files": False},
        "output_dir": str(out),
    }
    return load_run_config(base, list(overrides))


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


# ================================================================================================ recipe
def test_lr_schedule_warmup_then_cosine_to_min_ratio():
    f = lr_lambda(warmup=10, total=100, min_ratio=0.1)
    assert [f(s) for s in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert f(9) == pytest.approx(1.0) and f(10) == pytest.approx(1.0)
    assert f(99) == pytest.approx(0.1)
    values = [f(s) for s in range(10, 100)]
    assert all(a >= b for a, b in zip(values, values[1:]))
    assert f(55) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 45 / 89)))
    assert lr_lambda(0, 5, 0.1)(0) == pytest.approx(1.0)


def test_param_groups_exclude_norms_and_respect_decay_all_switch():
    model = build_model("pre_ln", vocab_size=128, **TINY_FIELDS)
    cfg = load_run_config({})
    o = cfg.optim
    groups = param_groups(model, lr=o.lr, weight_decay=o.weight_decay, eps=o.eps)
    by_name = {n: g["weight_decay"] for g in groups for n in g["param_names"]}
    assert by_name["model.layers.0.input_layernorm.weight"] == 0.0
    assert by_name["model.norm.weight"] == 0.0
    assert by_name["model.layers.0.self_attn.q_proj.weight"] == pytest.approx(0.1)
    assert by_name["lm_head.weight"] == pytest.approx(0.1)
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    assert load_run_config({}, ["optim.decay_norms_and_biases=true"]).optim.decay_norms_and_biases
    all_decay = param_groups(model, lr=o.lr, weight_decay=o.weight_decay, eps=o.eps, decay_all=True)
    assert all(g["weight_decay"] == pytest.approx(0.1) for g in all_decay)


# ================================================================================================ end to end
def test_end_to_end_run(data_dir, tmp_path):
    out = tmp_path / "run"
    cfg = tiny_run(data_dir, out, "train.max_steps=6", "train.eval_every=3", "checkpoint.every=3",
                   "checkpoint.keep_last=1", "checkpoint.hf_export=true", "checkpoint.hash_files=true",
                   "train.layer_stats_every=3", "track.tensorboard=true", "train.profile=true", "optim.lr=3e-3")
    summary = train(cfg)

    assert summary["status"] == "finished" and summary["steps"] == 6
    assert summary["tokens"] == 6 * 8 * 32
    assert set(summary["eval"]) == {"eval", "eval_synthetic"}
    assert summary["num_parameters"] == summary["parameters"]["total"]
    assert 0 <= summary["profile"]["overhead_fraction"] < 1
    assert json.loads((out / "summary.json").read_text())["steps"] == 6

    rows = read_metrics(out)
    train_rows = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in train_rows] == [1, 2, 3, 4, 5, 6]
    assert all(math.isfinite(r["train/loss"]) for r in train_rows)
    assert train_rows[-1]["train/loss"] < train_rows[0]["train/loss"]
    assert train_rows[0]["train/lr"] == pytest.approx(3e-3 * 1 / round(0.1 * 6))  # warmup step 1
    assert train_rows[-1]["train/lr"] == pytest.approx(3e-4)  # cosine ends at 0.1 x peak
    evals = [r for r in rows if "eval/eval/loss" in r]
    assert [r["step"] for r in evals] == [3, 6] and all("eval/eval_synthetic/loss" in r for r in evals)
    stats = [r for r in train_rows if "layer_stats/block_01/forward/rms" in r]
    assert [r["step"] for r in stats] == [3, 6]
    assert stats[0]["layer_stats/block_00/backward/rms"] > 0

    resolved = json.loads((out / "run_config.json").read_text())["resolved"]
    assert resolved["grad_accum_steps"] == 2 and resolved["world_size"] == 1 and resolved["max_steps"] == 6

    ckpts = out / "checkpoints"
    assert (ckpts / "latest").read_text() == "ckpt-000006"
    assert sorted(p.name for p in ckpts.iterdir()) == ["ckpt-000006", "latest"]  # keep_last=1, no leftovers
    state = json.loads((ckpts / "ckpt-000006" / "trainer_state.json").read_text())
    assert state["step"] == 6 and state["loader"]["position"] == 6 * 8
    assert all("sha256" in e for e in state["manifest"].values())
    assert (ckpts / "ckpt-000006" / "hf" / "config.json").exists()
    assert glob.glob(str(out / "tensorboard" / "**" / "events.out.tfevents*"), recursive=True)

    # The HF export loads through the Auto classes and reproduces the logged held-out loss.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from depthbench.data import TokenWindows

    model = AutoModelForCausalLM.from_pretrained(out / "final")
    tok = AutoTokenizer.from_pretrained(out / "final")
    assert len(tok) == 300 and tok.eos_token_id is not None
    windows = TokenWindows(str(data_dir), 32, split="eval")
    batch = windows.get_batch(range(min(len(windows), 8)))
    with torch.no_grad():
        loss = model(input_ids=batch, labels=batch, use_cache=False).loss
    assert float(loss) == pytest.approx(summary["eval"]["eval"], rel=1e-5)


def test_token_budget_sets_the_step_count(data_dir, tmp_path):
    cfg = tiny_run(data_dir, tmp_path / "run", "train.max_steps=null", "train.max_tokens=600", "data.eval_sequences=0")
    summary = train(cfg)
    assert summary["steps"] == 3 and summary["max_steps"] == math.ceil(600 / (8 * 32))
    assert summary["eval"] == {}


def test_attention_backend_and_gradient_checkpointing_match_default(data_dir, tmp_path):
    base = train(tiny_run(data_dir, tmp_path / "a", "train.max_steps=2", "data.eval_sequences=0"))
    other = train(tiny_run(data_dir, tmp_path / "b", "train.max_steps=2", "data.eval_sequences=0",
                           "model.attn_implementation=eager", "model.gradient_checkpointing=true"))
    assert other["final_train_loss"] == pytest.approx(base["final_train_loss"], rel=1e-5)


# ================================================================================================ failures
def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(data_dir, tmp_path, monkeypatch):
    real = run_mod.forward_loss
    calls = {"n": 0}

    def poisoned(model, input_ids):
        calls["n"] += 1
        loss = real(model, input_ids)
        return loss * float("nan") if calls["n"] > 2 * 2 else loss  # NaN from step 3 (2 micro-batches per step)

    monkeypatch.setattr(run_mod, "forward_loss", poisoned)
    out = tmp_path / "run"
    with pytest.raises(NonFiniteLossError, match=r"step 3.*ckpt-000002"):
        train(tiny_run(data_dir, out, "train.max_steps=6", "checkpoint.every=2"))
    assert (out / "checkpoints" / "latest").read_text() == "ckpt-000002"
    assert not (out / "checkpoints" / "ckpt-000003").exists()
    assert json.loads((out / "summary.json").read_text())["status"] == "diverged"


def test_global_batch_must_divide(data_dir, tmp_path):
    with pytest.raises(RunConfigError, match="not divisible"):
        train(tiny_run(data_dir, tmp_path / "run", "train.global_batch_size=6"))


def test_missing_and_empty_data(data_dir, tmp_path):
    with pytest.raises(RunConfigError, match="does not exist"):
        train(tiny_run(tmp_path / "nowhere", tmp_path / "r1"))
    with pytest.raises(RunConfigError, match="data_dir is required"):
        train(load_run_config({"train": {"max_steps": 1}, "output_dir": str(tmp_path / "r0")}))
    empty = tmp_path / "empty"
    empty.mkdir()
    meta = json.loads((data_dir / "meta.json").read_text())
    meta["splits"] = {"train": {"documents": 0, "tokens": 0, "shards": []}}
    (empty / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(RunConfigError, match="empty"):
        train(tiny_run(empty, tmp_path / "r2"))
    with pytest.raises(ValueError, match="seq_len"):  # fewer tokens than one window
        train(tiny_run(_short_data(tmp_path, data_dir), tmp_path / "r3"))
    assert not list(tmp_path.glob("r*/checkpoints"))  # a failed start leaves no empty checkpoints/ behind


def _short_data(tmp_path: Path, data_dir: Path) -> Path:
    from depthbench.data import prepare_data

    src = tmp_path / "short.txt"
    src.write_text("tiny.\n")
    out = tmp_path / "short"
    prepare_data([str(src)], str(data_dir / "tokenizer"), str(out), progress=False)
    return out


def test_model_mismatches_are_refused(data_dir, tmp_path):
    with pytest.raises(RunConfigError, match="exceeds the model's vocab_size=128"):
        train(tiny_run(data_dir, tmp_path / "r1", "model.vocab_size=128"))
    with pytest.raises(RunConfigError, match="max_position_embeddings=16"):
        train(tiny_run(data_dir, tmp_path / "r2", "model.fields.max_position_embeddings=16"))
    with pytest.raises(RunConfigError, match="eval_splits"):
        train(tiny_run(data_dir, tmp_path / "r3", "data.eval_splits=[nope]"))
    with pytest.raises(ValueError, match="unknown architecture"):
        train(tiny_run(data_dir, tmp_path / "r4", "model.arch=nope"))
    assert not list(tmp_path.glob("r*/checkpoints"))  # checkpoints/ comes with the first checkpoint, not before


def test_output_dir_with_another_run_needs_resume_or_overwrite(data_dir, tmp_path):
    out = tmp_path / "run"
    train(tiny_run(data_dir, out, "train.max_steps=1", "data.eval_sequences=0"))
    with pytest.raises(RunConfigError, match="--resume.*--overwrite"):
        train(tiny_run(data_dir, out, "train.max_steps=2", "data.eval_sequences=0"))
    summary = train(tiny_run(data_dir, out, "train.max_steps=2", "data.eval_sequences=0", "overwrite=true"))
    assert summary["steps"] == 2
    assert [r["step"] for r in read_metrics(out)] == [1, 2]  # the old run's rows are gone


def test_missing_tracker_package_is_an_error(data_dir, tmp_path):
    from accelerate.utils import is_wandb_available

    if is_wandb_available():
        pytest.skip("wandb is installed")
    with pytest.raises(RunConfigError, match="wandb.*not installed"):
        train(tiny_run(data_dir, tmp_path / "run", "track.wandb=true"))


# ================================================================================================ CLI
def test_cli_train_and_error_exit_code(data_dir, tmp_path, capsys):
    from depthbench.cli import main

    out = tmp_path / "run"
    args = ["train", "--arch", "pre_ln", "--data", str(data_dir), "-o", str(out),
            f"model.fields={json.dumps(TINY_FIELDS)}", "data.seq_len=32", "train.global_batch_size=4",
            "train.micro_batch_size=4", "train.max_steps=2", "train.progress=false", "checkpoint.hf_export=false",
            "data.eval_sequences=4"]
    assert main(args) == 0
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"
    assert "finished at step 2/2" in capsys.readouterr().err
    assert main(args) == 2  # the folder now holds a run: a usage error (exit 2, as prepare-data and sweep)
    assert "--overwrite" in capsys.readouterr().err
