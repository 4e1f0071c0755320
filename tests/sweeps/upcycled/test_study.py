"""``depthbench upcycle-study`` (``depthbench.sweeps.upcycled.study``) on a tiny random ``LlamaForCausalLM`` source
(built by transformers) and a small prepared corpus: the stages' files, step-0 losses against the source run by
transformers itself, progress, running again, resuming after a crash, refusing a folder of another study and bad
input. The results and report are ``test_report.py``'s, the command line ``test_command.py``'s.
"""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from depthbench.sweeps.spec import SweepError
from depthbench.sweeps.upcycled import study as study_mod
from depthbench.sweeps.upcycled.study import run_study
from tests.sweeps.upcycled.tiny_study import definition


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


def test_bad_input_is_refused_before_anything_is_written(source, data_dir, tmp_path):
    with pytest.raises(SweepError, match="not a prepared data folder"):
        definition(source, tmp_path / "nothing")
    with pytest.raises(ValueError, match="unknown architecture|not_an_arch"):
        definition(source, data_dir, archs=["not_an_arch"])
    assert study_mod.STUDY == "study.json" and not (tmp_path / "out").exists()


