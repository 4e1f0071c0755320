"""Mix-LN (``mix_ln``): k = floor(fraction * L), the fraction-0 / fraction-1 equivalences with Pre-LN / Post-LN,
hand-written forward, unit-RMS Post-LN blocks, pre_ln transfer, interventions, config."""

import pytest
import torch

from depthbench.registry import build_config
from tests.modeling.residuals.norm_placement_helpers import (
    build,
    check_card,
    check_parameter_count,
    check_pre_ln_transfer,
    check_swap_and_skip,
    copy_shared_weights,
    ids,
    logits,
    post_ln_update,
    pre_ln_update,
    reference_logits,
    token_rms,
)


@pytest.mark.parametrize(("n_blocks", "k"), [(12, 3), (24, 6), (32, 8), (4, 1), (3, 0)])
def test_number_of_post_ln_blocks(n_blocks, k):
    assert build_config("mix_ln", num_hidden_layers=n_blocks).num_post_ln_blocks == k


def test_fraction_rounding():
    assert build_config("mix_ln", num_hidden_layers=10, mix_ln_fraction=0.3).num_post_ln_blocks == 3
    assert build_config("mix_ln", num_hidden_layers=10, mix_ln_fraction=0.29).num_post_ln_blocks == 2
    assert build_config("mix_ln", num_hidden_layers=7, mix_ln_fraction=1).num_post_ln_blocks == 7


@pytest.mark.parametrize(("fraction", "other"), [(0.0, "pre_ln"), (1.0, "post_ln")])
def test_fraction_extremes_equal_pre_ln_and_post_ln(fraction, other):
    model = build("mix_ln", mix_ln_fraction=fraction)
    reference = build(other, seed=7)
    assert copy_shared_weights(model, reference) == []
    torch.testing.assert_close(logits(model, ids()), logits(reference, ids()), rtol=0, atol=0)


def test_matches_hand_written_mix_ln():
    model = build("mix_ln", mix_ln_fraction=0.5)  # blocks 0, 1 Post-LN; 2, 3 Pre-LN
    k = model.config.num_post_ln_blocks
    assert k == 2

    def update(block, *args):
        return (post_ln_update if block < k else pre_ln_update)(block, *args)

    x = ids()
    torch.testing.assert_close(logits(model, x), reference_logits(model, x, update), rtol=1e-4, atol=1e-5)


def test_post_ln_blocks_have_unit_rms_outputs():
    model = build("mix_ln", mix_ln_fraction=0.5)
    with torch.no_grad():  # any input scale: the first k blocks end in a norm
        model.model.embed_tokens.weight.mul_(50.0)
        model.model.layers[3].mlp.down_proj.weight.mul_(1000.0)  # a Pre-LN block's output is not normalised
    states = model.depth_states(ids())
    for z in states[1:3]:
        torch.testing.assert_close(token_rms(z), torch.ones_like(token_rms(z)), rtol=0, atol=1e-3)
    assert not torch.allclose(token_rms(states[0]), torch.ones_like(token_rms(states[0])), atol=1e-1)
    assert not torch.allclose(token_rms(states[4]), torch.ones_like(token_rms(states[4])), atol=1e-1)


def test_parameter_count_and_pre_ln_transfer(tmp_path):
    check_parameter_count(build("mix_ln"), 0)
    check_pre_ln_transfer("mix_ln", tmp_path, extra_suffix=None)


def test_swap_and_skip_blocks():
    check_swap_and_skip(build("mix_ln", mix_ln_fraction=0.5), 1, 2, skip=1)


@pytest.mark.parametrize("value", [-0.1, 1.5, "quarter", None])
def test_config_rejects_fraction_outside_unit_interval(value):
    with pytest.raises(ValueError, match=rf"mix_ln_fraction={value!r}.*in \[0, 1\]"):
        build_config("mix_ln", mix_ln_fraction=value)


def test_card():
    check_card("mix_ln", "2412.13795")
