"""``depthbench.analysis.state``: batched interventions equal sequential ones and every intervention restores
the model exactly.

Run with ``python -m pytest tests/analysis/test_state.py -q``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from depthbench.analysis import analyze
from depthbench.analysis.state import ModelAdapter
from tests.analysis.helpers import (
    IDS,
    MANY_WINDOWS,
    build,
    llama,
    run,
    state_snapshot,
)


@pytest.mark.parametrize("metric", ["causal", "permutation", "pruning"])
@pytest.mark.parametrize("arch", ["pre_ln", "hc", "attnres", "moda", "keel", "lns"])
def test_batched_interventions_equal_sequential_and_restore_the_model(arch, metric):
    model = build(arch)
    before = state_snapshot(model)
    with torch.no_grad():
        logits = model(input_ids=IDS).logits
    batched = run(model, metric, batched=True)
    sequential = run(model, metric, batched=False)
    key = "delta" if metric == "pruning" else "matrix"
    np.testing.assert_allclose(np.asarray(batched.values[key], dtype=float),
                               np.asarray(sequential.values[key], dtype=float), rtol=1e-4, atol=1e-6)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    with torch.no_grad():
        assert torch.equal(model(input_ids=IDS).logits, logits)


def test_usefulness_and_llama_swaps_restore_the_model():
    for model, metrics in ((build("attnres"), ["usefulness"]), (llama(), ["permutation", "usefulness", "causal"])):
        before = state_snapshot(model)
        analyze(model, MANY_WINDOWS[:8], metrics, micro_batch_size=2, progress=False)
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
        assert not any("forward" in vars(layer) for layer in ModelAdapter(model).layers)
