"""``depthbench.analysis.hooks``: the streams entering every sublayer's residual module, in execution order,
against the block inputs the model itself reports (``output_hidden_states``), and no hook left behind.

Run with ``python -m pytest tests/analysis/test_hooks.py -q``.
"""

from __future__ import annotations

import torch

from depthbench.analysis.hooks import sublayer_streams
from depthbench.analysis.state import ModelAdapter
from tests.analysis.helpers import IDS, SHAPE, build


def test_sublayer_streams_are_the_residual_inputs_in_execution_order():
    model = build("pre_ln")
    adapter = ModelAdapter(model)
    with torch.no_grad(), sublayer_streams(adapter) as seen:
        hidden = model(input_ids=IDS, output_hidden_states=True).hidden_states
    layers = list(adapter.layers)
    expected = [getattr(layer, name) for layer in layers for name in ("attn_residual", "mlp_residual")]
    assert [module for module, _ in seen] == expected
    assert len(seen) == 2 * SHAPE["num_hidden_layers"]
    for k in range(SHAPE["num_hidden_layers"]):  # a block's first sublayer sees the block input
        torch.testing.assert_close(seen[2 * k][1], hidden[k])
    assert all(not module._forward_pre_hooks for module in expected)  # removed on exit


def test_sublayer_streams_remove_their_hooks_when_the_forward_fails():
    model = build("hc")
    adapter = ModelAdapter(model)
    try:
        with sublayer_streams(adapter):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert all(not getattr(layer, name)._forward_pre_hooks
               for layer in adapter.layers for name in ("attn_residual", "mlp_residual"))
