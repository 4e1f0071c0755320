"""The sweep comparison of ``depthbench.analysis.sweep``: the late-layer figure and the report table, from
hand-written per-run results (no model): one depth is a bar per architecture (lines of one point each would lie on
one another), and the table's late-layer columns name the threshold they count against.

Run: ``python -m pytest tests/analysis/test_sweep.py -q``
"""

from __future__ import annotations

import matplotlib

from depthbench.analysis import sweep


def results(depths: list[int]) -> list[dict]:
    out = []
    for L in depths:
        for arch, frac in (("attnres", 0.4), ("hc", 0.0), ("pre_ln", 0.0)):
            for metric, thr in (("causal", 0.45), ("permutation", 0.15)):
                out.append({"run_id": f"{arch}__micro-L{L}__lr0.003__s0", "arch": arch, "num_layers": L,
                            "metric": metric, "seconds": 1.0,
                            "values": {"late_fraction_above": frac, "threshold": thr, "mean": 0.1}})
    return out


def _figure(monkeypatch, tmp_path, data) -> "matplotlib.figure.Figure":
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(plt, "close", kept.append)  # keep the figure to inspect it
    assert sweep.plot_late_fractions(data, str(tmp_path / "late.png"))
    assert (tmp_path / "late.png").stat().st_size > 0
    return kept[0]


def test_one_depth_is_a_bar_per_architecture(monkeypatch, tmp_path):
    fig = _figure(monkeypatch, tmp_path, results([8]))
    for ax in fig.axes:
        bars = [p for p in ax.patches if isinstance(p, matplotlib.patches.Rectangle)]
        assert len(bars) == 3 and len({b.get_x() for b in bars}) == 3  # side by side, none hidden
        assert [t.get_text() for t in ax.get_xticklabels()] == ["attnres", "hc", "pre_ln"]
        assert [round(b.get_height(), 3) for b in bars] == [0.4, 0.0, 0.0]


def test_several_depths_stay_lines_against_L(monkeypatch, tmp_path):
    fig = _figure(monkeypatch, tmp_path, results([2, 8]))
    assert all(len(ax.lines) == 3 and not ax.patches[1:] for ax in fig.axes)


def test_the_table_names_the_threshold_of_each_late_layer_fraction():
    text = sweep.render_section(results([8]), [])
    header = next(line for line in text.splitlines() if line.startswith("| run |"))
    assert "causal.late_fraction_above (> 0.45)" in header and "permutation.late_fraction_above (> 0.15)" in header
