"""Tests of ``depthbench upcycle-study``'s command line (``depthbench.sweeps.upcycled.command``): the source,
then recipe overrides, and a word that is not an override refused before anything is written; the flags become the
study's definition (the default recipe copied, a recipe file without its output_dir; bad seeds exit 2).

Run: ``python -m pytest tests/sweeps/upcycled/test_command.py -q``
"""

from __future__ import annotations

import json

import pytest

from depthbench.sweeps.spec import SweepError


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


def test_the_command_line_becomes_the_study_s_definition(source, data_dir, tmp_path, monkeypatch, capsys):
    from depthbench.cli import build_parser, main
    from depthbench.sweeps.upcycled import study
    from depthbench.sweeps.upcycled.command import DEFAULT_RECIPE, _cmd_upcycle_study

    seen = []
    monkeypatch.setattr(study, "run_study", lambda defn, out, **kw: seen.append((defn, out, kw)))
    pristine = json.loads(json.dumps(DEFAULT_RECIPE))
    common = ["upcycle-study", str(source), "train.max_steps=3", "--archs", "pre_ln, hc,", "--data", str(data_dir),
              "-o", str(tmp_path / "out")]
    parser = build_parser("upcycle-study")
    assert _cmd_upcycle_study(parser.parse_args([*common, "--seeds", "0,2", "--metrics", "none", "--tasks",
                                                 "a,b"])) == 0
    defn, out, _ = seen[-1]
    assert (defn.source, defn.archs, defn.seeds, defn.metrics, defn.tasks, defn.overrides) == (
        str(source), ["pre_ln", "hc"], [0, 2], [], ["a", "b"], ["train.max_steps=3"])
    assert defn.base == pristine and out == str(tmp_path / "out")
    defn.base["train"]["max_steps"] = 1
    assert DEFAULT_RECIPE == pristine  # each study gets its own copy of the default recipe
    recipe = tmp_path / "run.json"
    recipe.write_text(json.dumps({"output_dir": "elsewhere", "train": {"max_steps": 9}}))
    _cmd_upcycle_study(parser.parse_args([*common, "-c", str(recipe)]))
    assert seen[-1][0].base == {"train": {"max_steps": 9}}  # a run's own folder is the study's to choose
    with pytest.raises(SystemExit) as exit_:
        main([*common, "--seeds", "0,x"])
    assert exit_.value.code == 2
    assert "--seeds '0,x': give integers separated by commas" in capsys.readouterr().err
