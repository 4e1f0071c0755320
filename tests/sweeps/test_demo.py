"""Tests of the embedded demo (``depthbench sweep --preset demo``, ``depthbench.sweeps.demo``): the spec is what the
docs
say (pre_ln, hc, attnres at >= 3 depths of the tiny grid, one recipe), its corpus has separate synthetic and text
eval splits, the compute stays inside the measured time budget, bad flags are refused, and the whole command runs
end to end (on a small corpus with narrowed models; the real-size run is the ``slow`` test).

Run: ``python -m pytest tests/sweeps/test_demo.py -q`` (add ``--runslow`` for the real-size smoke run).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from depthbench.cli import main as cli_main
from depthbench.registry import build_config
from depthbench.shapes import get_grid, get_shape
from depthbench.sweeps import demo
from depthbench.sweeps.spec import SweepError

NARROW = ["--set", "model.fields.hidden_size=32", "--set", "model.fields.intermediate_size=64",
          "--set", "model.fields.head_dim=8", "--set", "model.fields.vocab_size=300"]


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("demo") / "data"
    demo.ensure_demo_data(str(path), log=lambda *_: None, synthetic_docs=400, eval_synthetic_docs=40,
                          text_fraction=0.3, vocab_size=300)
    return path


def test_demo_spec_is_what_the_docs_say(tmp_path):
    spec = demo.demo_spec(str(tmp_path / "data"))
    assert spec.archs == ["pre_ln", "hc", "attnres"]
    assert len(spec.shapes) >= 3 and all(get_shape(s).grid == "tiny" for s in spec.shapes)
    depths = [get_shape(s).num_layers for s in spec.shapes]
    assert depths == sorted(depths) and set(depths) <= set(get_grid("tiny").depths)
    assert len(spec.lrs) == 1 and spec.seeds == [0] and len(spec.runs()) == 3 * len(spec.shapes)
    cfg = spec.run_config(spec.runs()[0], str(tmp_path / "run"))
    assert cfg.data.eval_splits == "auto" and cfg.data.eval_sequences > 0  # every eval split, each on its own
    assert cfg.train.max_steps == demo.DEMO_STEPS and cfg.data.data_dir == str((tmp_path / "data").resolve())
    assert cfg.train.cpu and cfg.train.mixed_precision == "no"
    # the docstring documents the recipe actually used
    doc = " ".join(demo.__doc__.split())
    b, t = demo.DEMO_BASE["train"]["global_batch_size"], demo.DEMO_BASE["data"]["seq_len"]
    assert f"{demo.DEMO_STEPS} AdamW steps of {b} sequences x {t} tokens" in doc
    assert f"({demo.DEMO_STEPS * b * t:,} tokens per run" in doc
    assert f"peak LR {demo.DEMO_LR:g}" in doc
    assert f"first {demo.DEMO_BASE['data']['eval_sequences']} windows" in doc
    for arch in spec.archs:
        assert f"``{arch}``" in doc
    for depth in depths:
        assert f"L{depth} (d={get_shape(f'tiny-L{depth}').hidden_size}" in doc
    assert demo.DEMO_NOTES in spec.notes and spec.fingerprint() == demo.demo_spec(str(tmp_path / "data")).fingerprint()


def test_demo_compute_stays_inside_the_measured_time_budget():
    """6 N D over the nine runs (N without the input embedding). The recipe was sized on the project's 2-core CPU
    box at ~30 GFLOP/s per core (see the README's benchmark section); raising steps/batch/seq_len beyond this needs
    a new measurement, not just a new number."""
    spec = demo.demo_spec("unused")
    tokens = demo.DEMO_STEPS * demo.DEMO_BASE["train"]["global_batch_size"] * demo.DEMO_BASE["data"]["seq_len"]
    flops = 0
    for point in spec.runs():
        counts = build_config(point.arch, **get_shape(point.shape).config_fields()).parameter_counts()
        flops += 6 * (counts["total"] - counts["embedding"]) * tokens
    assert 4e12 < flops < 9e12, f"{flops / 1e12:.2f} TFLOP"


def test_demo_corpus_reports_synthetic_and_text_separately(small_corpus):
    meta = json.loads((small_corpus / "meta.json").read_text())
    assert {"train", "eval_synthetic", "eval_text"} <= set(meta["splits"])
    logs: list[str] = []
    demo.ensure_demo_data(str(small_corpus), log=logs.append)
    assert logs and "reusing" in logs[0] and "eval_synthetic" in logs[0]


def test_preset_demo_refuses_flags_it_fixes(tmp_path, capsys):
    args = argparse.Namespace(archs="pre_ln", grid=None, shapes=None, budget=None, depths=None, emit=None,
                              out=str(tmp_path / "o"), steps=None, set=None)
    with pytest.raises(SweepError, match="--preset demo fixes its architectures and shapes; drop --archs"):
        demo.run_demo(args)
    assert cli_main(["sweep", "--preset", "demo", "--grid", "tiny", "--out", str(tmp_path / "o")]) == 2
    assert "drop --grid" in capsys.readouterr().err
    assert cli_main(["sweep", "--preset", "demo", "--steps", "0", "--out", str(tmp_path / "o")]) == 2
    assert cli_main(["sweep", "--preset", "demo", "--set", "train.nope=1", "--out", str(tmp_path / "o")]) == 2
    assert "unknown config key 'train.nope'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # refused before the corpus is built


def test_demo_command_and_its_sweep_alias_take_the_same_arguments(tmp_path, capsys):
    from depthbench import cli

    assert cli._resolve_alias(["sweep", "--out", "x", "--preset=demo", "--steps", "2"]) == (
        ["demo", "--out", "x", "--steps", "2"], ("sweep", "--preset", "demo"))
    assert cli._resolve_alias(["sweep", "--preset", "demo"]) == (["demo"], ("sweep", "--preset", "demo"))
    assert cli._resolve_alias(["sweep", "--archs", "hc", "--grid", "tiny"]) == (
        ["sweep", "--archs", "hc", "--grid", "tiny"], None)
    assert cli_main(["demo", "--steps", "0", "--out", str(tmp_path / "o")]) == 2
    assert "depthbench demo: error: --steps 0 is not allowed" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # `depthbench demo` has no sweep flags at all
        cli_main(["demo", "--grid", "tiny", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_demo_command_end_to_end_on_a_small_corpus(small_corpus, tmp_path, capsys):
    import shutil

    out = tmp_path / "demo"
    shutil.copytree(small_corpus, out / "data")  # reused instead of building the full corpus
    assert cli_main(["sweep", "--preset", "demo", "--out", str(out), "--steps", "1", "--eval-limit", "2",
                     *NARROW]) == 0
    printed = capsys.readouterr().out
    table = [line for line in printed.splitlines() if re.match(r"(pre_ln|hc|attnres)\s+tiny-L\d+\s", line)]
    assert len(table) == 9
    header = next(line for line in printed.splitlines() if line.startswith("arch"))
    assert header.split()[-3:] == ["synthetic", "text", "mean"]
    assert "loss change, shallowest -> deepest shape" in printed and "demo finished in" in printed
    for name in ("report.md", "results.csv", "results.jsonl", "loss_vs_aspect_ratio.png"):
        assert str(out / name) in printed and (out / name).stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "9 of 9 runs finished" in report and "synthetic depth tasks (`eval_synthetic`)" in report
    assert "held-out text (`eval_text`)" in report and demo.DEMO_NOTES in report
    # it ends with accuracy by depth on the offline synthetic lm-eval tasks, in the report and on the terminal
    assert "## Downstream evaluation (`depthbench eval`)" in report
    assert "**depthbench_synthetic** `acc` (higher is better)" in report and "| arch | L2 | L4 | L8 |" in report
    assert (out / "synthetic_acc_vs_aspect_ratio.png").stat().st_size > 0
    assert "accuracy on depthbench_synthetic" in printed
    for run in out.glob("runs/*/eval/results.json"):
        assert json.loads(run.read_text())["n-samples"]["depthbench_synthetic_mc_pointer"]["effective"] == 2
    assert len(list(out.glob("runs/*/eval/results.json"))) == 9
    # layer analyses of each architecture's deepest model, in the report and kept by a report rebuild
    for arch in demo.DEMO_ARCHS:
        for metric in demo.DEMO_ANALYSIS_METRICS:
            assert (out / "analysis" / f"{arch}__tiny-L8__lr0.003__s0" / f"{metric}.json").is_file()
    assert "## Layer analyses" in report and "causal.late_fraction_above" in report
    assert "analysis_logit_lens.png" in report and (out / "analysis_logit_lens.png").stat().st_size > 0
    assert cli_main(["report", str(out)]) == 0
    assert (out / "report.md").read_text().count("## Layer analyses") == 1
    # running the same command again trains nothing
    before = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/summary.json")}
    evaluated = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/eval/results.json")}
    assert cli_main(["sweep", "--preset", "demo", "--out", str(out), "--steps", "1", "--eval-limit", "2",
                     *NARROW]) == 0
    assert printed.count("training") == 9 and capsys.readouterr().out.count("finished earlier, skipped") == 9
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/summary.json")} == before
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/eval/results.json")} == evaluated  # not re-evaluated
    # a different recipe in the same folder is refused
    assert cli_main(["sweep", "--preset", "demo", "--out", str(out), "--steps", "2", *NARROW]) == 2
    assert "different sweep definition" in capsys.readouterr().err


@pytest.mark.slow
def test_real_demo_smoke_run(tmp_path, capsys):
    """The real command (full corpus, real tiny-grid shapes) with 2 steps per run: ~2-4 minutes on 2 cores."""
    out = tmp_path / "demo"
    assert cli_main(["sweep", "--preset", "demo", "--out", str(out), "--steps", "2"]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 9 and {r["status"] for r in rows} == {"finished"}
    assert {r["num_layers"] for r in rows} == set(demo.DEMO_DEPTHS)
    assert all(1.9e6 < r["params_total"] < 2.2e6 for r in rows)
    assert all(r["eval_synthetic"] != r["eval_text"] for r in rows)
    assert "demo finished in" in capsys.readouterr().out
