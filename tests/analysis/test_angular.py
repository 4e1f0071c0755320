"""``depthbench.analysis.angular``: the angular distance against numpy on the hidden states.

Run with ``python -m pytest tests/analysis/test_angular.py -q``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.analysis.helpers import (
    IDS,
    SHAPE,
    build,
    llama,
    run,
)


@pytest.mark.parametrize("kind", ["pre_ln", "llama"])
def test_angular_distance_matches_numpy_on_hidden_states(kind):
    model = llama() if kind == "llama" else build("pre_ln")
    result = run(model, "angular")
    with torch.no_grad():
        hs = [h.double().numpy().reshape(-1, SHAPE["hidden_size"])
              for h in model(input_ids=IDS, output_hidden_states=True).hidden_states]
    L = SHAPE["num_hidden_layers"]
    for i in range(L):  # hidden_states[0..L-1] are the block inputs (the last one is after the final norm)
        for j in range(i + 1, L):
            a, b = hs[i], hs[j]
            cos = np.clip((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1), -1, 1)
            assert result.values["matrix"][i, j] == pytest.approx(np.mean(np.arccos(cos)) / np.pi, abs=1e-6)


def test_angular_distance_at_the_last_token_as_gromov_et_al():
    model = build("pre_ln")
    result = run(model, "angular", tokens="last")
    assert result.values["tokens"] == "last"
    with torch.no_grad():
        hs = [h[:, -1].double().numpy() for h in model(input_ids=IDS, output_hidden_states=True).hidden_states]
    for i in range(SHAPE["num_hidden_layers"]):
        for j in range(i + 1, SHAPE["num_hidden_layers"]):
            a, b = hs[i], hs[j]  # one row per window: its final token
            cos = np.clip((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1), -1, 1)
            assert result.values["matrix"][i, j] == pytest.approx(np.mean(np.arccos(cos)) / np.pi, abs=1e-6)
    assert run(model, "angular").values["tokens"] == "all"  # the study's default: every token
    with pytest.raises(ValueError, match="'all' .* or 'last'"):
        run(model, "angular", tokens="first")
