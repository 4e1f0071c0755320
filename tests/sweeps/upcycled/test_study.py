"""``depthbench upcycle-study`` on a tiny random ``LlamaForCausalLM`` source (built by transformers) and a small
prepared corpus: the stages' files, step-0 losses against the source run by transformers itself, the results,
plot and report, resuming after a crash, refusing a folder of another study, ``depthbench report`` rebuilding it.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from depthbench.sweeps.spec import SweepError
from depthbench.sweeps.upcycled import study as study_mod
from depthbench.sweeps.upcycled.study import StudyDefinition, run_study
from tests.helpers import make_train_data


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_train_data(tmp_path_factory.mktemp("study_data") / "data")


@pytest.fixture(scope="module")
def source(tmp_path_factory, data_dir) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(data_dir / "tokenizer")
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         eos_token_id=0, pad_token_id=1)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("study_source") / "llama"
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def definition(source: Path, data_dir: Path, **kw) -> StudyDefinition:
    return StudyDefinition(
        source=str(source), archs=kw.pop("archs", ["pre_ln", "hc"]), data_dir=str(data_dir),
        grow_depth=kw.pop("grow_depth", 1), lr=3e-3,
        base={"data": {"seq_len": 32, "eval_sequences": 4},
              "train": {"global_batch_size": 4, "micro_batch_size": 4, "max_steps": 3, "eval_every": 1,
                        "progress": False, "mixed_precision": "no"},
              "checkpoint": {"every": 0, "hf_export": False}},
        metrics=["logit_lens"], analysis={"num_samples": 4, "seq_len": 32, "seed": 1}, **kw)


@pytest.fixture(scope="module")
def study(tmp_path_factory, source, data_dir) -> dict:
    out = tmp_path_factory.mktemp("study") / "out"
    messages: list[str] = []
    paths = run_study(definition(source, data_dir), str(out), log=messages.append)
    return {"out": out, "paths": paths, "log": messages}


def test_step_zero_losses_equal_the_sources(study, source, data_dir):
    from transformers import LlamaForCausalLM

    from depthbench.data import TokenShards, TokenWindows

    step0 = json.loads((study["out"] / "step0.json").read_text())["models"]
    model = LlamaForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    windows = TokenWindows(TokenShards(str(data_dir), "eval"), 32)
    with torch.no_grad():
        ids = windows.get_batch(range(4))
        reference = float(model(input_ids=ids, labels=ids).loss)
    assert math.isclose(step0["source"]["loss"], reference, rel_tol=1e-6)
    for arch in ("pre_ln", "hc"):  # exact starts, also with a grown block
        assert math.isclose(step0[arch]["loss"], reference, rel_tol=1e-5), (arch, step0[arch], reference)


def test_results_plot_and_report(study):
    out = study["out"]
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert sorted(r["arch"] for r in rows) == ["hc", "pre_ln"]
    for r in rows:
        assert r["status"] == "finished" and r["steps"] == "3" and r["tokens"] == str(3 * 4 * 32)
        assert r["new_blocks"] == "1" and r["num_layers"] == "3" and r["start"] == "exact"
        assert float(r["change"]) == pytest.approx(float(r["loss_final"]) - float(r["loss_step0"]))
        assert len(r["init_sha256"]) == 64
    assert (out / "upcycle_study.png").stat().st_size > 0
    report = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    step0 = json.loads((out / "step0.json").read_text())["models"]
    assert f"At step 0 the source's held-out loss is {step0['source']['loss']:.4f}" in report
    assert "Ranked by final held-out loss:" in report
    assert "With one seed per design there is no seed spread" in report
    assert "384 tokens per run" in report
    assert "## Layer analyses before and after" in report and "| source | step 0 | logit_lens |" in report
    assert "upcycle_study.png" in report and "data:image/png;base64" in html
    for arch in ("pre_ln", "hc"):  # analyses before and after
        assert (out / "analysis" / "before" / arch / "logit_lens.json").is_file()
    assert (out / "analysis" / "source" / "logit_lens.json").is_file()
    assert len(list((out / "analysis").glob("*__*/logit_lens.json"))) == 2


def test_progress_names_stages_and_estimates_time_left(study):
    text = "\n".join(study["log"])
    for stage in ("[upcycle 1/2]", "[step-0 loss 3/3]", "[analysis before 1/3]", "[train 2/2]"):
        assert stage in text
    assert "left in this stage" in text


def test_run_again_skips_everything(study, source, data_dir):
    messages: list[str] = []
    before = (study["out"] / "results.csv").read_text()
    run_study(definition(source, data_dir), str(study["out"]), log=messages.append)
    text = "\n".join(messages)
    assert text.count("done earlier, skipped") >= 2 + 3 + 3 + 2
    assert (study["out"] / "results.csv").read_text() == before


def test_another_definition_is_refused(study, source, data_dir):
    before = sorted(p.name for p in study["out"].iterdir())
    with pytest.raises(SweepError, match="holds another upcycling study"):
        run_study(definition(source, data_dir, archs=["pre_ln"]), str(study["out"]), log=lambda *_: None)
    assert sorted(p.name for p in study["out"].iterdir()) == before


def test_resumes_after_a_crash(source, data_dir, tmp_path, monkeypatch):
    from depthbench.sweeps import runner

    real, calls = runner.train_point, []

    def crash_on_second(*args, **kwargs):
        calls.append(args[-1])
        if len(calls) == 2:
            raise RuntimeError("simulated crash")
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "train_point", crash_on_second)
    defn = definition(source, data_dir, grow_depth=0)
    defn.metrics = []
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_study(defn, str(tmp_path / "out"), log=lambda *_: None)
    monkeypatch.setattr(runner, "train_point", real)
    messages: list[str] = []
    run_study(defn, str(tmp_path / "out"), log=messages.append)
    text = "\n".join(messages)
    assert "pre_ln__d32-L2__lr0.003__s0: done earlier, skipped" in text and "hc__d32-L2__lr0.003__s0: training" in text
    rows = list(csv.DictReader((tmp_path / "out" / "results.csv").open()))
    assert sorted(r["status"] for r in rows) == ["finished", "finished"]


def test_depthbench_report_rebuilds_the_study_section(study):
    from depthbench.sweeps.report import write_report

    (study["out"] / "report.md").unlink()
    write_report(str(study["out"]), log=lambda *_: None)
    assert "# Upcycling study:" in (study["out"] / "report.md").read_text()


def test_bad_input_is_refused_before_anything_is_written(source, data_dir, tmp_path):
    with pytest.raises(SweepError, match="not a prepared data folder"):
        definition(source, tmp_path / "nothing")
    with pytest.raises(ValueError, match="unknown architecture|not_an_arch"):
        definition(source, data_dir, archs=["not_an_arch"])
    assert study_mod.STUDY == "study.json" and not (tmp_path / "out").exists()


def test_command_line_takes_the_source_then_recipe_overrides(source, data_dir, tmp_path):
    from depthbench.cli import build_parser
    from depthbench.sweeps.upcycled.command import _cmd_upcycle_study as run_cli

    parser = build_parser("upcycle-study")
    args = parser.parse_args(["upcycle-study", str(source), "train.max_steps=3", "--archs", "pre_ln,hc", "--data",
                              str(data_dir), "-o", str(tmp_path / "out"), "--grow-depth", "2"])
    assert args.source == [str(source), "train.max_steps=3"] and args.grow_depth == 2 and args.seeds == [0]
    bad = parser.parse_args(["upcycle-study", str(source), "other", "--archs", "pre_ln", "--data", str(data_dir),
                             "-o", str(tmp_path / "out")])
    with pytest.raises(SweepError, match="'other' is not a run-config override"):
        run_cli(bad)
    assert not (tmp_path / "out").exists()
