"""Tests of ``depthbench.sweeps.report_study``, the ``## Beside the study`` part of a sweep's ``report.md``: the
study's 400M result stands beside the sweep's, read from the published figures, with the gaps between the two
computed from the sweep's own rows (shapes, scale, tokens per parameter, learning rates) and a "cannot show" only
where those gaps are large.

The rows are built by hand (``tests/sweeps/report_rows.py``).

Run: ``python -m pytest tests/sweeps/test_report_study.py -q``
"""

from __future__ import annotations

import re

from depthbench.hub.catalogue import load_published
from depthbench.shapes import get_shape
from tests.sweeps.report_rows import DEMO_SHAPES, WORSE, make_rows, report_of


def test_the_study_s_400m_result_stands_beside_the_sweep_from_the_published_figures():
    report = report_of(make_rows(DEMO_SHAPES, WORSE))
    assert "## Beside the study" in report and "arXiv 2609.32534, Fig. 2" in report
    table = load_published()["validation_loss"]["grids"]["400m"]
    labels = load_published()["labels"]
    for arch in WORSE:  # the study's L16 and L32 losses and their change, as published
        low, high = table[arch]["16"], table[arch]["32"]
        line = next(line for line in report.splitlines() if line.startswith(f"| {arch} ({labels[arch]}) |"))
        assert f"| {low:.3f} \u2192 {high:.3f} | {high - low:+.3f} |" in line, line
    # the study's shapes from the 400m grid, ours from the rows
    assert f"d/L {get_shape('400m-L16').aspect_ratio:.0f} to {get_shape('400m-L32').aspect_ratio:.0f}" in report
    assert "d/L 20 to 3 here (none of them within the study's range)" in report
    # pre_ln gets worse in the study as here, hc and attnres better in the study, worse here
    assert re.search(r"\| pre_ln \(Pre-LN\) \|.*\| on every metric \|$", report, flags=re.M)
    assert re.search(r"\| hc \(HC\) \|.*\| no \|$", report, flags=re.M)
    assert "**What this sweep cannot show.**" in report and "neither confirm nor refute" in report


def test_the_gaps_are_computed_from_the_rows():
    rows = make_rows(DEMO_SHAPES, WORSE, tokens=40_960, seeds=(0, 1))
    report = report_of(rows)
    tpp = [r["tokens_per_param"] for r in rows]
    assert f"- **Tokens.** {min(tpp):.2g}-{max(tpp):.2g} tokens per parameter here" in report
    params = [r["params_total"] for r in rows]
    assert f"{min(params) / 1e3:.0f}k-{max(params) / 1e3:.0f}k parameters here" in report
    assert "one (0.003) for every run here" in report and "2 seeds' spread" in report


def test_a_sweep_at_the_study_s_shapes_is_not_told_it_cannot_show_anything():
    shapes = ["400m-L16", "400m-L24", "400m-L32"]
    rows = make_rows(shapes, {"pre_ln": [2.76, 2.765, 2.78], "hc": [2.73, 2.70, 2.70]}, tokens=7_969_177_600)
    report = report_of(rows)
    assert "## Beside the study" in report and "3 of 3 within the study's range" in report
    assert "cannot show" not in report and "of its size" not in report


def test_no_study_section_for_architectures_the_study_did_not_publish_at_400m():
    from depthbench.registry import _TABLE

    arch = next(a.id for a in _TABLE if a.id not in load_published()["validation_loss"]["grids"]["400m"])
    report = report_of(make_rows(DEMO_SHAPES, {arch: [1.5, 1.6, 1.7]}))
    assert "## Beside the study" not in report
