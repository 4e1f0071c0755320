"""Tests of ``depthbench.sweeps.spec``: a sweep definition's checks (each bad one a clear :class:`SweepError`),
duplicates, the points and their run folders and overrides, budget shapes, the fingerprint and claiming a folder.

Run: ``python -m pytest tests/sweeps/test_spec.py -q``
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from depthbench.shapes import shape_for_budget
from depthbench.sweeps.spec import RunPoint, SweepError, SweepSpec, budget_shapes, claim_folder, describe

ARCHS, SHAPES, LRS = ["pre_ln", "hc"], ["tiny-L2", "tiny-L4"], [1e-3, 3e-3]


def make_spec(data_dir: Path, **kw) -> SweepSpec:
    """The grid of tests/sweeps/test_sweep.py (a definition only: nothing here trains or reads ``data_dir``)."""
    base = {"data": {"data_dir": str(data_dir), "seq_len": 32}, "train": {"max_steps": kw.pop("steps", 3)}}
    args = {"archs": ARCHS, "shapes": SHAPES, "lrs": LRS, "seeds": [0], "base": base, "name": "test"}
    return SweepSpec(**{**args, **kw})


@pytest.fixture
def data_dir(tmp_path) -> Path:
    return tmp_path / "data"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"archs": ["pre_ln", "nope"]}, "unknown architecture 'nope'; valid architectures: pre_ln"),
        ({"archs": []}, "no architecture given"),
        ({"shapes": []}, "shape grid is empty"),
        ({"shapes": ["nogrid-L4"]}, "unknown shape 'nogrid-L4'.*grid must be one of"),
        ({"shapes": ["tiny-L5"]}, "unknown shape 'tiny-L5'.*one of \\[2, 4, 6, 8, 12, 16\\]"),
        ({"lrs": []}, "no learning rate given"),
        ({"lrs": [0.0]}, "learning rate 0.0 is not allowed: learning rates must be positive numbers"),
        ({"lrs": [-1e-3]}, "learning rate -0.001 is not allowed"),
        ({"lrs": [float("nan")]}, "learning rate nan is not allowed"),
        ({"lrs": [float("inf")]}, "learning rate inf is not allowed"),
        ({"lrs": ["1e-3"]}, "learning rate '1e-3' is not allowed"),
        ({"lrs": [True]}, "learning rate True is not allowed"),
        ({"seeds": []}, "seeds"),
        ({"seeds": [0.5]}, "seeds"),
    ],
)
def test_bad_definitions_raise_clear_errors(data_dir, kwargs, match):
    with pytest.raises(SweepError, match=match):
        make_spec(data_dir, **kwargs)


def test_duplicates_are_dropped_and_all_resolves(data_dir):
    spec = make_spec(data_dir, archs=["pre_ln", "pre_ln"], shapes=["tiny-L2", "tiny-L2"], lrs=[1e-3, 0.001])
    assert len(spec.runs()) == 1
    from depthbench.registry import arch_ids

    assert make_spec(data_dir, archs="all").archs == arch_ids()


def test_points_are_architecture_major_with_their_run_folders(data_dir):
    spec = make_spec(data_dir, seeds=[0, 1])
    points = spec.runs()
    assert len(points) == 2 * 2 * 2 * 2
    assert points[:3] == [RunPoint("pre_ln", "tiny-L2", 1e-3, 0), RunPoint("pre_ln", "tiny-L2", 1e-3, 1),
                          RunPoint("pre_ln", "tiny-L2", 3e-3, 0)]
    assert {p.arch for p in points[:8]} == {"pre_ln"} and {p.arch for p in points[8:]} == {"hc"}
    point = RunPoint("hc", "tiny-L4", 0.002, 3)
    assert point.run_id == "hc__tiny-L4__lr0.002__s3"
    assert spec.run_dir("/o", point) == "/o/runs/hc__tiny-L4__lr0.002__s3"
    assert point.overrides("/o/r") == ["model.arch=hc", "model.shape=tiny-L4", "optim.lr=0.002", "train.seed=3",
                                       'output_dir="/o/r"', "resume=auto"]


def test_a_custom_shape_is_written_as_model_fields_and_a_run_config_names_its_point(data_dir, tmp_path):
    fields = {"hidden_size": 32, "num_hidden_layers": 2}
    spec = make_spec(data_dir, shapes=["mine-L2"], custom_shapes={"mine-L2": fields}, archs=["pre_ln"], lrs=[1e-3])
    (point,) = spec.runs()
    assert spec.run_overrides(point, "/r") == ["model.shape=null", "model.fields.hidden_size=32",
                                               "model.fields.num_hidden_layers=2", "model.arch=pre_ln",
                                               "optim.lr=0.001", "train.seed=0", 'output_dir="/r"', "resume=auto"]
    bad = make_spec(data_dir, archs=["pre_ln"], shapes=["tiny-L2"], lrs=[1e-3], overrides=["train.nope=1"])
    with pytest.raises(SweepError, match="invalid run config for pre_ln__tiny-L2__lr0.001__s0: .*train.nope"):
        bad.run_config(bad.runs()[0], str(tmp_path / "r"))
    with pytest.raises(SweepError, match="custom_shapes must map shape names"):
        make_spec(data_dir, shapes=["x"], custom_shapes={"x": {"hidden_size": 32}})


def test_budget_shapes_are_the_design_rule_shapes_named_by_budget_and_depth():
    names, fields = budget_shapes("2m", [2, 4], vocab_size=1024, heads=4)
    assert names == ["budget2m-L2", "budget2m-L4"]
    for depth, name in zip((2, 4), names):
        assert fields[name] == shape_for_budget(2_000_000, depth, vocab_size=1024, heads=4).config_fields()
        assert fields[name]["num_hidden_layers"] == depth
    with pytest.raises(SweepError, match="--depths is required with --budget"):
        budget_shapes("2m", [])


def test_the_fingerprint_covers_the_definition_but_not_its_name_or_notes(data_dir):
    spec = make_spec(data_dir)
    assert make_spec(data_dir, name="other", notes="n").fingerprint() == spec.fingerprint()
    assert make_spec(data_dir, lrs=[1e-3]).fingerprint() != spec.fingerprint()
    assert make_spec(data_dir, steps=4).fingerprint() != spec.fingerprint()
    assert len(spec.fingerprint()) == 16 and int(spec.fingerprint(), 16) >= 0


def test_claiming_a_folder_writes_sweep_json_and_refuses_another_definition(data_dir, tmp_path):
    out = tmp_path / "out"
    spec = make_spec(data_dir)
    claim_folder(spec, str(out))
    stored = json.loads((out / "sweep.json").read_text())
    assert stored["fingerprint"] == spec.fingerprint() and stored["runs"] == 8 and stored["spec"]["lrs"] == LRS
    claim_folder(make_spec(data_dir, name="renamed"), str(out))  # same definition: accepted
    before = (out / "sweep.json").read_bytes()
    with pytest.raises(SweepError, match="holds results of a different sweep definition.*nothing was overwritten"):
        claim_folder(make_spec(data_dir, lrs=[1e-3]), str(out))
    assert (out / "sweep.json").read_bytes() == before
    assert describe(stored["spec"]) == ("archs pre_ln,hc, shapes tiny-L2,tiny-L4, lrs 0.001,0.003, seeds 0, 3 steps")
    assert describe(None) == "unknown"
