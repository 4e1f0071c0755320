"""``depthbench.analysis.usefulness``: affine fits against numpy least squares.

Run with ``python -m pytest tests/analysis/test_usefulness.py -q``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from depthbench.analysis import analyze
from tests.analysis.helpers import (
    MANY_WINDOWS,
    SHAPE,
    build,
    mean_loss,
    run,
)


@pytest.mark.parametrize("arch", ["pre_ln", "hc", "attnres", "moda"])
def test_usefulness_of_an_exactly_affine_block_is_zero(arch):
    model = build(arch)
    with torch.no_grad():  # block 1 adds nothing: an affine (identity / transport / zero-branch) block
        model.model.layers[1].self_attn.o_proj.weight.zero_()
        model.model.layers[1].mlp.down_proj.weight.zero_()
        for residual in (model.model.layers[1].attn_residual, model.model.layers[1].mlp_residual):
            for name in ("dynamic_alpha_scale", "dynamic_beta_scale"):  # HC: the static (affine) transport only
                if hasattr(residual, name):
                    getattr(residual, name).zero_()
    result = analyze(model, MANY_WINDOWS, ["usefulness"], micro_batch_size=4, progress=False)["usefulness"]
    inc = result.values["loss_increase"]
    assert abs(inc[1]) < 1e-4
    assert max(abs(x) for x in inc) > 10 * abs(inc[1])  # the other blocks are not affine


def _block_io(model, ids: torch.Tensor) -> list[tuple[np.ndarray, np.ndarray]]:
    """(input, output) token rows [N, d] of every decoder block (forward hooks; the output before the final norm)."""
    io = []
    hooks = [layer.register_forward_hook(lambda m, args, out: io.append((args[0], out)))
             for layer in model.model.layers]
    with torch.no_grad():
        model(input_ids=ids)
    for h in hooks:
        h.remove()
    return [(x.double().reshape(-1, x.shape[-1]).numpy(), y.double().reshape(-1, y.shape[-1]).numpy()) for x, y in io]


def test_usefulness_fits_on_half_the_windows_and_scores_on_the_other_half():
    model = build("pre_ln")
    windows = MANY_WINDOWS[:8]  # 4 fitting windows = 64 tokens >= d + 1 = 33 unknowns per output channel
    result = analyze(model, windows, ["usefulness"], micro_batch_size=3, progress=False)["usefulness"]
    fit, score = torch.from_numpy(windows[0::2]), torch.from_numpy(windows[1::2])
    base = mean_loss(model, score)
    assert result.values["base_loss"] == pytest.approx(base, rel=1e-6)
    for blk, (x, y) in enumerate(_block_io(model, fit)):
        coef = np.linalg.lstsq(np.c_[x, np.ones(len(x))], y, rcond=None)[0]  # float64 least squares
        w, b = torch.from_numpy(coef[:-1]).float(), torch.from_numpy(coef[-1]).float()
        layer = model.model.layers[blk]
        layer.forward = lambda stream, *args, w=w, b=b, **kwargs: stream @ w + b
        replaced = mean_loss(model, score)
        del layer.forward
        assert result.values["loss_increase"][blk] == pytest.approx(replaced - base, rel=1e-4, abs=1e-6)
    assert result.values["fit_tokens"] == 64 and result.values["score_tokens"] == 4 * 15


@pytest.mark.parametrize("arch", ["hc", "pre_ln"])
def test_usefulness_refuses_a_fit_with_fewer_tokens_than_unknowns(arch):
    model = build(arch)  # HC: D = 4 * 32 = 128; 24 windows of 16 tokens fit on 12 * 16 = 192 tokens; 4 windows: 32
    width = SHAPE["hidden_size"] * (4 if arch == "hc" else 1)
    windows = 2 * -(-(width + 1) // 16) - 1  # ceil((D + 1) / 16) fitting windows, every other one of them
    with pytest.raises(ValueError, match=rf"needs at least {width + 1} tokens to fit.* --num-samples {windows} "):
        run(model, "usefulness")
