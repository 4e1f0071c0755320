"""Tests of ``depthbench.sweeps.released.folder``: ``final/`` links into the conversion cache (its card a copy),
``run_config.json`` names the release; ``sweep.json`` grows with each selection and refuses a folder measured
with other settings or of a training sweep, overwriting nothing.

Run: ``python -m pytest tests/sweeps/released/test_folder.py -q``
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from depthbench.hub.catalogue import CatalogueError
from depthbench.sweeps.released.folder import claim_folder, link_model
from depthbench.sweeps.released.selection import Target
from tests.sweeps.released.releases import repo_of

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")



def test_final_links_into_the_conversion_cache(world, measured):
    out, _ = measured
    final = out / "runs" / "attnres__tiny-L2__lr0.002__s42" / "final"
    weights = final / "model.safetensors"
    assert weights.is_symlink() and Path(os.readlink(weights)).parent.parent.parent.name == "converted-main"
    assert not (final / "README.md").is_symlink()
    record = json.loads((final.parent / "run_config.json").read_text())
    assert record["release"]["repo"] == repo_of("attnres", 2) and record["release"]["conversion"]["arch"] == "attnres"


def _target(repo: str, shape: str, lr: float) -> Target:
    return Target(repo, "pre_ln", shape, "tiny", int(shape.split("-L")[1]), lr, 10, 42)


SETTINGS = {"data": "/d", "content_hash": None, "split": "eval", "seq_len": 32, "max_tokens": None,
            "dtype": "float32", "step": None}


def test_sweep_json_grows_with_each_selection_and_refuses_other_settings_and_folders(tmp_path):
    out = tmp_path / "out"
    claim_folder(str(out), [_target("o/a", "tiny-L2", 1e-3)], SETTINGS, str(tmp_path))
    claim_folder(str(out), [_target("o/b", "tiny-L4", 2e-3), _target("o/a", "tiny-L2", 1e-3)], SETTINGS,
                 str(tmp_path), batch={"sequences": 4, "seq_len": 256})
    written = json.loads((out / "sweep.json").read_text())
    assert written["releases"] == ["o/a", "o/b"] and written["spec"]["planned"] == 2
    assert (written["spec"]["shapes"], written["spec"]["lrs"]) == (["tiny-L2", "tiny-L4"], [1e-3, 2e-3])
    assert written["spec"]["base"]["train"]["global_batch_size"] == 4
    before = (out / "sweep.json").read_bytes()
    with pytest.raises(CatalogueError, match=r"measured with other settings \(max_tokens, seq_len differ: "
                                             r"\{'max_tokens': None, 'seq_len': 32\} there\)"):
        claim_folder(str(out), [], {**SETTINGS, "seq_len": 64, "max_tokens": 128}, str(tmp_path))
    assert (out / "sweep.json").read_bytes() == before
    (tmp_path / "train" / "runs" / "r").mkdir(parents=True)
    with pytest.raises(CatalogueError, match="has a runs/ folder but no sweep.json: choose another -o folder"):
        claim_folder(str(tmp_path / "train"), [], SETTINGS, str(tmp_path))
    (tmp_path / "train" / "sweep.json").write_text(json.dumps({"kind": "sweep"}))
    with pytest.raises(CatalogueError, match="is the folder of a training sweep, not of `depthbench released eval`"):
        claim_folder(str(tmp_path / "train"), [], SETTINGS, str(tmp_path))


def test_final_links_every_file_but_copies_the_card(tmp_path):
    converted = tmp_path / "cache"
    (converted / "sub").mkdir(parents=True)
    for name, text in (("config.json", "{}"), ("model.safetensors", "w"), ("README.md", "card")):
        (converted / name).write_text(text)
    final = tmp_path / "run" / "final"
    final.mkdir(parents=True)
    (final / "stale.bin").write_text("old")
    link_model(str(converted), str(final))
    assert sorted(p.name for p in final.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert os.readlink(final / "model.safetensors") == str(converted / "model.safetensors")
    assert not (final / "README.md").is_symlink() and (final / "README.md").read_text() == "card"
    (final / "README.md").write_text("evaluated")
    assert (converted / "README.md").read_text() == "card"
