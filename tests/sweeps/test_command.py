"""Tests of the sweep family's commands (``depthbench.sweeps.command``): ``depthbench sweep``'s bad inputs exit 2
with a message and write nothing, its arguments become the sweep's definition (the grid's depths then named shapes,
the base file without its run-only keys, the data folder made absolute), ``--emit slurm`` from the command line,
and ``depthbench report`` rebuilding a sweep folder's files.

Run: ``python -m pytest tests/sweeps/test_command.py -q``
"""

from __future__ import annotations

import json

import pytest

from depthbench.cli import main as cli_main
from tests.sweeps.tiny_sweep import copy_sweep


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--archs", "pre_ln,nope", "--grid", "tiny"], "unknown architecture 'nope'"),
        (["--archs", "pre_ln", "--grid", "nope"], "grid='nope' is not allowed"),
        (["--archs", "pre_ln", "--grid", "tiny", "--depths", "3"], "depth=3 is not allowed"),
        (["--archs", "pre_ln", "--grid", "tiny", "--depths", ","], "--depths ',' is empty"),
        (["--archs", "pre_ln", "--grid", "tiny", "--lrs", "abc"], "--lrs 'abc' is not allowed"),
        (["--archs", "pre_ln", "--grid", "tiny", "--lrs", "1e-3,0"], "learning rate 0.0 is not allowed"),
        (["--archs", "pre_ln", "--grid", "tiny", "--lrs=-2e-3"], "learning rate -0.002 is not allowed"),
        (["--archs", "pre_ln", "--grid", "tiny", "--lrs", ""], "no learning rate given"),
        (["--archs", "pre_ln"], "give --archs and --grid/--shapes/--budget"),
        (["--archs", "pre_ln", "--budget", "2m"], "--depths is required with --budget"),
        (["--archs", "pre_ln", "--grid", "tiny", "--budget", "2m", "--depths", "2"], "either --grid or --budget"),
        (["--archs", "pre_ln", "--grid", "tiny", "--seeds", "x"], "--seeds 'x' is not allowed"),
    ],
)
def test_cli_bad_inputs_exit_2_with_a_message_and_write_nothing(argv, match, data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli_main(["sweep", *argv, "--data", str(data_dir), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("depthbench sweep: error:")
    assert __import__("re").search(match, err), err
    assert not out.exists()


def test_cli_emit_slurm(data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli_main(["sweep", "--archs", "pre_ln,hc,attnres", "--grid", "tiny", "--depths", "2,4,8",
                     "--lrs", "1e-3,2e-3", "--data", str(data_dir), "--out", str(out), "--emit", "slurm"])
    assert code == 0 and "18 array tasks" in capsys.readouterr().out
    assert "#SBATCH --array=1-18\n" in (out / "sweep.slurm").read_text()
    assert len((out / "runs.txt").read_text().splitlines()) == 18 and not (out / "runs").exists()


def test_report_command_rebuilds_the_files(sweep_dir, tmp_path, capsys):
    out = copy_sweep(sweep_dir, tmp_path / "copy")
    expected = (out / "results.csv").read_text().replace(str(sweep_dir), str(out))
    for name in ("results.csv", "results.jsonl", "report.md", "loss_vs_aspect_ratio.png"):
        (out / name).unlink()
    assert cli_main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("results.csv", "results.jsonl", "report.md", "loss_vs_aspect_ratio.png"):
        assert (out / name).exists() and str(out / name) in printed
    assert (out / "results.csv").read_text() == expected
    assert "synthetic" in printed and "text" in printed and "mean" in printed
    assert "loss change, shallowest -> deepest shape" in printed
    assert cli_main(["report", str(tmp_path / "nothing")]) == 2
    (tmp_path / "empty").mkdir()
    assert cli_main(["report", str(tmp_path / "empty")]) == 2
    assert "nothing to report" in capsys.readouterr().err


def test_the_spec_takes_the_grid_s_depths_then_named_shapes_and_drops_the_run_only_keys(data_dir, tmp_path,
                                                                                        monkeypatch):
    from depthbench.cli import build_parser
    from depthbench.sweeps.command import spec_from_args

    config = tmp_path / "base.json"
    config.write_text(json.dumps({"output_dir": "elsewhere", "resume": "never", "train": {"max_steps": 3}}))
    monkeypatch.chdir(data_dir.parent)
    args = build_parser("sweep").parse_args([
        "sweep", "--archs", "pre_ln", "--grid", "tiny", "--depths", "2,4", "--shapes", "micro-L5,", "--config",
        str(config), "--data", data_dir.name, "--lrs", "1e-3,2e-3,", "--seeds", "0,1", "--set", "train.log_every=1",
        "--out", str(tmp_path / "my-sweep")])
    spec = spec_from_args(args)
    assert spec.shapes == ["tiny-L2", "tiny-L4", "micro-L5"]
    assert (spec.lrs, spec.seeds, spec.overrides, spec.name) == ([1e-3, 2e-3], [0, 1], ["train.log_every=1"],
                                                                 "my-sweep")
    assert spec.base == {"train": {"max_steps": 3}, "data": {"data_dir": str(data_dir.resolve())}}
