"""Tests of ``depthbench.sweeps.plots``: the figure's lines are the best-LR means over seeds (computed by hand
here) at each shape's d/L, one panel per metric, deep-narrow on the right, and nothing is drawn before a run ends.

Run: ``python -m pytest tests/sweeps/test_plots.py -q``
"""

from __future__ import annotations

import pytest

from depthbench.sweeps.plots import plot_loss_vs_aspect_ratio

plt = pytest.importorskip("matplotlib.pyplot")


def _row(arch, layers, text, synthetic, best=True):
    return {"arch": arch, "shape": f"s{layers}", "num_layers": layers, "hidden_size": 32, "aspect_ratio": 32 / layers,
            "lr": 1e-3, "params_total": 10, "at_best_lr": best, "eval_text": text, "eval_synthetic": synthetic}


def test_each_panel_draws_the_seed_means_against_d_over_l(tmp_path, monkeypatch):
    rows = [_row("a", 2, 3.0, 2.0), _row("a", 2, 3.4, 2.2), _row("a", 8, 2.6, 1.5), _row("a", 8, 2.8, 1.9),
            _row("a", 8, 9.0, 9.0, best=False), _row("b", 2, 3.1, 2.1), _row("b", 8, 2.9, 1.7)]
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    path = tmp_path / "loss_vs_aspect_ratio.png"
    assert plot_loss_vs_aspect_ratio(rows, str(path), ["eval_synthetic", "eval_text"])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (fig,) = figures
    synthetic, text = fig.axes[:2]
    assert "synthetic depth tasks" in synthetic.get_title() and "held-out text" in text.get_title()
    expected = {"eval_synthetic": {"a": [2.1, 1.7], "b": [2.1, 1.7]}, "eval_text": {"a": [3.2, 2.7], "b": [3.1, 2.9]}}
    for ax, metric in ((synthetic, "eval_synthetic"), (text, "eval_text")):
        lines = {line.get_label().split(" ")[0]: line for line in ax.get_lines()
                 if not line.get_label().startswith("_")}
        assert sorted(lines) == ["a", "b"]
        for arch, means in expected[metric].items():
            assert list(lines[arch].get_xdata()) == [16.0, 4.0]  # d/L of L2 then L8
            assert list(lines[arch].get_ydata()) == pytest.approx(means)
        assert lines["a"].get_label() == "a (n=2 seeds)" and lines["b"].get_label() == "b"
        assert ax.xaxis_inverted() and ax.get_xscale() == "log"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["4\nL8", "16\nL2"]
    assert "mean of 2 seeds" in fig._suptitle.get_text()


def test_nothing_is_drawn_before_a_run_finishes(tmp_path):
    path = tmp_path / "p.png"
    rows = [_row("a", 2, float("nan"), float("nan")), _row("a", 4, 1.0, 1.0, best=False)]
    assert plot_loss_vs_aspect_ratio(rows, str(path), ["eval_text"]) is False
    assert not path.exists()
