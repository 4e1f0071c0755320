"""``depthbench.analysis.pruning``: the loss delta against the loss under a skipped block.

Run with ``python -m pytest tests/analysis/test_pruning.py -q``.
"""

from __future__ import annotations

import pytest

from tests.analysis.helpers import (
    IDS,
    SHAPE,
    build,
    mean_loss,
    run,
)


@pytest.mark.parametrize("arch", ["pre_ln", "attnres", "moda"])
def test_pruning_delta_equals_loss_under_skip_block(arch):
    model = build(arch)
    result = run(model, "pruning")
    base = mean_loss(model, IDS)
    assert result.values["base"] == pytest.approx(base, rel=1e-5)
    for layer in range(SHAPE["num_hidden_layers"]):
        with model.skip_block(layer):
            pruned = mean_loss(model, IDS)
        assert result.values["delta"][layer] == pytest.approx(pruned - base, abs=1e-4)
