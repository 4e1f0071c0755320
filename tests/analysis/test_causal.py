"""``depthbench.analysis.causal``: the causal score against two forwards by hand.

Run with ``python -m pytest tests/analysis/test_causal.py -q``.
"""

from __future__ import annotations

import pytest

from tests.analysis.helpers import (
    IDS,
    SHAPE,
    build,
    run,
)


@pytest.mark.parametrize("arch", ["pre_ln", "hc", "attnres"])
def test_causal_score_matches_two_forwards(arch):
    model = build(arch)
    result = run(model, "causal")
    s = 1
    base = [z.float() for z in model.depth_states(IDS)]
    with model.skip_block(s):
        skipped = [z.float() for z in model.depth_states(IDS)]
    for layer in range(s + 1, SHAPE["num_hidden_layers"]):
        u = base[layer + 1] - base[layer]
        u_skip = skipped[layer + 1] - skipped[layer]
        expected = ((u_skip - u).norm(dim=-1) / u.norm(dim=-1).clamp_min(1e-8)).mean()
        assert result.values["matrix"][s, layer] == pytest.approx(float(expected), rel=1e-4, abs=1e-6)
