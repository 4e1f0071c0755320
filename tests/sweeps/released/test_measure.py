"""Tests of ``depthbench.sweeps.released.measure``: each release's held-out loss equals an independent reference
(the original models' logits, cross-entropy by hand), an interrupted run resumes without downloading a finished
release again, and a release of another tokenizer or of another shape than its catalogue entry is refused before
any weights are downloaded.

Run: ``python -m pytest tests/sweeps/released/test_measure.py -q``
"""

from __future__ import annotations

import json
import math

import pytest

from depthbench.data import make_tiny_tokenizer, prepare_data
from depthbench.shapes import get_shape
from depthbench.sweeps.heldout import TokenizerMismatch
from depthbench.sweeps.released import measure
from depthbench.sweeps.released.measure import Measurement, evaluate_releases
from depthbench.sweeps.released.selection import select_targets
from tests.helpers import pydoc_paragraphs
from tests.sweeps.released.releases import (
    ORG,
    PUBLISHED,
    RELEASES,
    SEQ_LEN,
    files_of,
    hub_of,
    read_csv,
    reference_loss,
    repo_of,
    write_release,
)

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")



def test_heldout_loss_equals_an_independent_reference(world, measured):
    out, _ = measured
    rows = {r["run_dir"].split("/")[-1]: r for r in read_csv(out / "results.csv")}
    assert sorted(rows) == ["attnres__tiny-L2__lr0.002__s42", "pre_ln__tiny-L2__lr0.002__s42",
                            "pre_ln__tiny-L4__lr0.002__s42"]
    for (arch, name, depth) in RELEASES:
        row = rows[f"{arch}__tiny-L{depth}__lr0.002__s42"]
        expected = reference_loss(world["models"][repo_of(name, depth)], world["root"] / "heldout", SEQ_LEN)
        assert math.isclose(float(row["eval_loss"]), expected, rel_tol=1e-5), (arch, depth, row["eval_loss"])
        shape = get_shape(f"tiny-L{depth}")
        assert (int(row["num_layers"]), int(row["hidden_size"])) == (depth, shape.hidden_size)
        assert row["status"] == "finished" and int(row["steps"]) == 10 and int(row["tokens"]) == 10 * 1024
    summary = json.loads((out / "runs" / "pre_ln__tiny-L2__lr0.002__s42" / "summary.json").read_text())
    assert summary["heldout"]["tokenizer"]["status"] == "match"
    assert summary["heldout"]["seq_len"] == SEQ_LEN and summary["release"]["step"] == 10


def test_an_interrupted_run_resumes_without_downloading_again(world, monkeypatch, tmp_path):
    hub, real = world["hub"], measure.measure_release
    calls = []

    def interrupted(target, *args, **kwargs):
        calls.append(target.repo)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(target, *args, **kwargs)

    monkeypatch.setattr(measure, "measure_release", interrupted)
    targets = select_targets(world["catalogue"], archs=["preln"])
    m, h = Measurement(data=str(world["root"] / "heldout"), seq_len=SEQ_LEN, device="cpu"), hub_of(world, "resume")
    with pytest.raises(KeyboardInterrupt):
        evaluate_releases(targets, str(tmp_path / "out"), m, h, log=lambda *a: None)
    assert (tmp_path / "out" / "runs" / "pre_ln__tiny-L2__lr0.002__s42" / "summary.json").exists()
    assert not (tmp_path / "out" / "runs" / "pre_ln__tiny-L4__lr0.002__s42" / "summary.json").exists()
    first = repo_of("preln", 2)
    seen = len([p for _, p in hub.requests if first in p])
    log: list[str] = []
    evaluate_releases(targets, str(tmp_path / "out"), m, h, log=log.append)
    assert calls == [first, repo_of("preln", 4), repo_of("preln", 4)]
    assert len([p for _, p in hub.requests if first in p]) == seen  # nothing of the finished release fetched
    assert any("measured earlier" in line and first in line for line in log)
    assert len(read_csv(tmp_path / "out" / "results.csv")) == 2


def test_another_tokenizer_is_refused_before_any_weights(world, tmp_path):
    other = make_tiny_tokenizer(pydoc_paragraphs(40), vocab_size=280)
    prepare_data([str(world["root"] / "train.txt")], other, str(tmp_path / "data"),
                 eval_files=[str(world["root"] / "heldout.txt")], progress=False)
    hub = world["hub"]
    before = len(hub.requests)
    targets = select_targets(world["catalogue"], archs=["attnres"])
    with pytest.raises(TokenizerMismatch, match="was not tokenized with the tokenizer of .*attnres.*prepare-data"):
        evaluate_releases(targets, str(tmp_path / "out"), Measurement(data=str(tmp_path / "data"), device="cpu"),
                          hub_of(world, "mismatch"), log=lambda *a: None)
    assert not [p for _, p in hub.requests[before:] if ".distcp" in p]


def test_a_release_whose_config_is_not_its_entry_s_shape_is_refused_naming_both(world, tmp_path):
    folder = world["root"] / "src" / "mismatch"
    repo = f"{ORG}/preln-lr3e-3-llama-2M-L2-pretrain"
    if repo not in world["hub"].repos:
        write_release(folder, "pre_ln", 4, world["tokenizer"], seed=9)  # an L4 model under an L2 name
        world["hub"].add_repo(repo, files_of(folder))
    targets = select_targets(world["catalogue"], repos=[repo])
    assert targets[0].shape == "tiny-L2"  # matched by its name only (no listing)
    refused = r"config.json has d=\d+, L=4, heads=\d+, but the catalogue entry .*\(pre_ln tiny-L2\) has d=\d+, L=2"
    with pytest.raises(measure.ReleasesFailed, match=refused):
        evaluate_releases(targets, str(tmp_path / "out"), Measurement(data=str(world["root"] / "heldout"),
                                                                      seq_len=SEQ_LEN, device="cpu"),
                          hub_of(world, "mismatch"), published=PUBLISHED, log=lambda *_: None)
    assert not list(world["root"].glob("hub-mismatch/models--*/blobs/*.distcp"))  # refused before any weights
