"""Tests of the embedded demo (``depthbench demo``, ``depthbench.sweeps.demo``): the spec is what the
docs say (pre_ln, hc, attnres at three depths of one fixed budget, three seeds each, one recipe whose steps follow
the tokens-per-parameter rule), its corpus has separate synthetic and text eval splits, the compute stays inside the
measured time budget, bad flags are refused, and the whole command runs end to end (on a small corpus with narrowed
models, fewer depths and seeds, two workers; the real-size run is the ``slow`` test).

Run: ``python -m pytest tests/sweeps/test_demo.py -q`` (add ``--runslow`` for the real-size smoke run).
"""

from __future__ import annotations

import json
import math
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


def params(arch: str, shape: str) -> int:
    """Total parameters of the architecture's own config at a grid shape (not the shape table's count)."""
    return build_config(arch, **get_shape(shape).config_fields()).parameter_counts()["total"]


def test_demo_spec_is_what_the_docs_say(tmp_path):
    spec = demo.demo_spec(str(tmp_path / "data"))
    assert spec.archs == ["pre_ln", "hc", "attnres"]
    assert len(spec.shapes) >= 3 and {get_shape(s).grid for s in spec.shapes} == {demo.DEMO_GRID}
    depths = [get_shape(s).num_layers for s in spec.shapes]
    assert depths == sorted(depths) == demo.DEMO_DEPTHS and set(depths) <= set(get_grid(demo.DEMO_GRID).depths)
    assert len(spec.lrs) == 1 and len(spec.seeds) >= 3 and len(spec.runs()) == 3 * len(spec.shapes) * len(spec.seeds)
    budget = get_grid(demo.DEMO_GRID).budget
    for arch in spec.archs:  # one fixed budget: every model within the grid's 3.5 % plus its own extras
        for shape in spec.shapes:
            assert abs(params(arch, shape) / budget - 1) < 0.065, (arch, shape)
    cfg = spec.run_config(spec.runs()[0], str(tmp_path / "run"))
    assert cfg.data.eval_splits == "auto" and cfg.data.eval_sequences > 0  # every eval split, each on its own
    assert cfg.train.max_steps == demo.DEMO_STEPS and cfg.data.data_dir == str((tmp_path / "data").resolve())
    assert cfg.train.cpu and cfg.train.mixed_precision == "no"
    # the docstring documents the recipe actually used
    doc = " ".join(demo.__doc__.split())
    b, t = demo.DEMO_BASE["train"]["global_batch_size"], demo.DEMO_BASE["data"]["seq_len"]
    assert f"{demo.DEMO_STEPS} AdamW steps of {b} sequences x {t} tokens" in doc
    assert f"({demo.DEMO_STEPS * b * t:,} tokens per run" in doc
    assert f"peak LR {demo.DEMO_LR:g}" in doc and f"budget of {budget:,}" not in doc
    assert f"first {demo.DEMO_BASE['data']['eval_sequences']} windows" in doc
    assert f"a fixed total of {budget:,} parameters" in doc
    for arch in spec.archs:
        assert f"``{arch}``" in doc
    for depth in depths:
        assert f"L{depth} (d={get_shape(f'{demo.DEMO_GRID}-L{depth}').hidden_size}" in doc
    assert demo.DEMO_NOTES in spec.notes and spec.fingerprint() == demo.demo_spec(str(tmp_path / "data")).fingerprint()


def test_every_model_sees_five_tokens_per_parameter_and_no_more_steps_than_the_rule_needs():
    """The rule: the same tokens for every run, DEMO_TOKENS_PER_PARAMETER x the largest model (counted here by
    each architecture's own config); the steps are the fewest that reach it."""
    spec = demo.demo_spec("unused")
    per_step = demo.DEMO_BASE["train"]["global_batch_size"] * demo.DEMO_BASE["data"]["seq_len"]
    biggest = max(spec.runs(), key=lambda p: params(p.arch, p.shape))
    largest = params(biggest.arch, biggest.shape)
    assert demo.DEMO_TOKENS_PER_PARAMETER >= 5
    for point in spec.runs():
        assert demo.DEMO_STEPS * per_step >= 5 * params(point.arch, point.shape), point
    assert (demo.DEMO_STEPS - 1) * per_step < demo.DEMO_TOKENS_PER_PARAMETER * largest
    doc = " ".join(demo.__doc__.split())
    assert f"({biggest.arch} at L{get_shape(biggest.shape).num_layers}, {largest:,} parameters)" in doc
    n = largest * demo.DEMO_TOKENS_PER_PARAMETER
    assert f"ceil({demo.DEMO_TOKENS_PER_PARAMETER} x {largest:,} / ({demo.DEMO_BASE['train']['global_batch_size']} x "\
        f"{demo.DEMO_BASE['data']['seq_len']})) = {math.ceil(n / per_step)}" in doc


def test_the_demo_run_file_is_one_run_of_the_demo():
    from depthbench.config import load_run_config
    from tests.helpers import REPO_ROOT

    cfg = load_run_config(REPO_ROOT / "src" / "depthbench" / "configs" / "demo.yaml")
    assert get_shape(cfg.model.shape).grid == demo.DEMO_GRID and cfg.optim.lr == demo.DEMO_LR
    assert cfg.train.max_steps == demo.DEMO_STEPS and cfg.data.seq_len == demo.DEMO_BASE["data"]["seq_len"]
    assert cfg.train.global_batch_size == demo.DEMO_BASE["train"]["global_batch_size"]
    assert cfg.data.eval_sequences == demo.DEMO_BASE["data"]["eval_sequences"]
    for key, value in demo.DEMO_BASE["optim"].items():
        assert getattr(cfg.optim, key) == value, key


def test_demo_compute_stays_inside_the_measured_time_budget():
    """A tripwire, not a clock: the recipe was sized on the project's 2-core CPU box from measured per-run CPU
    times (docs/sweeps.md, "Time budget"); at these widths the time follows the per-layer element-wise work more
    than the FLOPs, so it is bounded here by sum over runs of L x d x tokens. Raising steps, batch, depths or widths
    beyond this needs a new measurement, not just a new number."""
    spec = demo.demo_spec("unused")
    tokens = demo.DEMO_STEPS * demo.DEMO_BASE["train"]["global_batch_size"] * demo.DEMO_BASE["data"]["seq_len"]
    work = sum(get_shape(p.shape).num_layers * get_shape(p.shape).hidden_size * tokens for p in spec.runs())
    assert 1.3e9 < work < 1.7e9, f"{work / 1e9:.2f}e9"


def test_demo_corpus_reports_synthetic_and_text_separately(small_corpus):
    meta = json.loads((small_corpus / "meta.json").read_text())
    assert {"train", "eval_synthetic", "eval_text"} <= set(meta["splits"])
    logs: list[str] = []
    demo.ensure_demo_data(str(small_corpus), log=logs.append)
    assert logs and "reusing" in logs[0] and "eval_synthetic" in logs[0]
    # a corpus of an earlier demo with a larger vocabulary than the models is refused, not used
    with pytest.raises(SweepError, match="300-token vocabulary, larger than the demo models' 200"):
        demo.ensure_demo_data(str(small_corpus), log=logs.append, max_vocab=200)


def test_demo_refuses_bad_flags_before_anything_is_built(tmp_path, capsys):
    assert cli_main(["demo", "--steps", "0", "--out", str(tmp_path / "o")]) == 2
    assert "depthbench demo: error: --steps 0 is not allowed" in capsys.readouterr().err
    assert cli_main(["demo", "--set", "train.nope=1", "--out", str(tmp_path / "o")]) == 2
    assert "unknown config key 'train.nope'" in capsys.readouterr().err
    assert cli_main(["demo", "--workers", "0", "--out", str(tmp_path / "o")]) == 2
    assert "--workers 0 is not allowed" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # `depthbench demo` has no sweep flags at all
        cli_main(["demo", "--grid", "tiny", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()  # refused before the corpus is built


def test_the_sweep_command_has_no_demo_preset(tmp_path, capsys):
    """``depthbench demo`` is the demo's one name: ``sweep --preset demo`` is an unknown flag of ``sweep``."""
    with pytest.raises(SystemExit) as info:
        cli_main(["sweep", "--preset", "demo", "--out", str(tmp_path / "o")])
    assert info.value.code == 2 and "unrecognized arguments: --preset demo" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_demo_command_end_to_end_on_a_small_corpus(small_corpus, tmp_path, capsys, monkeypatch):
    """The whole command at a small size: two of the depths, two seeds, narrowed models, one step, two workers."""
    import shutil

    monkeypatch.setattr(demo, "DEMO_DEPTHS", [2, 8])
    monkeypatch.setattr(demo, "DEMO_SEEDS", [0, 1])
    out = tmp_path / "demo"
    shutil.copytree(small_corpus, out / "data")  # reused instead of building the full corpus
    argv = ["demo", "--out", str(out), "--steps", "1", "--eval-limit", "2", "--workers", "2", *NARROW]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    assert "12 runs in 2 worker processes" in printed
    table = [line for line in printed.splitlines() if re.match(r"(pre_ln|hc|attnres)\s+micro-L\d+\s", line)]
    assert len(table) == 6
    header = next(line for line in printed.splitlines() if line.startswith("arch"))
    assert header.split()[-3:] == ["synthetic", "text", "mean"]
    assert "loss change, shallowest -> deepest shape" in printed and "demo finished in" in printed
    for name in ("report.html", "report.md", "results.csv", "results.jsonl", "loss_vs_aspect_ratio.png"):
        assert str(out / name) in printed and (out / name).stat().st_size > 0
    assert all((run / "console.log").stat().st_size > 0 for run in out.glob("runs/*__s*"))
    report = (out / "report.md").read_text()
    assert "12 of 12 runs finished" in report and "synthetic depth tasks (`eval_synthetic`)" in report
    assert "held-out text (`eval_text`)" in report and demo.DEMO_NOTES in report
    assert "tokens_per_param" in report and "**The rule.**" in report
    # the study beside the demo, and no fixed tokens per parameter (one step: far below the recipe's 5)
    assert "## Beside the study" in report and "**What this sweep cannot show.**" in report
    assert all(float(t) < 1 for t in re.findall(r"([\d.]+) tokens per parameter", report))
    from depthbench.sweeps.report import VERDICTS

    row = re.compile(r"\| \w+ \| .* \| L2, [\d.]+ \| L8, ")
    changes = [line.split(" | ") for line in report.splitlines() if row.match(line)]
    assert len(changes) == 3 * 3 and all(c[-1].rstrip(" |") in VERDICTS.values() for c in changes)  # a verdict each
    # it ends with accuracy by depth on the offline synthetic lm-eval tasks, in the report and on the terminal
    assert "## Downstream evaluation (`depthbench eval`)" in report
    assert "**depthbench_synthetic** `acc` (higher is better)" in report and "| arch | L2 | L8 |" in report
    assert (out / "synthetic_acc_vs_aspect_ratio.png").stat().st_size > 0
    assert "accuracy on depthbench_synthetic" in printed
    for run in out.glob("runs/*/eval/results.json"):
        assert json.loads(run.read_text())["n-samples"]["depthbench_synthetic_mc_pointer"]["effective"] == 2
    assert len(list(out.glob("runs/*/eval/results.json"))) == 12
    # layer analyses of each architecture's deepest model (seed 0), in the report and kept by a report rebuild
    for arch in demo.DEMO_ARCHS:
        for metric in demo.DEMO_ANALYSIS_METRICS:
            assert (out / "analysis" / f"{arch}__micro-L8__lr0.003__s0" / f"{metric}.json").is_file()
    assert len(list((out / "analysis").glob("*__s*"))) == 3
    assert "## Layer analyses" in report and "causal.late_fraction_above" in report
    assert "analysis_logit_lens.png" in report and (out / "analysis_logit_lens.png").stat().st_size > 0
    # the page holds every figure and table of report.md (tests/test_report_page.py checks the renderer itself)
    page = (out / "report.html").read_text()
    figures = re.findall(r"^!\[[^\]]*\]\(([^)]+)\)$", report, flags=re.M)
    assert len(figures) >= 4 and page.count('<img src="data:image/png;base64,') == len(figures)
    assert page.count('<table class="sortable">') == len(re.findall(r"^\|(---|:?-{3,}:?\|)", report, flags=re.M))
    assert cli_main(["report", str(out)]) == 0
    assert (out / "report.md").read_text().count("## Layer analyses") == 1
    assert (out / "report.html").read_text().count("Layer analyses (<code>depthbench analyze</code>)</h2>") == 1
    # running the same command again trains nothing
    before = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/summary.json")}
    evaluated = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/eval/results.json")}
    assert cli_main(argv) == 0
    assert printed.count(": training") == 12 and capsys.readouterr().out.count("finished earlier, skipped") == 12
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/summary.json")} == before
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/eval/results.json")} == evaluated  # not re-evaluated
    # a different recipe in the same folder is refused, before anything is built or trained
    assert cli_main(["demo", "--out", str(out), "--steps", "2", *NARROW]) == 2
    assert "different sweep definition" in capsys.readouterr().err


def test_a_stopped_demo_ends_without_analyses_or_evaluation(small_corpus, tmp_path, capsys, monkeypatch):
    """A stop signal during the runs (the sweep returns with runs unfinished): the demo says how to continue and
    neither analyses nor evaluates the runs it has."""
    import shutil

    out = tmp_path / "demo"
    shutil.copytree(small_corpus, out / "data")
    from depthbench.sweeps import runner

    # the demo imports the runner when it runs (its module stays light for `depthbench demo --help`)
    monkeypatch.setattr(runner, "run_sweep", lambda spec, out, **kw: [{"status": "finished"}, {"status": "stopped"}])
    monkeypatch.setattr(demo, "analyze_demo", lambda *a, **k: pytest.fail("analysed a stopped demo"))
    monkeypatch.setattr(demo, "evaluate_demo", lambda *a, **k: pytest.fail("evaluated a stopped demo"))
    assert cli_main(["demo", "--out", str(out), "--steps", "1", *NARROW]) == 0
    assert "demo stopped before every run finished" in capsys.readouterr().out


@pytest.mark.slow
def test_real_demo_smoke_run(tmp_path, capsys):
    """The real command (full corpus, real micro-grid shapes, 27 runs in workers) with 2 steps per run: ~1-2
    minutes on 2 cores."""
    out = tmp_path / "demo"
    assert cli_main(["demo", "--out", str(out), "--steps", "2"]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 27 and {r["status"] for r in rows} == {"finished"}
    assert {r["num_layers"] for r in rows} == set(demo.DEMO_DEPTHS) and {r["seed"] for r in rows} == {0, 1, 2}
    budget = get_grid(demo.DEMO_GRID).budget
    assert all(abs(r["params_total"] / budget - 1) < 0.065 for r in rows)
    assert all(r["eval_synthetic"] != r["eval_text"] for r in rows)
    assert "demo finished in" in capsys.readouterr().out and (out / "report.html").stat().st_size > 100_000
