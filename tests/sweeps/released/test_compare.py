"""Tests of ``depthbench.sweeps.released.compare``: the study's published figures beside the re-measured ones in
``report.md`` and on the terminal (hand-written rows: the pairs and their differences), and the best LR of each
shape marked (Δ for it only, a non-finite loss never the best).

Run: ``python -m pytest tests/sweeps/released/test_compare.py -q``
"""

from __future__ import annotations

import json

import pytest

from depthbench.sweeps.released.compare import mark_best_lr, render_section
from depthbench.sweeps.released.measure import Measurement, evaluate_releases
from depthbench.sweeps.released.selection import select_targets
from tests.sweeps.released.releases import PUBLISHED, SEQ_LEN, hub_of, other_lr_releases, read_csv, repo_of

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")



def test_report_sets_the_published_figures_beside_the_measured_ones(world, measured):
    out, log = measured
    report = (out / "report.md").read_text()
    assert (out / "loss_vs_aspect_ratio.png").stat().st_size > 0
    assert report.index("# Aspect-ratio sweep") < report.index("## The study's published figures")
    assert "3 of 3 runs finished" in report and "a test table" in report
    rows = {r["run_dir"].split("/")[-1]: float(r["eval_loss"]) for r in read_csv(out / "results.csv")}
    loss = rows["pre_ln__tiny-L4__lr0.002__s42"]
    line = next(x for x in report.splitlines() if x.startswith("| Pre-LN | tiny-L4 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2] == "2e-3"  # one LR measured: Δ compares that repository with the study's best-LR figure
    assert cells[6:9] == [f"{loss:.4f}", "7.250", f"{loss - 7.25:+.4f}"]
    results = json.loads((out / "runs" / "pre_ln__tiny-L2__lr0.002__s42" / "eval" / "results.json").read_text())
    nll = results["results"]["depthbench_nll_math"]["nll,none"]
    nll_line = next(x for x in report.splitlines() if x.startswith("| Pre-LN | tiny-L2 |") and " / " in x)
    assert f"{nll:.4f} / 9.500 ({nll - 9.5:+.3f})" in nll_line
    other = json.loads((out / "runs" / "attnres__tiny-L2__lr0.002__s42" / "eval" / "results.json").read_text())
    attnres_line = next(x for x in report.splitlines() if x.startswith("| Full AttnRes | tiny-L2 |") and " / " in x)
    assert f"{other['results']['depthbench_nll_math']['nll,none']:.4f} / —" in attnres_line  # none published
    terminal = "\n".join(log)
    assert "re-measured vs the study's published best-LR figure" in terminal and "7.250" in terminal


def test_best_lr_measures_every_listed_lr_and_reports_the_best(world, tmp_path):
    from depthbench.hub.listing import sync
    from depthbench.sweeps.released.compare import comparison_rows

    lrs = other_lr_releases(world)
    listing = sync(endpoint=world["hub"].url, token=False, path=str(tmp_path / "listing.json"), log=lambda *_: None)
    catalogue = world["catalogue"].with_listing(listing)
    one = select_targets(catalogue, archs=["pre_ln"], depths=[2])
    assert [t.repo for t in one] == [repo_of("preln", 2)]  # one LR per shape unless --best-lr: the catalogue's
    targets = select_targets(catalogue, archs=["pre_ln"], depths=[2], best_lr=True)
    assert {t.repo for t in targets} == {repo_of("preln", 2), *lrs}
    out = tmp_path / "out"
    evaluate_releases(targets, str(out), Measurement(data=str(world["root"] / "heldout"), split="eval",
                                                     seq_len=SEQ_LEN, device="cpu"),
                      hub_of(world, "best"), published=PUBLISHED, log=lambda *_: None)
    rows = comparison_rows(str(out), PUBLISHED)
    losses = {r["lr"]: r["loss"] for r in rows}
    assert len(losses) == 3 and all(r["lrs"] == 3 for r in rows)
    best = [r for r in rows if r["best"]]
    assert len(best) == 1 and best[0]["loss"] == min(losses.values())
    assert best[0]["delta"] == pytest.approx(best[0]["loss"] - 7.5)
    assert all(r["delta"] is None for r in rows if not r["best"])
    report = (out / "report.md").read_text()
    assert "(best of 3)" in report and report.count("(not best of 3)") == 2


def test_the_best_lr_of_each_shape_keeps_its_delta_and_a_non_finite_loss_is_never_best():
    def row(shape, lr, loss, delta):
        return {"arch": "pre_ln", "shape": shape, "lr": lr, "loss": loss, "delta": delta}

    rows = mark_best_lr([row("a", 1e-3, 3.2, 0.2), row("a", 2e-3, 3.1, 0.1), row("a", 4e-3, float("nan"), None),
                         row("b", 1e-3, None, None), row("c", 1e-3, 2.0, -0.5)])
    assert [(r["lrs"], r["best"], r["delta"]) for r in rows] == [
        (3, False, None), (3, True, 0.1), (3, False, None), (1, False, None), (1, True, -0.5)]


def test_the_section_shows_the_pairs_and_dashes_for_what_is_missing():
    rows = [{"arch": "pre_ln", "label": "Pre-LN", "shape": "tiny-L2", "lr": 2e-3, "lrs": 1, "best": True, "L": 2,
             "d": 64, "aspect_ratio": 32.0, "step": 10, "loss": 7.25, "published_loss": 7.5, "delta": -0.25,
             "tokens": 1234, "nll": {"math": (2.5, 2.25), "stem": (1.0, None)}}]
    text = render_section(rows, {"validation_loss": {"source": "S"}, "completion_nll": {"source": "N"}})
    assert "| Pre-LN | tiny-L2 | 2e-3 | 2 | 32.0 | 10 | 7.2500 | 7.500 | -0.2500 | 1,234 |" in text
    assert "| arch | shape | L | STEM | Math |" in text  # the domains in their fixed order, only those present
    assert "| Pre-LN | tiny-L2 | 2 | 1.0000 / — | 2.5000 / 2.250 (+0.250) |" in text
