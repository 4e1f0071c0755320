"""``depthbench.analysis.depth_mixing``: rows of the AttnRes depth-mixing weights.

Run with ``python -m pytest tests/analysis/test_depth_mixing.py -q``.
"""

from __future__ import annotations

import numpy as np
import pytest

import depthbench
from tests.analysis.helpers import (
    SHAPE,
    build,
    run,
)


def test_depth_mixing_rows_sum_to_one_and_zero_queries_are_uniform():
    model = depthbench.build_model("attnres", **SHAPE).eval()  # zero pseudo-queries: uniform weights
    result = run(model, "depth_mixing")
    m = np.asarray(result.values["matrix"], dtype=float)
    np.testing.assert_allclose(np.nansum(m, axis=1), 1.0, atol=1e-5)
    for row in m:
        k = np.isfinite(row).sum()
        np.testing.assert_allclose(row[:k], 1.0 / k, atol=1e-5)
    assert result.values["dead_fraction"] == 0.0
    with pytest.raises(ValueError, match="attention-residual"):
        run(build("pre_ln"), "depth_mixing")
