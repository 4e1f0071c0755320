"""``depthbench.analysis.runner``: a model loaded from a checkpoint or its run folder is the saved one (its logits
against the model that was saved), a text file needs a tokenizer, finished metrics are skipped, data is required.

Run with ``python -m pytest tests/analysis/test_runner.py -q``.
"""

from __future__ import annotations

import json

import pytest
import torch

from depthbench.analysis.runner import analyze_target, load_model
from depthbench.analysis.sampling import WindowSpec
from tests.analysis.helpers import IDS, build


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    run = tmp_path_factory.mktemp("analysis_runner") / "run"
    model = build("pre_ln")
    model.save_pretrained(run / "final")
    with torch.no_grad():
        logits = model(input_ids=IDS).logits
    return run, logits


@pytest.mark.parametrize("which", ["final", "run"])
def test_load_model_from_a_checkpoint_or_its_run_folder(saved, which):
    run, logits = saved
    model, tokenizer = load_model(str(run / "final" if which == "final" else run), device="cpu")
    assert tokenizer is None  # none was saved
    assert not model.training and next(model.parameters()).dtype == torch.float32
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=IDS).logits, logits, rtol=0, atol=0)


def test_a_text_file_without_a_tokenizer_is_refused(saved, tmp_path):
    run, _ = saved
    text = tmp_path / "text.txt"
    text.write_text("one line\n")
    with pytest.raises(ValueError, match="a tokenizer is needed"):
        analyze_target(str(run), ["angular"], str(tmp_path / "out"), str(text), WindowSpec(2, 8), progress=False,
                       device="cpu", log=lambda *_: None)


def test_finished_metrics_are_skipped_and_data_is_required_for_the_rest(saved, tmp_path):
    run, _ = saved
    out = tmp_path / "out"
    out.mkdir()
    (out / "angular.json").write_text(json.dumps({"metric": "angular"}))
    logs = []
    assert analyze_target(str(run), ["angular"], str(out), None, WindowSpec(2, 8), skip_done=True,
                          log=logs.append) == {}
    assert logs == [f"{run}: all metrics done, skipped"]
    with pytest.raises(ValueError, match="--data is required"):
        analyze_target(str(run), ["angular"], str(out), None, WindowSpec(2, 8), log=logs.append)
