"""``depthbench.upcycle.checkpoint``: which output folders an upcycle may write into, and the folder it writes.
Oracles: folders built by hand, ``json`` and transformers itself (the written folder loads with
``AutoModelForCausalLM.from_pretrained`` and computes the source model as transformers runs it).

    python -m pytest tests/upcycle/test_checkpoint.py -q
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from depthbench.upcycle import UpcycleError, upcycle
from depthbench.upcycle.checkpoint import RECORD, check_output
from tests.upcycle import tiny_sources
from tests.upcycle.tiny_sources import inputs, relative_difference


@pytest.fixture(scope="module")
def upcycled():
    source = tiny_sources.llama()
    return source, upcycle(source, "pre_ln", grow_depth=1)


def test_new_and_empty_folders_are_accepted(tmp_path):
    check_output(str(tmp_path / "new"))
    (tmp_path / "empty").mkdir()
    check_output(str(tmp_path / "empty"))


@pytest.mark.parametrize("files,overwrite,message", [
    ({"config.json": "{}"}, True, "holds another model (no upcycle.json); choose an empty or new output folder"),
    ({"notes.txt": "x"}, True, "holds other files (no upcycle.json); choose an empty or new output folder"),
    ({RECORD: "{}", "config.json": "{}"}, False, "holds an earlier upcycle; pass --overwrite (overwrite=True)"),
])
def test_folders_holding_something_else_are_refused_saying_what(tmp_path, files, overwrite, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(UpcycleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_output(str(tmp_path), overwrite=overwrite)
    assert sorted(os.listdir(tmp_path)) == sorted(files)  # nothing touched


def test_a_file_in_place_of_the_folder_is_refused(tmp_path):
    (tmp_path / "out").write_text("x")
    with pytest.raises(UpcycleError, match="out exists and is not a folder; choose another output folder"):
        check_output(str(tmp_path / "out"))


def test_an_earlier_upcycle_may_be_overwritten(tmp_path):
    (tmp_path / RECORD).write_text("{}")
    check_output(str(tmp_path), overwrite=True)


def test_the_saved_folder_loads_in_transformers_and_computes_the_source(upcycled, tmp_path):
    from transformers import AutoModelForCausalLM

    source, result = upcycled
    out = result.save(str(tmp_path / "out"))
    with open(os.path.join(out, RECORD), encoding="utf-8") as f:
        assert json.load(f) == json.loads(json.dumps(result.report))
    model = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
    assert model.config.num_hidden_layers == source.config.num_hidden_layers + 1
    ids = inputs(length=20)
    with torch.no_grad():
        assert relative_difference(model(ids).logits, source(ids).logits) <= 1e-5
    # an in-memory source is named by its class; the card names it and the architecture
    assert "model_name: LlamaForCausalLM-pre_ln-upcycled" in (tmp_path / "out" / "README.md").read_text()


def test_a_failed_write_leaves_nothing_and_keeps_an_earlier_upcycle(upcycled, tmp_path, monkeypatch):
    import depthbench.cards

    _, result = upcycled
    out = tmp_path / "out"
    result.save(str(out))
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}

    def broken_card(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(depthbench.cards, "write_card", broken_card)
    with pytest.raises(OSError, match="disk full"):
        result.save(str(out), overwrite=True)
    with pytest.raises(OSError, match="disk full"):
        result.save(str(tmp_path / "fresh"))
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no fresh folder, no temporary sibling left
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
