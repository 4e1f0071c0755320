"""KEEL (``keel``): alpha (default 2L, configurable), the reference's block-0 special case, hand-written forward,
extra-parameter count d(2L-1), pre_ln transfer, interventions (block 0's missing norm stays put), config."""

import pytest
import torch

from depthbench.registry import build_config
from tests.modeling.residuals.norm_placement_helpers import (
    TINY,
    build,
    check_card,
    check_parameter_count,
    check_pre_ln_transfer,
    check_swap_and_skip,
    ids,
    logits,
    norm_fn,
    reference_logits,
    token_rms,
)


def keel_update(alpha):
    def update(block, sub, x, norm, branch, residual):
        if block == 0 and sub == 0:
            return x + branch(norm(x))  # plain Pre-LN
        a = 1.0 if block == 0 else alpha
        return norm_fn(residual.out_norm)(a * x + branch(norm(x)))

    return update


def test_alpha_defaults_to_twice_the_depth_and_is_configurable():
    assert build_config("keel", num_hidden_layers=24).resolved_alpha == 48.0
    assert build_config("keel", num_hidden_layers=24, keel_alpha=24).resolved_alpha == 24.0
    model = build("keel", keel_alpha=5.0)
    assert [(r.alpha) for layer in model.model.layers for r in (layer.attn_residual, layer.mlp_residual)] == [
        1.0, 1.0, *[5.0] * (2 * TINY["num_hidden_layers"] - 2)
    ]


@pytest.mark.parametrize("keel_alpha", [None, 3.0])
def test_matches_hand_written_keel(keel_alpha):
    model = build("keel", keel_alpha=keel_alpha)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "out_norm" in name:
                p.uniform_(0.5, 1.5)
    x = ids()
    expected = reference_logits(model, x, keel_update(model.config.resolved_alpha))
    torch.testing.assert_close(logits(model, x), expected, rtol=1e-4, atol=1e-5)


def test_block_zero_follows_the_reference():
    layers = build("keel").model.layers
    assert layers[0].attn_residual.out_norm is None  # block-0 attention: Pre-LN, no post-norm
    assert layers[0].mlp_residual.out_norm is not None and layers[0].mlp_residual.alpha == 1.0
    assert all(r.out_norm is not None for layer in layers[1:] for r in (layer.attn_residual, layer.mlp_residual))


def test_extra_parameters_and_their_init():
    d, n_layers = TINY["hidden_size"], TINY["num_hidden_layers"]
    model = build("keel")
    check_parameter_count(model, d * (2 * n_layers - 1))
    gains = [p for n, p in model.named_parameters() if "out_norm" in n]
    assert len(gains) == 2 * n_layers - 1 and all(torch.equal(g, torch.ones_like(g)) for g in gains)


def test_sublayer_outputs_have_unit_rms():
    # eps made negligible: block 0's MLP normalises the embedding-sized stream (RMS ~0.02)
    states = build("keel", rms_norm_eps=1e-12).depth_states(ids())
    for z in states[1:]:
        torch.testing.assert_close(token_rms(z), torch.ones_like(token_rms(z)), rtol=0, atol=1e-3)


def test_loads_pre_ln_checkpoint(tmp_path):
    check_pre_ln_transfer("keel", tmp_path, extra_suffix="out_norm.weight")


def test_swap_keeps_block_zero_structure():
    model = build("keel")
    with torch.no_grad():
        model.model.layers[2].attn_residual.out_norm.weight.fill_(3.0)  # has no partner in block 0
        model.model.layers[2].mlp_residual.out_norm.weight.fill_(2.0)
    with model.swap_blocks(0, 2):
        assert model.model.layers[0].attn_residual.out_norm is None
        assert torch.equal(model.model.layers[2].attn_residual.out_norm.weight, torch.full((TINY["hidden_size"],), 3.0))
        assert torch.equal(model.model.layers[0].mlp_residual.out_norm.weight, torch.full((TINY["hidden_size"],), 2.0))
    check_swap_and_skip(model, 0, 2, skip=3)


@pytest.mark.parametrize("value", [0, -2.0, "big", True])
def test_config_rejects_non_positive_alpha(value):
    with pytest.raises(ValueError, match=rf"keel_alpha={value!r}.*positive number"):
        build_config("keel", keel_alpha=value)


def test_card():
    check_card("keel", "2601.19895")
