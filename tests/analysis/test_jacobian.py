"""``depthbench.analysis.jacobian``: the deviation of an exactly linear block, progress, refusals.

Run with ``python -m pytest tests/analysis/test_jacobian.py -q``.
"""

from __future__ import annotations

import io
import math

import pytest
import torch

from depthbench.analysis import analyze
from tests.analysis.helpers import (
    SHAPE,
    WINDOWS,
    build,
    run,
)


@pytest.mark.parametrize("mode", ["per_token", "averaged_total"])
def test_jacobian_of_an_exactly_linear_block(mode):
    model = build("pre_ln")
    d = SHAPE["hidden_size"]
    a = torch.eye(d) + 0.1 * torch.randn(d, d, generator=torch.Generator().manual_seed(1))
    layer = model.model.layers[2]
    layer.forward = lambda stream, *args, **kwargs: stream @ a.T
    result = run(model, "jacobian", mode=mode, positions=3)
    expected = float(torch.linalg.matrix_norm(a - torch.eye(d)) / math.sqrt(d))
    assert result.values["deviation"][2] == pytest.approx(expected, rel=1e-5)
    assert result.values["deviation"][0] > 0


def test_jacobian_progress_moves_per_window_position_and_block(monkeypatch):
    import tqdm.auto

    bars = []

    class Recorder(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "disable": False, "file": io.StringIO()})
            self.updates = 0
            bars.append(self)

        def update(self, n=1):
            self.updates += 1
            return super().update(n)

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorder)
    monkeypatch.setattr("depthbench.progress.progress_bar", Recorder)  # the analyses' bars come from there
    analyze(build("pre_ln"), WINDOWS, ["jacobian"], micro_batch_size=2, progress=True,
            options={"jacobian": {"positions": 3, "windows": 3}})
    (bar,) = [b for b in bars if b.desc.startswith("jacobian")]
    expected = 3 * 3 * SHAPE["num_hidden_layers"]  # windows x positions x blocks, each one Jacobian
    assert bar.total == expected and bar.n == expected and bar.updates == expected  # a total: tqdm shows the ETA


def test_jacobian_refuses_structured_streams_and_wide_streams():
    with pytest.raises(ValueError, match="structured stream"):
        run(build("attnres"), "jacobian")
    with pytest.raises(ValueError, match="size limit"):
        run(build("hc"), "jacobian", max_dim=64)
