"""``depthbench.runs``: run ids, run and sweep folders, the one way to open a checkpoint target, and the assembly
of a sweep's ``report.md`` from its sections."""

from __future__ import annotations

import json

import pytest

from depthbench import runs
from depthbench.runs import RunId


@pytest.mark.parametrize("name, expected", [
    ("pre_ln__tiny-L4__lr0.002__s0", RunId("pre_ln", "tiny-L4", 0.002, 0)),
    ("block_attnres__400m-L16__lr0.0002__s3", RunId("block_attnres", "400m-L16", 2e-4, 3)),
    ("hc__budget20m-L8__lr1e-05__s12", RunId("hc", "budget20m-L8", 1e-5, 12)),
])
def test_run_ids_parse_and_format(name, expected):
    assert RunId.parse(name) == expected
    assert str(expected) == name
    assert RunId.parse(f"/some/sweep/runs/{name}/") == expected  # a path names its folder


@pytest.mark.parametrize("name", ["probe", "pre_ln__tiny-L4", "pre_ln__tiny-L4__lr0.002__sx", "__x__lr1__s0"])
def test_names_that_are_not_run_ids(name):
    assert RunId.parse(name) is None


def _run(root, name, status=None, final=False):
    run_dir = root / "runs" / name
    run_dir.mkdir(parents=True)
    (run_dir / "run_config.json").write_text("{}")
    if status:
        (run_dir / "summary.json").write_text(json.dumps({"status": status}))
    if final:
        (run_dir / "final").mkdir()
        (run_dir / "final" / "config.json").write_text("{}")
    return run_dir


def test_sweep_runs_and_the_finished_rule(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"spec": {"archs": ["pre_ln", "hc"]}}))
    done = _run(tmp_path, "pre_ln__tiny-L2__lr0.002__s0", "finished", final=True)
    _run(tmp_path, "pre_ln__tiny-L4__lr0.002__s0", "finished")  # no final export (deleted): not finished
    _run(tmp_path, "hc__tiny-L2__lr0.002__s0", "diverged")
    _run(tmp_path, "hc__tiny-L4__lr0.002__s0")  # still training
    (tmp_path / "runs" / "notes.txt").write_text("a file, not a run")
    assert runs.is_sweep(str(tmp_path)) and not runs.is_sweep(str(done))
    assert runs.sweep_definition(str(tmp_path)) == {"archs": ["pre_ln", "hc"]}
    every = runs.sweep_runs(str(tmp_path))
    assert [r.name for r in every] == sorted(p.name for p in (tmp_path / "runs").iterdir() if p.is_dir())
    assert [(r.arch, r.shape, r.status) for r in every] == [
        ("hc", "tiny-L2", "diverged"), ("hc", "tiny-L4", None), ("pre_ln", "tiny-L2", "finished"),
        ("pre_ln", "tiny-L4", "finished")]
    finished = runs.sweep_runs(str(tmp_path), finished=True)
    assert [r.run_dir for r in finished] == [str(done)]
    assert finished[0].model_dir == str(done / "final")


def test_model_dir_opens_every_kind_of_target(tmp_path):
    done = _run(tmp_path, "pre_ln__tiny-L2__lr0.002__s0", "finished", final=True)
    running = _run(tmp_path, "pre_ln__tiny-L4__lr0.002__s0")
    (tmp_path / "sweep.json").write_text("{}")
    assert runs.model_dir(str(done)) == str(done / "final")                     # a run folder
    assert runs.model_dir(str(done / "final")) == str(done / "final")           # an HF folder
    assert runs.model_dir("aspect-ratio-scaling/hc-lr2e-3") == "aspect-ratio-scaling/hc-lr2e-3"  # a Hub id
    with pytest.raises(ValueError, match="training run without a final export yet"):
        runs.model_dir(str(running))
    with pytest.raises(ValueError, match="is a sweep folder"):
        runs.model_dir(str(tmp_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no model"):
        runs.model_dir(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="is a file"):
        runs.model_dir(str(done / "summary.json"))
    assert runs.model_dir("gpt2") == "gpt2"  # a Hub id without an owner
    for missing in (str(tmp_path / "nope" / "final"), "./nope", "../nope", "a/b/c", "~/nope", "runs//x"):
        with pytest.raises(ValueError, match="no such model folder"):
            runs.model_dir(missing)


def test_report_sections_assemble_in_order_and_replace_only_themselves(tmp_path):
    report = tmp_path / "report.md"
    runs.write_report_section(str(tmp_path), "analysis", "## Layer analyses\n\nA")
    assert report.read_text() == "## Layer analyses\n\nA\n"
    runs.write_report_section(str(tmp_path), "results", "# Sweep\n\nR\n\n\n")
    runs.write_report_section(str(tmp_path), "evaluation", "## Downstream evaluation\n\nE")
    assert report.read_text() == "# Sweep\n\nR\n\n## Downstream evaluation\n\nE\n\n## Layer analyses\n\nA\n"
    runs.write_report_section(str(tmp_path), "results", "# Sweep\n\nR2")   # a rebuilt section replaces itself
    assert report.read_text().count("# Sweep") == 1 and "R2" in report.read_text() and "\nA\n" in report.read_text()
    runs.write_report_section(str(tmp_path), "evaluation", None)
    assert "Downstream" not in report.read_text()
    with pytest.raises(ValueError, match="unknown report section 'plots'"):
        runs.write_report_section(str(tmp_path), "plots", "x")


def test_a_report_written_elsewhere_is_kept_as_the_first_section(tmp_path):
    (tmp_path / "report.md").write_text("# My notes\n\nkept\n")
    runs.write_report_section(str(tmp_path), "analysis", "## Layer analyses")
    assert (tmp_path / "report.md").read_text() == "# My notes\n\nkept\n\n## Layer analyses\n"


def test_a_mistyped_path_under_a_local_folder_is_a_local_error_not_a_hub_id(tmp_path, monkeypatch, capsys):
    """``runs/<typo>`` looks like an ``owner/name`` Hub id, but ``runs/`` is a local folder: the user meant a path.
    It is refused at once (exit 2, with the closest name there), before any Hub request."""
    from depthbench.cli import main

    _run(tmp_path, "pre_ln__tiny-L2__lr0.002__s0", "finished", final=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"no such model folder in the local folder runs/ \(did you mean "
                                         r"runs/pre_ln__tiny-L2__lr0.002__s0\?\)"):
        runs.model_dir("runs/pre_ln__tiny-L2__lr0.002__s1")
    assert runs.model_dir("org/name") == "org/name"  # no local org/: still a Hub id

    import huggingface_hub

    def no_hub(*args, **kwargs):
        raise AssertionError("the Hub was asked for a mistyped local path")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_hub)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_hub)
    for argv in (["analyze", "runs/pre_ln__tiny-L2_lr0.002__s0", "--data", "data.txt"],
                 ["export-llama", "runs/pre_ln__tiny-L2_lr0.002__s0", "-o", "out"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "did you mean runs/pre_ln__tiny-L2__lr0.002__s0?" in err, err
    assert not (tmp_path / "out").exists()
