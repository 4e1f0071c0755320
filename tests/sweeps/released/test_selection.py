"""Tests of ``depthbench.sweeps.released.selection`` on a catalogue of hand-written entries: one LR per shape (the
first, with a warning naming the shapes left out) unless ``best_lr``, the step and seed of each target, a
repository named explicitly (its settings read from its name), duplicates dropped, and the errors for an entry of
unknown name and a name that is not the organisation's pattern.

Run: ``python -m pytest tests/sweeps/released/test_selection.py -q``
"""

from __future__ import annotations

import logging

import pytest

from depthbench.hub.catalogue import Catalogue, CatalogueError, Release
from depthbench.sweeps.released.selection import select_targets

ORG = "aspect-ratio-scaling"


def release(lr: float | None, depth: int = 2, arch: str = "pre_ln", name: str = "preln") -> Release:
    spelled = {2e-3: "2e-3", 1e-3: "1e-3"}.get(lr)  # as the organisation spells it
    repo = f"{ORG}/{name}-lr{spelled}-llama-2M-L{depth}-pretrain" if lr else None
    return Release(arch=arch, tier="2M", size="2M", grid="tiny", depth=depth, name=name, lr=lr, repo=repo,
                   steps=(0, 10), final_step=10)


CATALOGUE = Catalogue((release(2e-3), release(1e-3), release(2e-3, depth=4)), {"seed": 7})


def test_one_lr_per_shape_unless_best_lr_each_at_its_final_step(caplog):
    with caplog.at_level(logging.WARNING, logger="depthbench.sweeps.released.selection"):
        one = select_targets(CATALOGUE, archs=["pre_ln"])
    assert [(t.repo, t.depth, t.lr, t.step, t.seed) for t in one] == [
        (CATALOGUE.releases[0].repo, 2, 2e-3, 10, 7), (CATALOGUE.releases[2].repo, 4, 2e-3, 10, 7)]
    assert "1 selected shape(s) have releases at other LRs too (pre_ln tiny-L2)" in caplog.text
    assert "--best-lr measures them all" in caplog.text
    every = select_targets(CATALOGUE, archs=["pre_ln"], depths=[2], best_lr=True, step=0)
    assert [(t.lr, t.step, t.shape) for t in every] == [(2e-3, 0, "tiny-L2"), (1e-3, 0, "tiny-L2")]
    assert str(every[1].run_id) == "pre_ln__tiny-L2__lr0.001__s7"


def test_a_named_repository_is_read_from_its_name_and_duplicates_are_dropped():
    named = "preln-lr4e-3-llama-400M-L24-pretrain"  # no entry of the catalogue; the org is added
    targets = select_targets(CATALOGUE, repos=[named, CATALOGUE.releases[0].repo])
    assert [t.repo for t in targets] == [f"{ORG}/{named}", CATALOGUE.releases[0].repo]  # repos alone: no selection
    t = targets[0]
    assert (t.arch, t.shape, t.grid, t.depth, t.lr, t.step, t.release) == ("pre_ln", "400m-L24", "400m", 24, 4e-3,
                                                                          None, None)
    assert targets[1].release == CATALOGUE.releases[0]  # matched to its entry by name
    both = select_targets(CATALOGUE, depths=[4], repos=[CATALOGUE.releases[2].repo])
    assert [t.repo for t in both] == [CATALOGUE.releases[2].repo]


def test_an_entry_of_unknown_name_and_a_bad_name_are_clear_errors():
    unnamed = Catalogue((release(None, depth=4), release(2e-3)), {})
    with pytest.raises(CatalogueError, match=r"repository names of 1 selected release\(s\) are not known "
                                             r"\(pre_ln 2M L4\).*pass --repo NAME"):
        select_targets(unnamed, depths=[4])
    with pytest.raises(CatalogueError, match="^--repo aspect-ratio-scaling/not-a-release-name: "):
        select_targets(CATALOGUE, repos=["not-a-release-name"])
