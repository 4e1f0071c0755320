"""``depthbench.analysis.token_collapse``: spectrum statistics of known singular values.

Run with ``python -m pytest tests/analysis/test_token_collapse.py -q``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from depthbench.analysis.token_collapse import spectrum_stats
from tests.analysis.helpers import (
    SHAPE,
    build,
    run,
)


def test_token_collapse_ranks_of_known_singular_values():
    s = torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)
    q1, _ = torch.linalg.qr(torch.randn(10, 3, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(6, 3, dtype=torch.float64))
    h = q1 @ torch.diag(s) @ q2.T
    stats = spectrum_stats(torch.linalg.svdvals(h))
    p = np.array([9, 4, 1]) / 14
    assert float(stats["stable_rank"]) == pytest.approx(14 / 9)
    assert float(stats["erank"]) == pytest.approx(math.exp(-(p * np.log(p)).sum()))
    assert float(stats["l1_l2_ratio"]) == pytest.approx(6 / math.sqrt(14))
    result = run(build("hc"), "token_collapse")  # architecture-aware states: n*d wide for HC
    assert len(result.values["erank"]) == SHAPE["num_hidden_layers"] + 1
