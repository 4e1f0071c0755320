"""Tests of ``depthbench released`` (``depthbench.sweeps.released.command``), end to end against the loopback Hub:
``depthbench report``, ``eval`` and ``analyze`` work on a measured folder, bad command lines are clear errors, and
the selection's cost is printed and ``--yes`` asked for above the threshold.

Run: ``python -m pytest tests/sweeps/released/test_command.py -q``
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from depthbench.cli import main
from tests.sweeps.released.releases import ORG, SEQ_LEN

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")



def test_report_eval_and_analyze_work_on_the_folder(world, measured, tmp_path):
    out = Path(shutil.copytree(measured[0], tmp_path / "out", symlinks=True))  # the other files read the original
    cache_card = Path(os.readlink(out / "runs" / "pre_ln__tiny-L2__lr0.002__s42" / "final" / "config.json")
                      ).parent / "README.md"
    before = cache_card.read_text()
    assert main(["report", str(out)]) == 0
    assert "## The study's published figures" in (out / "report.md").read_text()
    assert main(["eval", str(out), "--tasks", "depthbench_synthetic_mc_pointer", "--limit", "2", "--batch-size", "4",
                 "--device", "cpu"]) == 0
    for run in ("pre_ln__tiny-L2__lr0.002__s42", "attnres__tiny-L2__lr0.002__s42"):
        results = json.loads((out / "runs" / run / "eval" / "results.json").read_text())
        assert "depthbench_synthetic_mc_pointer" in results["results"] and "depthbench_nll_math" in results["results"]
    assert "depthbench_synthetic_mc_pointer" in (out / "runs" / "pre_ln__tiny-L2__lr0.002__s42" / "final" /
                                                 "README.md").read_text()
    assert cache_card.read_text() == before  # the conversion cache's card is never written
    assert main(["analyze", str(out), "--metrics", "angular", "--num-samples", "2", "--seq-len", "16", "--device",
                 "cpu", "--no-progress"]) == 0  # the held-out folder is the sweep's data by default
    assert sorted(p.name for p in (out / "analysis").iterdir() if p.is_dir()) == sorted(
        p.name for p in (out / "runs").iterdir())


def test_command_line_errors_are_clear(world, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", world["hub"].url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    data, cat = str(world["root"] / "heldout"), str(world["root"] / "catalogue.json")
    base = ["released", "eval", "--catalogue", cat, "--data", data, "--seq-len", str(SEQ_LEN), "--device", "cpu",
            "--cache-dir", str(tmp_path / "conv"), "--no-listing"]
    assert main([*base, "-o", str(tmp_path / "a")]) == 2
    assert "choose the releases" in capsys.readouterr().err
    assert main([*base, "--arch", "hc", "-o", str(tmp_path / "a")]) == 2
    assert "catalogued architectures: pre_ln, attnres" in capsys.readouterr().err
    assert main([*base, "--depth", "2", "--split", "test", "-o", str(tmp_path / "a")]) == 2
    assert "its splits: eval, train" in capsys.readouterr().err
    missing = f"{ORG}/preln-lr2e-3-llama-2M-L8-pretrain"
    assert main([*base, "--repo", missing, "-o", str(tmp_path / "b")]) == 1
    assert f"{missing} is not on the Hub" in capsys.readouterr().err
    assert main([*base, "--arch", "preln", "--depth", "2", "-o", str(tmp_path / "c")]) == 0
    assert "Pre-LN" in capsys.readouterr().out
    assert list((tmp_path / "hub").glob("models--aspect-ratio-scaling--preln-*"))  # HF_HUB_CACHE is honoured
    assert main([*base, "--arch", "preln", "--depth", "2", "--max-tokens", "64", "-o", str(tmp_path / "c")]) == 2
    assert "max_tokens differ" in capsys.readouterr().err


def test_eval_prints_the_cost_and_asks_for_yes_above_the_threshold(world, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", world["hub"].url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    base = ["released", "eval", "--catalogue", str(world["root"] / "catalogue.json"), "--no-listing",
            "--data", str(world["root"] / "heldout"), "--split", "eval", "--seq-len", str(SEQ_LEN), "--device", "cpu",
            "--cache-dir", str(tmp_path / "conv"), "--arch", "preln", "-o", str(tmp_path / "out")]
    assert main([*base, "--confirm-above", "1e-9"]) == 2
    captured = capsys.readouterr()
    assert "2 release(s):" in captured.out and "estimated at 6 bytes per parameter" in captured.out
    assert "PFLOP forward per 10^9 held-out tokens" in captured.out
    assert "pass --yes" in captured.err and not (tmp_path / "out").exists() and not (tmp_path / "hub").exists()
