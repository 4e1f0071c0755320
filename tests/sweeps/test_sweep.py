"""Tests of ``depthbench sweep`` (``depthbench.sweeps.runner``) end to end: the tiny real sweep of
``tests/sweeps/tiny_sweep.py`` (2 archs x 2 shapes x 2 learning rates, a few steps on a tiny prepared corpus), its
result files and shared pages, skipping finished runs, resuming an interrupted sweep, divergence, refusing another
sweep's folder, bad run overrides and ``--budget`` shapes. The report's words are ``test_report.py``'s, the command
line's ``test_command.py``'s and the job array's ``test_slurm.py``'s.

Run: ``python -m pytest tests/sweeps/test_sweep.py -q``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from depthbench.cli import main as cli_main
from depthbench.sweeps import command as sweep_command
from depthbench.sweeps.results import collect_results
from depthbench.sweeps.runner import run_sweep
from depthbench.sweeps.slurm import emit_slurm
from depthbench.sweeps.spec import SweepError, SweepSpec
from tests.sweeps.tiny_sweep import ARCHS, LRS, SHAPES, SMALL_FIELDS, copy_sweep, make_spec, read_csv

REQUIRED_COLUMNS = ["arch", "shape", "num_layers", "hidden_size", "aspect_ratio", "params_total", "lr", "seed",
                    "tokens", "tokens_per_param", "steps", "final_train_loss", "eval_loss", "eval_synthetic",
                    "eval_text", "best_lr", "at_best_lr", "wall_time_s", "tokens_per_s", "status"]


def summary_mtimes(out: Path) -> dict[str, int]:
    return {p.parent.name: p.stat().st_mtime_ns for p in sorted(out.glob("runs/*/summary.json"))}


# ================================================================================================ results
def test_result_files_one_row_per_run_with_the_right_columns(sweep_dir, data_dir):
    rows = read_csv(sweep_dir / "results.csv")
    assert len(rows) == 8
    assert set(REQUIRED_COLUMNS) <= set(rows[0]), set(REQUIRED_COLUMNS) - set(rows[0])
    jsonl = [json.loads(line) for line in (sweep_dir / "results.jsonl").read_text().splitlines()]
    assert len(jsonl) == 8
    points = {(r["arch"], r["shape"], r["lr"], r["seed"]) for r in jsonl}
    assert points == {(a, s, lr, 0) for a in ARCHS for s in SHAPES for lr in LRS}
    for r in jsonl:
        # the real model's shape (width overridden to 32), not the grid's nominal one
        assert r["hidden_size"] == 32 and r["num_layers"] == int(r["shape"].split("-L")[1])
        assert r["aspect_ratio"] == pytest.approx(32 / r["num_layers"])
        assert r["tokens"] == 3 * 4 * 32 and r["steps"] == 3 and r["status"] == "finished"
        assert r["tokens_per_param"] == round(r["tokens"] / r["params_total"], 2)
        assert r["wall_time_s"] > 0 and r["tokens_per_s"] > 0
        for split in ("eval_synthetic", "eval_text"):
            assert math.isfinite(r[split]) and r[split] > 0
        assert r["eval_loss"] == pytest.approx((r["eval_synthetic"] + r["eval_text"]) / 2)
        assert r["eval_synthetic"] != r["eval_text"]  # reported separately, not one number twice
        # parameter count = the architecture's exact count at the real config (hc adds its connectors)
        cfg = json.loads((sweep_dir / r["run_dir"]).joinpath("run_config.json").read_text())["resolved"]
        assert r["params_total"] == cfg["num_parameters"]
    hc = {r["params_total"] for r in jsonl if r["arch"] == "hc"}
    pre = {r["params_total"] for r in jsonl if r["arch"] == "pre_ln"}
    assert min(hc) > max(pre) or hc.isdisjoint(pre)


def test_best_learning_rate_is_marked_per_arch_and_shape(sweep_dir):
    rows = collect_results(str(sweep_dir))
    for arch in ARCHS:
        for shape in SHAPES:
            group = [r for r in rows if r["arch"] == arch and r["shape"] == shape]
            assert len(group) == 2
            best = min(group, key=lambda r: r["eval_loss"])
            assert {r["best_lr"] for r in group} == {best["lr"]}
            assert [r["at_best_lr"] for r in group].count(True) == 1 and best["at_best_lr"]
    csv_rows = read_csv(sweep_dir / "results.csv")
    assert sum(r["at_best_lr"] == "True" for r in csv_rows) == 4


def test_the_shared_files_hold_no_local_absolute_path(sweep_dir, data_dir):
    """report.md / report.html / results.csv are shared (the sweep's report repository on the Hub): the data folder
    (outside the sweep folder here) by its name, run folders relative to the sweep folder."""
    for name in ("report.md", "report.html", "results.csv", "results.jsonl"):
        text = (sweep_dir / name).read_text()
        assert str(data_dir) not in text and str(sweep_dir) not in text, name
    assert f"- data: `{data_dir.name}` (a prepared folder outside the sweep folder)" in (sweep_dir / "report.md"
                                                                                          ).read_text()
    assert {r["run_dir"] for r in read_csv(sweep_dir / "results.csv")} == {
        f"runs/{p.name}" for p in (sweep_dir / "runs").iterdir()}


def test_report_html_holds_every_figure_and_table_of_report_md(sweep_dir):
    """The page is built from report.md (tests/test_report_page.py checks the renderer): one inlined image per
    figure line, one sortable table per markdown table, the same row count in each."""
    import base64
    import re

    report = (sweep_dir / "report.md").read_text()
    page = (sweep_dir / "report.html").read_text()
    figures = re.findall(r"^!\[[^\]]*\]\(([^)]+)\)$", report, flags=re.M)
    inlined = re.findall(r'<img src="data:image/png;base64,([^"]+)"', page)
    assert figures and len(inlined) == len(figures)
    assert [base64.b64decode(data) for data in inlined] == [(sweep_dir / name).read_bytes() for name in figures]
    blocks = re.findall(r"((?:^\|.*\|$\n?)+)", report, flags=re.M)
    tables = [b.strip().splitlines() for b in blocks if re.match(r"^\|(\s*:?-{3,}:?\s*\|)+$", b.splitlines()[1])]
    html_tables = re.findall(r'<table class="sortable">(.*?)</table>', page, flags=re.S)
    assert len(html_tables) == len(tables) >= 3
    assert [t.count("<tr>") for t in html_tables] == [len(t) - 1 for t in tables]  # header + body rows


# ================================================================================================ skip / resume
def test_rerun_skips_finished_runs_without_training(sweep_dir, monkeypatch):
    before = summary_mtimes(sweep_dir)
    assert len(before) == 8

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr("depthbench.training.trainer.train", no_training)
    logs: list[str] = []
    rows = run_sweep(make_spec(Path(json.loads((sweep_dir / "sweep.json").read_text())["spec"]["base"]["data"]
                                    ["data_dir"])), str(sweep_dir), log=logs.append)
    assert len(rows) == 8
    assert sum("finished earlier, skipped" in line for line in logs) == 8
    assert summary_mtimes(sweep_dir) == before


def test_interrupted_sweep_resumes_where_it_stopped(data_dir, tmp_path, monkeypatch):
    from depthbench.training import signals

    spec = make_spec(data_dir, archs=["pre_ln"], lrs=[2e-3], steps=4)
    out = tmp_path / "out"
    calls = {"n": 0}

    def stop_after_two_steps(self):  # what SIGTERM/SIGINT does: checkpoint after the current step, then stop
        calls["n"] += 1
        return calls["n"] == 2

    monkeypatch.setattr(signals.StopFlag, "requested", stop_after_two_steps)
    logs: list[str] = []
    run_sweep(spec, str(out), log=logs.append)
    first = out / "runs" / "pre_ln__tiny-L2__lr0.002__s0"
    assert json.loads((first / "summary.json").read_text())["status"] == "stopped"
    assert json.loads((first / "summary.json").read_text())["steps"] == 2
    assert not (out / "runs" / "pre_ln__tiny-L4__lr0.002__s0").exists()  # the sweep stopped with the run
    assert any("sweep stopped" in line for line in logs)
    assert "1 of 2 runs" not in (out / "report.md").read_text() and "0 of 2 runs finished" in (
        out / "report.md").read_text()

    monkeypatch.undo()
    logs.clear()
    rows = run_sweep(spec, str(out), log=logs.append)
    assert any("pre_ln__tiny-L2__lr0.002__s0: resuming" in line for line in logs)
    assert [r["status"] for r in rows] == ["finished", "finished"]
    steps = [json.loads(line)["step"] for line in (first / "metrics.jsonl").read_text().splitlines()
             if "train/loss" in line]
    assert steps == [1, 2, 3, 4]  # continued from the step-2 checkpoint, not retrained from scratch
    assert json.loads((first / "summary.json").read_text())["steps"] == 4


def test_deleted_summary_is_resumed_and_others_untouched(sweep_dir, tmp_path):
    out = copy_sweep(sweep_dir, tmp_path / "copy")
    victim = out / "runs" / "hc__tiny-L4__lr0.001__s0"
    (victim / "summary.json").unlink()
    before = summary_mtimes(out)
    spec = make_spec(Path(json.loads((out / "sweep.json").read_text())["spec"]["base"]["data"]["data_dir"]))
    logs: list[str] = []
    rows = run_sweep(spec, str(out), log=logs.append)
    assert len(rows) == 8 and all(r["status"] == "finished" for r in rows)
    assert sum("skipped" in line for line in logs) == 7
    assert {k: v for k, v in summary_mtimes(out).items() if k != victim.name} == before


def test_diverged_run_is_recorded_and_the_sweep_goes_on(data_dir, tmp_path, monkeypatch):
    import torch

    from depthbench.training import run as run_mod

    real = run_mod.forward_loss
    monkeypatch.setattr(run_mod, "forward_loss", lambda model, ids: real(model, ids) * torch.nan)
    spec = make_spec(data_dir, archs=["pre_ln"], shapes=["tiny-L2"], lrs=[1.0])
    out = tmp_path / "out"
    rows = run_sweep(spec, str(out), log=lambda *_: None)
    assert [r["status"] for r in rows] == ["diverged"] and rows[0]["at_best_lr"] is False
    monkeypatch.undo()
    logs: list[str] = []
    run_sweep(spec, str(out), log=logs.append)
    assert any("diverged earlier, skipped" in line for line in logs)


# ================================================================================================ bad input
def test_a_different_definition_in_the_same_folder_is_refused(sweep_dir, data_dir):
    files = {p: p.read_bytes() for p in sweep_dir.glob("*") if p.is_file()}
    mtimes = summary_mtimes(sweep_dir)
    for other in (make_spec(data_dir, lrs=[1e-3]), make_spec(data_dir, steps=5),
                  make_spec(data_dir, overrides=SMALL_FIELDS[:-1])):
        with pytest.raises(SweepError, match="different sweep definition.*nothing was overwritten"):
            run_sweep(other, str(sweep_dir))
        with pytest.raises(SweepError, match="different sweep definition"):
            emit_slurm(other, str(sweep_dir))
    assert {p: p.read_bytes() for p in sweep_dir.glob("*") if p.is_file()} == files
    assert summary_mtimes(sweep_dir) == mtimes
    assert not (sweep_dir / "sweep.slurm").exists()


def test_a_runs_folder_without_sweep_json_is_refused(data_dir, tmp_path):
    (tmp_path / "out" / "runs" / "something").mkdir(parents=True)
    with pytest.raises(SweepError, match="no sweep.json"):
        run_sweep(make_spec(data_dir), str(tmp_path / "out"))
    assert not (tmp_path / "out" / "sweep.json").exists()


LAUNCHER = """
import sys, time
from depthbench import lease
held = lease.acquire(sys.argv[1], what="depthbench sweep launcher")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
held.release()
"""


def _launcher(out: Path, seconds: float) -> subprocess.Popen:
    import sys

    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(out), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_launcher_of_a_sweep_folder_is_refused_or_waits(data_dir, tmp_path, capsys):
    import socket

    out = tmp_path / "out"
    first = _launcher(out, 120)
    try:
        argv = ["sweep", "--archs", "pre_ln", "--shapes", "tiny-L2", "--lrs", "1e-3", "--data", str(data_dir),
                "--out", str(out)]
        assert cli_main(argv) == 2
        err = capsys.readouterr().err
        assert f"depthbench sweep launcher pid {first.pid} on {socket.gethostname()} since" in err
        assert "--wait-for-writer" in err and "Traceback" not in err
        assert sorted(os.listdir(out)) == ["writer.lease"]  # nothing written
    finally:
        first.kill()
        first.wait()
    first = _launcher(out, 1.5)  # a launcher that finishes soon: the second one waits for it, then runs
    logs: list[str] = []
    spec = make_spec(data_dir, archs=["pre_ln"], shapes=["tiny-L2"], lrs=[1e-3])
    rows = run_sweep(spec, str(out), wait_for_writer=60, log=logs.append)
    first.wait()
    assert [r["status"] for r in rows] == ["finished"]
    assert any(f"pid {first.pid}" in line and "waiting up to 60 s" in line for line in logs)
    assert not (out / "writer.lease").exists()


def test_bad_run_overrides_and_missing_data_write_nothing(data_dir, tmp_path):
    with pytest.raises(SweepError, match="invalid run config for pre_ln__tiny-L2.*unknown config key 'train.nope'"):
        run_sweep(make_spec(data_dir, overrides=[*SMALL_FIELDS, "train.nope=1"]), str(tmp_path / "a"))
    with pytest.raises(SweepError, match="is not a prepared data folder"):
        run_sweep(make_spec(tmp_path / "missing"), str(tmp_path / "b"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# ================================================================================================ budget shapes
def test_budget_and_depths_give_design_rule_shapes_as_model_fields(data_dir, tmp_path):
    from depthbench.shapes import shape_for_budget

    args = argparse.Namespace(archs="pre_ln,hc", grid=None, depths="2,4", shapes=None, budget="2m", heads=4,
                              vocab_size=1024, count="total", config=None, data=str(data_dir), lrs="1e-3",
                              seeds="0", set=None, name=None, out=str(tmp_path / "o"))
    spec = sweep_command.spec_from_args(args)
    assert spec.shapes == ["budget2m-L2", "budget2m-L4"]
    for depth, name in ((2, "budget2m-L2"), (4, "budget2m-L4")):
        expected = shape_for_budget(2_000_000, depth, vocab_size=1024, heads=4)
        assert spec.custom_shapes[name] == expected.config_fields()
        point = next(p for p in spec.runs() if p.shape == name and p.arch == "hc")
        cfg = spec.run_config(point, str(tmp_path / "run"))
        assert cfg.model.shape is None and cfg.model.arch == "hc"
        assert cfg.model.fields == expected.config_fields()
    # a budget sweep trains: the row reports the real L and d of the budget shape
    spec = SweepSpec(archs=["pre_ln"], shapes=["budget2m-L2"], lrs=[1e-3], base=make_spec(data_dir).base,
                     overrides=["model.fields.vocab_size=300"], custom_shapes={"budget2m-L2": {
                         **spec.custom_shapes["budget2m-L2"], "hidden_size": 32, "intermediate_size": 64,
                         "head_dim": 8}})
    rows = run_sweep(spec, str(tmp_path / "out"), log=lambda *_: None)
    assert [(r["shape"], r["num_layers"], r["hidden_size"], r["status"]) for r in rows] == [
        ("budget2m-L2", 2, 32, "finished")]


# ================================================================================================ slurm


# ================================================================================================ report


