"""``depthbench.analysis`` (``analyze``): options checked before anything is computed.

Run with ``python -m pytest tests/analysis/test_init.py -q``.
"""

from __future__ import annotations

import numpy as np
import pytest

from depthbench.analysis import analyze
from tests.analysis.helpers import (
    SHAPE,
    WINDOWS,
    build,
)


def test_windows_past_the_model_positions_are_refused():
    long = np.random.default_rng(2).integers(0, 96, size=(2, SHAPE["max_position_embeddings"] + 1))
    with pytest.raises(ValueError, match=r"65 tokens .* max_position_embeddings=64 .* --seq-len to 64"):
        analyze(build("pre_ln"), long, ["angular"], progress=False)
    with pytest.raises(ValueError, match=r"--anchor-layer 4 out of range: the model has blocks 0..3"):
        analyze(build("pre_ln"), WINDOWS, ["angular", "permutation"], progress=False,
                options={"permutation": {"anchors": [4]}})
