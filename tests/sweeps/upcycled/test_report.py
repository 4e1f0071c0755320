"""Tests of ``depthbench.sweeps.upcycled.report`` on the tiny study (``tests/sweeps/upcycled/conftest.py``): the
results, plot and report of its folder, and ``depthbench report`` rebuilding the study's section; and the rows
read from a hand-written study folder (a stopped run has no final loss).

Run: ``python -m pytest tests/sweeps/upcycled/test_report.py -q``
"""

from __future__ import annotations

import csv
import json

import pytest


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


def test_depthbench_report_rebuilds_the_study_section(study):
    from depthbench.sweeps.report import write_report

    (study["out"] / "report.md").unlink()
    write_report(str(study["out"]), log=lambda *_: None)
    assert "# Upcycling study:" in (study["out"] / "report.md").read_text()


def test_rows_are_read_from_the_folder_s_files_and_only_a_finished_run_has_a_final_loss(tmp_path):
    from depthbench.sweeps.upcycled.report import render_study, study_rows

    def write(rel: str, content: dict) -> None:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(json.dumps(content))

    # the runs' recipe is their own run_config.json's (the study's overrides applied), not the definition's base
    write("study.json", {"definition": {"split": "held", "archs": ["pre_ln", "hc"], "seeds": [1],
                                        "base": {"train": {"global_batch_size": 8}, "data": {"seq_len": 256}}}})
    write("step0.json", {"models": {"source": {"loss": 3.0}, "pre_ln": {"loss": 3.0}, "hc": {"loss": 3.25}}})
    for arch, status in (("pre_ln", "finished"), ("hc", "stopped")):
        write(f"models/{arch}/upcycle.json", {"start": "exact", "deviation_relative": 0.0, "bound_relative": None,
                                               "source": {"name": "src", "family": "LlamaForCausalLM"},
                                               "growth": {"new_blocks": 2, "mode": "append",
                                                          "layout": [0, 1, None, None]}})
        run = f"runs/{arch}__d32-L4__lr0.003__s1"
        write(f"{run}/summary.json", {"status": status, "steps": 5, "tokens": 640, "parameters": {"total": 1600},
                                      "eval": {"held": 2.5, "eval": 9.0}})
        write(f"{run}/run_config.json", {"config": {"optim": {"lr": 0.003}, "data": {"seq_len": 32},
                                                    "train": {"seed": 1, "global_batch_size": 4}},
                                         "resolved": {"model_config": {"num_hidden_layers": 4, "hidden_size": 32}}})
    hc, pre = study_rows(str(tmp_path))  # run folders in name order
    assert (pre["arch"], pre["loss_final"], pre["loss_step0"], pre["loss_source_step0"]) == ("pre_ln", 2.5, 3.0, 3.0)
    assert (pre["change"], pre["below_step0"], pre["tokens_per_param"]) == (-0.5, True, 0.4)
    assert (pre["new_blocks"], pre["num_layers"], pre["lr"], pre["seed"]) == (2, 4, 0.003, 1)
    assert hc["loss_final"] is None and "change" not in hc and hc["status"] == "stopped"
    assert (pre["global_batch_size"], pre["seq_len"]) == (4, 32)
    text = render_study(str(tmp_path), [hc, pre], None)
    assert "1 of 2 runs finished. Each ran 5 optimizer steps of 4 x 32 tokens (640 tokens per run)" in text
