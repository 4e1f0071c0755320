"""Tests of ``depthbench.sweeps.report``, a sweep's ``report.md``: each seed-spread verdict is said once in words,
not once per architecture and metric; no sentence is fixed text that a run with other settings would contradict
(the demo's tokens per parameter); on the tiny real sweep, the loss-change table from the rows' best points, the
plot, and the best LR of a shape where one run stopped.

Hand-built rows: ``tests/sweeps/report_rows.py``; the real sweep: ``tests/sweeps/tiny_sweep.py``.

Run: ``python -m pytest tests/sweeps/test_report.py -q``
"""

from __future__ import annotations

import json
import re

import pytest

from depthbench.sweeps import demo
from depthbench.sweeps import results as results_mod
from depthbench.sweeps.report import VERDICTS, write_report
from depthbench.sweeps.results import collect_results
from tests.sweeps.report_rows import DEMO_SHAPES, WORSE, make_rows, report_of
from tests.sweeps.tiny_sweep import ARCHS, copy_sweep, read_csv


def test_each_verdict_is_said_once_in_words():
    report = report_of(make_rows(DEMO_SHAPES, WORSE))
    assert len(re.findall("deeper is worse, beyond the seed spread", report, flags=re.I)) == 1
    assert "- Deeper is worse, beyond the seed spread: every architecture, on every metric" in report
    mixed = dict(WORSE, hc=[1.48, 1.48, 1.4805])  # hc's change within its seeds' spread
    text = report_of(make_rows(DEMO_SHAPES, mixed))
    assert len(re.findall("deeper is worse, beyond the seed spread", text, flags=re.I)) == 1
    assert "- Within the seed spread: **hc** on every metric" in text


@pytest.mark.parametrize("steps", [20, None])
def test_the_demo_report_s_tokens_per_parameter_are_the_run_s(tmp_path, steps):
    spec = demo.demo_spec(str(tmp_path / "data"), steps=steps).to_dict()
    tokens = spec["base"]["train"]["max_steps"] * 16 * 128
    rows = make_rows(DEMO_SHAPES, WORSE, tokens=tokens)
    report = report_of(rows, spec)
    tpp = [r["tokens_per_param"] for r in rows]
    claims = re.findall(r"([\d.]+) tokens per parameter", report)
    assert claims and all(min(tpp) - 0.05 <= float(c) <= max(tpp) + 0.05 for c in claims), claims


def test_the_train_loss_of_one_run_is_labelled_as_one_batch():
    report = report_of(make_rows(DEMO_SHAPES, WORSE))
    assert "| final_train_loss (last batch) |" in report and "loss of the run's last training batch" in report


def test_report_md_and_plot(sweep_dir):
    report = (sweep_dir / "report.md").read_text()
    assert "![held-out loss vs aspect ratio](loss_vs_aspect_ratio.png)" in report
    assert "## Loss change from the shallowest to the deepest shape" in report
    rows = collect_results(str(sweep_dir))
    for arch in ARCHS:
        for metric in ("eval_synthetic", "eval_text", "eval_loss"):
            pts = results_mod.best_points(rows, metric)[arch]
            assert [p["num_layers"] for p in pts] == [2, 4]
            change = pts[1]["mean"] - pts[0]["mean"]
            line = (f"| {arch} | {results_mod.metric_label(metric)} | L2, 16.0 | L4, 8.0 | {pts[0]['mean']:.4f} | "
                    f"{pts[1]['mean']:.4f} | {change:+.4f} | {100 * change / pts[0]['mean']:+.1f}% | "
                    f"{VERDICTS['one seed']} |")
            assert line in report, line
    assert "8 of 8 runs finished" in report
    assert report.count("\n| pre_ln | tiny-L") == 2 + 4  # best-LR table (2 shapes) + all runs (4)
    png = (sweep_dir / "loss_vs_aspect_ratio.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_write_report_with_unfinished_runs(sweep_dir, tmp_path):
    out = copy_sweep(sweep_dir, tmp_path / "copy")
    victim = out / "runs" / "pre_ln__tiny-L4__lr0.003__s0" / "summary.json"
    summary = json.loads(victim.read_text())
    victim.write_text(json.dumps({**summary, "status": "stopped"}))
    write_report(str(out), log=lambda *_: None)
    rows = read_csv(out / "results.csv")
    stopped = [r for r in rows if r["status"] == "stopped"]
    assert len(stopped) == 1 and stopped[0]["at_best_lr"] == "False"
    assert stopped[0]["best_lr"] == "0.001"  # the only finished LR of (pre_ln, tiny-L4)
    assert "7 of 8 runs finished" in (out / "report.md").read_text()
