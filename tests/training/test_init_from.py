"""Continued pretraining from a checkpoint folder (``model.init_from``, ``depthbench train --init-from``), the
folder here written by ``depthbench upcycle`` from a tiny random ``LlamaForCausalLM`` built by transformers:

* the run's model at step 0 holds the folder's tensors, and its held-out loss equals the source Llama's, computed
  by transformers itself on the same windows; the run records the folder's path and a content hash (checked
  against a hash computed here); layer statistics work;
* a resumed run never reads the init folder again (it is deleted between the sessions) and equals an uninterrupted
  run exactly; FSDP2 (one process, sharded checkpoint, resumed) equals the plain run;
* an init folder whose architecture or sizes disagree with the run config is refused naming both; a changed
  ``model.init_from`` on resume is refused.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from depthbench.config import RunConfigError, load_run_config
from depthbench.training.trainer import train
from tests.helpers import REPO_ROOT, make_train_data


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_train_data(tmp_path_factory.mktemp("init_from_data") / "data")


def tiny_llama(vocab_size: int, seed: int = 0, tied: bool = False):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=tied, eos_token_id=0, pad_token_id=1)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def upcycle_tiny_llama(root: Path, data_dir: Path, tied: bool = False) -> dict:
    """``{"source": Llama folder, "hc": upcycled hc folder}`` under ``root`` (the source carries the data's
    tokenizer)."""
    from transformers import AutoTokenizer

    from depthbench.upcycle import upcycle

    tokenizer = AutoTokenizer.from_pretrained(data_dir / "tokenizer")
    source = root / "llama"
    tiny_llama(len(tokenizer), tied=tied).save_pretrained(source)
    tokenizer.save_pretrained(source)
    upcycle(str(source), "hc").save(str(root / "hc"))
    return {"source": source, "hc": root / "hc"}


@pytest.fixture(scope="module")
def upcycled(tmp_path_factory, data_dir) -> dict:
    return upcycle_tiny_llama(tmp_path_factory.mktemp("init_from_models"), data_dir)


def run_dict(data_dir: Path, out: Path, init: Path, **train) -> dict:
    return {
        "model": {"init_from": str(init)},
        "data": {"data_dir": str(data_dir), "seq_len": 32, "eval_sequences": 8},
        "train": {"global_batch_size": 8, "micro_batch_size": 4, "max_steps": 4, "eval_every": 2, "progress": False,
                  "mixed_precision": "no", **train},
        "optim": {"lr": 3e-3},
        "checkpoint": {"every": 2, "keep_last": 2, "hf_export": False},
        "output_dir": str(out),
    }


def losses(out: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["train/loss"] for r in rows if "train/loss" in r}


def folder_hash(folder: Path) -> str:
    files = ["config.json", *sorted(p.name for p in folder.glob("*.safetensors"))]
    lines = "".join(f"{n}:{hashlib.sha256((folder / n).read_bytes()).hexdigest()}\n" for n in files)
    return hashlib.sha256(lines.encode()).hexdigest()


def test_step_zero_is_the_upcycled_model_and_its_loss_is_the_sources(data_dir, upcycled, tmp_path):
    from transformers import LlamaForCausalLM

    from depthbench.data import TokenShards, TokenWindows
    from depthbench.training.run import Run
    from depthbench.training.run_folder import release_output_dir

    cfg = load_run_config(run_dict(data_dir, tmp_path / "run", upcycled["hc"]))
    assert cfg.model.arch is None  # the folder's architecture, not the default
    run = Run(cfg)
    try:
        assert run.arch_id == "hc"
        ours = run.accelerator.unwrap_model(run.model).state_dict()
        saved = load_file(upcycled["hc"] / "model.safetensors")
        assert all(torch.equal(ours[k], v) for k, v in saved.items())
        step0 = run.evaluate()["eval"]
    finally:
        release_output_dir(cfg.output_dir)
    # the source run by transformers itself on the same windows (the trainer's evaluation: the first 8 windows)
    source = LlamaForCausalLM.from_pretrained(upcycled["source"], dtype=torch.float32).eval()
    windows = TokenWindows(TokenShards(str(data_dir), "eval"), 32)
    with torch.no_grad():
        ids = windows.get_batch(range(8))
        reference = float(source(input_ids=ids, labels=ids).loss)
    assert math.isclose(step0, reference, rel_tol=1e-5), (step0, reference)


def test_training_records_where_it_came_from(data_dir, upcycled, tmp_path):
    out = tmp_path / "run"
    summary = train(load_run_config(run_dict(data_dir, out, upcycled["hc"], layer_stats_every=2)))
    assert summary["status"] == "finished" and summary["arch"] == "hc"
    resolved = json.loads((out / "run_config.json").read_text())["resolved"]
    record = resolved["init_from"]
    assert record["path"] == str(upcycled["hc"].resolve())
    assert record["sha256"] == folder_hash(upcycled["hc"])
    assert record["upcycle"]["arch"] == "hc" and record["upcycle"]["start"] == "exact"
    assert summary["init_from"]["sha256"] == record["sha256"]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any(k.startswith("layer_stats/") for r in rows for k in r)  # layer statistics of the upcycled model


def test_resume_never_reads_the_init_folder_again(data_dir, upcycled, tmp_path):
    straight = tmp_path / "straight"
    train(load_run_config(run_dict(data_dir, straight, upcycled["hc"])))
    init = tmp_path / "init"
    shutil.copytree(upcycled["hc"], init)
    sliced = tmp_path / "sliced"
    first = train(load_run_config(run_dict(data_dir, sliced, init, stop_at_step=2)))
    assert first["status"] == "stopped"
    shutil.rmtree(init)  # a resume that read the source again would fail here (or start from it)
    second = train(load_run_config(run_dict(data_dir, sliced, init), ["resume=true"]))
    assert second["status"] == "finished" and second["steps"] == 4
    assert losses(straight) == losses(sliced)
    a, b = load_file(straight / "final" / "model.safetensors"), load_file(sliced / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    record = json.loads((sliced / "run_config.json").read_text())["resolved"]["init_from"]
    assert record["sha256"] == json.loads((straight / "run_config.json").read_text())["resolved"]["init_from"][
        "sha256"]  # carried over from the first session, not recomputed


def test_a_head_tied_to_the_embeddings_resumes_exactly_and_stays_tied(data_dir, tmp_path):
    """SmolLM2's output head is its embedding matrix: the checkpoints store it once, and a resumed run (and the
    final export) has the two tied again, equal to an uninterrupted run."""
    from transformers import AutoModelForCausalLM

    init = upcycle_tiny_llama(tmp_path / "models", data_dir, tied=True)["hc"]
    straight, sliced = tmp_path / "straight", tmp_path / "sliced"
    train(load_run_config(run_dict(data_dir, straight, init)))
    assert train(load_run_config(run_dict(data_dir, sliced, init, stop_at_step=2)))["status"] == "stopped"
    assert train(load_run_config(run_dict(data_dir, sliced, init), ["resume=true"]))["steps"] == 4
    assert losses(straight) == losses(sliced)
    a, b = load_file(straight / "final" / "model.safetensors"), load_file(sliced / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert "lm_head.weight" not in b and "model.embed_tokens.weight" in b  # stored once, as the source stores it
    model = AutoModelForCausalLM.from_pretrained(sliced / "final")
    assert model.config.tie_word_embeddings
    assert not torch.equal(model.model.embed_tokens.weight, AutoModelForCausalLM.from_pretrained(
        init).model.embed_tokens.weight)  # trained: the embedding (and so the head) moved


def test_changed_init_folder_on_resume_is_refused(data_dir, upcycled, tmp_path):
    out = tmp_path / "run"
    train(load_run_config(run_dict(data_dir, out, upcycled["hc"], stop_at_step=2)))
    with pytest.raises(RunConfigError, match="model.init_from"):
        train(load_run_config(run_dict(data_dir, out, upcycled["source"]), ["resume=true"]))


def test_fsdp2_from_an_init_folder_equals_the_plain_run(data_dir, upcycled, tmp_path):
    plain = run_dict(data_dir, tmp_path / "plain", upcycled["hc"])
    train(load_run_config(plain))
    first = run_dict(data_dir, tmp_path / "sharded", upcycled["hc"], stop_at_step=2, parallelism="fsdp2")
    second = {**first, "train": {**first["train"], "stop_at_step": None}, "resume": True}
    (tmp_path / "first.json").write_text(json.dumps(first))
    (tmp_path / "second.json").write_text(json.dumps(second))
    proc = subprocess.run([sys.executable, "-m", "tests.training.fsdp_runs", str(tmp_path / "first.json"),
                           str(tmp_path / "second.json")], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=600, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = tmp_path / "sharded"
    assert (out / "checkpoints" / "ckpt-000002" / "state" / "dcp" / ".metadata").is_file()
    a, b = losses(tmp_path / "plain"), losses(out)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    assert max(abs(a[s] - b[s]) for s in a) <= 1e-5


@pytest.mark.parametrize("override, needle", [
    ("model.arch=pre_ln", r"holds a hc model but model.arch is 'pre_ln'"),
    ("model.shape=tiny-L4", r"does not have model.shape='tiny-L4': hidden_size 32 in the folder"),
    ("model.fields.intermediate_size=48", r"tensor 'model.layers.0.mlp.down_proj.weight' has shape \(32, 64\) in "
                                          r"the folder and \(32, 48\)"),
    ("model.config_path=x.json", "unset when model.init_from is set"),
])
def test_disagreeing_run_config_is_refused_naming_both(data_dir, upcycled, tmp_path, override, needle):
    out = tmp_path / "run"
    with pytest.raises(RunConfigError, match=needle):
        train(load_run_config(run_dict(data_dir, out, upcycled["hc"]), [override]))
    assert not (out / "run_config.json").exists() and not (out / "metrics.jsonl").exists()


def test_a_folder_without_a_model_is_refused(data_dir, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunConfigError, match="holds no config.json"):
        train(load_run_config(run_dict(data_dir, tmp_path / "run", tmp_path / "empty")))


def test_cli_flag_sets_the_key(data_dir, upcycled, tmp_path):
    import argparse

    from depthbench.training.command import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--init-from", str(upcycled["hc"]), "--data", str(data_dir), "-o", str(tmp_path)])
    cfg = config_from_args(args)
    assert cfg.model.init_from == str(upcycled["hc"]) and cfg.model.arch is None
