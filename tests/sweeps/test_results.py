"""Tests of ``depthbench.sweeps.results``: the seed-spread rule, the loss change from the shallowest to the deepest
shape, per-shape rankings, the reported metrics and their labels, and best points against hand-computed values.

Run: ``python -m pytest tests/sweeps/test_results.py -q``
"""

from __future__ import annotations

import math
import statistics

import pytest

from depthbench.sweeps import results as results_mod


def test_spread_verdict_follows_the_written_rule():
    """Hand-made points: ranges that do not overlap are beyond the spread, touching or overlapping ones within it,
    a single seed gives no verdict; the rule's stated chance for n = 3 is 2 / C(6, 3)."""
    def point(*vals):
        return {"seeds": len(vals), "mean": sum(vals) / len(vals), "min": min(vals), "max": max(vals)}

    shallow = point(3.00, 3.02, 3.05)
    assert results_mod.spread_verdict(shallow, point(2.90, 2.95, 2.99)) == "lower"
    assert results_mod.spread_verdict(shallow, point(3.06, 3.10, 3.20)) == "higher"
    assert results_mod.spread_verdict(shallow, point(2.90, 2.95, 3.00)) == "within"  # touching at 3.00
    assert results_mod.spread_verdict(shallow, point(2.80, 3.01, 3.30)) == "within"
    assert results_mod.spread_verdict(shallow, point(2.5)) == "one seed"
    assert "10 % for n = 3" in results_mod.SPREAD_RULE and 2 / math.comb(6, 3) == 0.1
    rows = [{"arch": "a", "shape": f"s{L}", "num_layers": L, "hidden_size": 8, "aspect_ratio": 8 / L, "lr": 1e-3,
             "params_total": 10, "at_best_lr": True, "eval_loss": v} for L, vals in ((2, (3.0, 3.1, 3.2)),
                                                                                   (8, (2.7, 2.8, 2.9)))
            for v in vals]
    (change,) = results_mod.loss_changes(rows, ["eval_loss"])
    assert change["change"] == pytest.approx(-0.3) and change["verdict"] == "lower"
    assert change["deep"]["std"] == pytest.approx(0.1) and change["shallow"]["seeds"] == 3


def test_architectures_at_one_shape_are_ranked_with_the_spread_rule():
    def rows(arch, vals):
        return [{"arch": arch, "shape": "s4", "num_layers": 4, "hidden_size": 8, "aspect_ratio": 2.0, "lr": 1e-3,
                 "params_total": 10, "at_best_lr": True, "eval_loss": v} for v in vals]

    table = rows("a", (3.0, 3.1, 3.2)) + rows("b", (2.0, 2.1, 2.2)) + rows("c", (3.15, 3.3, 3.4))
    (ranking,) = results_mod.shape_rankings(table, ["eval_loss"])
    assert [arch for arch, _ in ranking["order"]] == ["b", "a", "c"]
    assert ranking["verdicts"] == ["lower", "within"]  # b's range is below a's; a and c overlap (3.15-3.2)
    assert results_mod.shape_rankings(rows("a", (1.0,)), ["eval_loss"]) == []  # one architecture: nothing to rank


def test_metric_order_and_labels():
    rows = [{"eval_text": 1.0, "eval_synthetic": 2.0, "eval_loss": 1.5}]
    assert results_mod.result_metrics(rows) == ["eval_synthetic", "eval_text", "eval_loss"]
    assert results_mod.result_metrics([{"eval_heldout": 1.0, "eval_loss": 1.0}]) == ["eval_loss"]
    assert results_mod._split_column("eval") == "eval_heldout"
    assert results_mod._split_column("eval_text") == "eval_text" and results_mod._split_column("val") == "eval_val"


def test_best_points_are_per_shape_at_the_best_lr_from_shallow_to_deep():
    """Mean, min, max and sample std of the seeds at the best learning rate (statistics.stdev), rows off the best
    lr or with a non-finite metric ignored, one seed has no std, shapes ordered shallow (large d/L) to deep."""
    def row(shape, layers, v, best=True):
        return {"arch": "a", "shape": shape, "num_layers": layers, "hidden_size": 16, "aspect_ratio": 16 / layers,
                "lr": 1e-3, "params_total": 10, "at_best_lr": best, "eval_loss": v}

    rows = [row("s8", 8, 2.0), row("s8", 8, 2.5), row("s8", 8, 4.0), row("s8", 8, 9.0, best=False),
            row("s8", 8, float("nan")), row("s2", 2, 3.25)]
    pts = results_mod.best_points(rows)["a"]
    assert [p["shape"] for p in pts] == ["s2", "s8"]
    deep = pts[1]
    assert deep["seeds"] == 3 and deep["min"] == 2.0 and deep["max"] == 4.0
    assert deep["mean"] == pytest.approx(statistics.mean([2.0, 2.5, 4.0]))
    assert deep["std"] == pytest.approx(statistics.stdev([2.0, 2.5, 4.0]))
    assert pts[0]["seeds"] == 1 and pts[0]["mean"] == 3.25 and pts[0]["std"] is None


def test_metric_labels_name_each_split():
    assert results_mod.metric_label("eval_loss") == "mean of the eval splits"
    assert results_mod.metric_label("eval_synthetic") == "synthetic depth tasks"
    assert results_mod.metric_label("eval_text") == "held-out text"
    assert results_mod.metric_label("eval_heldout") == "held-out"
    assert results_mod.metric_label("eval_wiki") == "wiki"
