"""``depthbench.analysis.hc_transport``: the transport product against numpy by hand.

Run with ``python -m pytest tests/analysis/test_hc_transport.py -q``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import depthbench
from depthbench.analysis.state import ModelAdapter
from tests.analysis.helpers import (
    IDS,
    SHAPE,
    build,
    run,
)


def test_hc_transport_static_init_is_identity_and_mhc_is_doubly_stochastic():
    hc = depthbench.build_model("hc", **SHAPE).eval()  # static init: identity transport, erank n
    r = run(hc, "hc_transport")
    assert r.values["product_erank"] == pytest.approx(4.0, abs=1e-6)
    assert np.nanmin(np.asarray(r.values["path_weights"], dtype=float)) >= 0
    mhc = build("mhc")
    r = run(mhc, "hc_transport")
    # a doubly stochastic product keeps the stream average: its top singular value is 1 along 1/sqrt(n)
    assert r.values["spectrum"][0] == pytest.approx(1.0, abs=1e-4)
    assert r.values["direction_overlap"] == pytest.approx(1.0, abs=1e-3)


def _transport_reference(model) -> float:
    """Direction overlap by hand: per token the product of the sublayer transports (float64 numpy), its dominant
    right singular vector v_1, and |<v_1, 1/sqrt(n)>| averaged over tokens."""
    adapter = ModelAdapter(model)
    seen = []
    hooks = [getattr(layer, name).register_forward_pre_hook(lambda m, a, k: seen.append((m, a[0])), with_kwargs=True)
             for layer in adapter.layers for name in ("attn_residual", "mlp_residual")]
    with torch.no_grad():
        model(input_ids=IDS)
    for h in hooks:
        h.remove()
    prod = None
    for module, stream in seen:
        width, _ = adapter.wiring.stream_maps(module, stream)
        n = stream.shape[-2]
        full = np.broadcast_to(width.detach().double().numpy(), (*stream.shape[:2], n + 1, n))
        t = full[..., 1:, :].reshape(-1, n, n)
        prod = t if prod is None else np.einsum("kij,kjl->kil", t, prod)
    _, _, vh = np.linalg.svd(prod)
    return float(np.mean(np.abs(vh[:, 0, :].sum(-1)) / math.sqrt(prod.shape[-1])))


@pytest.mark.parametrize("arch", ["hc", "mhc"])
def test_hc_transport_direction_overlap_is_the_inner_product_with_the_stream_mean(arch):
    model = build(arch, seed=3)
    r = run(model, "hc_transport")
    assert r.values["direction_overlap"] == pytest.approx(_transport_reference(model), abs=1e-6)


def test_hc_transport_direction_orthogonal_to_the_mean_scores_zero():
    model = depthbench.build_model("hc", **SHAPE).eval()
    n = model.config.hc_num_streams
    v = np.zeros(n)
    v[:2] = [1 / math.sqrt(2), -1 / math.sqrt(2)]  # orthogonal to the stream mean 1/sqrt(n)
    t = torch.eye(n, dtype=torch.float64) + 2 * torch.from_numpy(np.outer(v, v))  # top singular direction v
    width = torch.cat([torch.full((1, n), 1.0 / n, dtype=torch.float64), t], dim=0)
    model.model.wiring.stream_maps = lambda module, stream: (width, torch.ones(n, dtype=torch.float64))
    r = run(model, "hc_transport")
    assert r.values["spectrum"][0] == pytest.approx(3.0 ** (2 * SHAPE["num_hidden_layers"]), rel=1e-9)
    assert r.values["direction_overlap"] == pytest.approx(0.0, abs=1e-9)
