"""Post-LN (``post_ln``): hand-written forward, unit-RMS block outputs, pre_ln transfer, interventions, config."""

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
    copy_shared_weights,
    ids,
    logits,
    post_ln_update,
    reference_logits,
    token_rms,
)


def test_matches_hand_written_post_ln():
    model = build("post_ln")
    x = ids()
    torch.testing.assert_close(logits(model, x), reference_logits(model, x, post_ln_update), rtol=1e-4, atol=1e-5)


def test_differs_from_pre_ln_on_same_weights():
    post, pre = build("post_ln"), build("pre_ln")
    assert copy_shared_weights(post, pre) == []
    assert not torch.allclose(logits(post, ids()), logits(pre, ids()), atol=1e-3)


@pytest.mark.parametrize("embedding_scale", [1.0, 100.0])
def test_block_outputs_have_unit_rms(embedding_scale):
    model = build("post_ln")
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(embedding_scale)
    states = model.depth_states(ids())
    for z in states[1:]:  # z_0 is the raw embedding; every block output is N(.) with gamma = 1
        torch.testing.assert_close(token_rms(z), torch.ones_like(token_rms(z)), rtol=0, atol=1e-3)
    assert not torch.allclose(token_rms(states[0]), torch.ones_like(token_rms(states[0])), atol=1e-2)


def test_parameter_count_equals_pre_ln():
    model = build("post_ln")
    check_parameter_count(model, 0)
    assert model.config.parameter_counts() == build_config("pre_ln", **TINY).parameter_counts()


def test_loads_pre_ln_checkpoint(tmp_path):
    check_pre_ln_transfer("post_ln", tmp_path, extra_suffix=None)


def test_swap_and_skip_blocks():
    check_swap_and_skip(build("post_ln"), 0, 2, skip=1)


def test_config_errors_name_field_and_allowed_values():
    with pytest.raises(ValueError, match=r"norm_type='batchnorm'.*one of \['rmsnorm', 'layernorm'\]"):
        build_config("post_ln", norm_type="batchnorm")
    with pytest.raises(ValueError, match=r"num_hidden_layers=-2.*integer >= 1"):
        build_config("post_ln", num_hidden_layers=-2)


def test_card():
    check_card("post_ln", "1706.03762")
