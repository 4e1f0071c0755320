"""``depthbench.analysis.permutation``: the permutation score against swapped blocks.

Run with ``python -m pytest tests/analysis/test_permutation.py -q``.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.analysis.helpers import (
    IDS,
    build,
    mean_loss,
    run,
)


@pytest.mark.parametrize("arch", ["pre_ln", "hc", "mhc", "attnres", "moda", "denseformer"])
def test_permutation_score_matches_swap_blocks(arch):
    model = build(arch)
    result = run(model, "permutation", anchors=[2])
    base = mean_loss(model, IDS)
    for i, j in [(0, 2), (2, 3)]:
        with model.swap_blocks(i, j):
            swapped = mean_loss(model, IDS)
        assert result.values["matrix"][i, j] == pytest.approx(abs(swapped - base) / base, abs=1e-5)
    assert np.isnan(result.values["matrix"][0, 1])  # anchor 2 only
