"""``depthbench.analysis.logit_lens``: the last state is the model output, the Llama fallback by hand.

Run with ``python -m pytest tests/analysis/test_logit_lens.py -q``.
"""

from __future__ import annotations

import pytest
import torch

from depthbench.analysis.state import token_losses
from tests.analysis.helpers import (
    IDS,
    build,
    llama,
    mean_loss,
    run,
)
from tests.helpers import ARCH_IDS


@pytest.mark.parametrize("arch", ARCH_IDS + ["hc:sum_norm"])
def test_logit_lens_last_state_is_the_model_output(arch):
    arch, _, readout = arch.partition(":")
    model = build(arch, **({"hc_readout": readout} if readout else {}))
    result = run(model, "logit_lens")
    assert result.values["kl_to_final"][-1] == 0.0
    assert result.values["top5_overlap"][-1] == 1.0
    assert result.values["final_logits_max_abs_diff"] == 0.0
    assert result.values["final_loss"] == pytest.approx(mean_loss(model, IDS), rel=1e-5)


def test_llama_fallback_logit_lens_and_pruning():
    model = llama()
    lens = run(model, "logit_lens")
    assert lens.values["kl_to_final"][-1] == 0.0
    with torch.no_grad():  # hand logit lens at state 1: final norm + head on hidden_states[1]
        hs = model(input_ids=IDS, output_hidden_states=True).hidden_states
        logits = model.lm_head(model.model.norm(hs[1])).float()
    assert lens.values["early_exit_ce"][1] == pytest.approx(float(token_losses(logits, IDS).mean()), rel=1e-5)
    pruning = run(model, "pruning")
    layer = model.model.layers[1]
    layer.forward = lambda hidden_states, *a, **k: hidden_states
    pruned = mean_loss(model, IDS)
    del layer.forward
    assert pruning.values["delta"][1] == pytest.approx(pruned - mean_loss(model, IDS), abs=1e-4)
