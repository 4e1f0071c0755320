"""LNS (``lns``): the 1/sqrt(l) scale (values, buffer semantics, save/load, meta-device init), folding equivalence
with Pre-LN, the constant 1/sqrt(L) variant, pre_ln transfer, interventions, config."""

import math

import pytest
import torch
from depthbench.modeling.modeling_lns import LNSForCausalLM

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
)


def scales(model) -> list[tuple[float, float]]:
    return [(layer.attn_residual.ln_scale, layer.mlp_residual.ln_scale) for layer in model.model.layers]


def test_scale_of_block_l_is_inverse_sqrt_l():
    model = build("lns")
    for block, (attn_scale, mlp_scale) in enumerate(scales(model)):
        expected = torch.tensor(1.0 / math.sqrt(block + 1), dtype=torch.float32)  # 1-based l = block + 1
        assert attn_scale.dtype == torch.float32
        assert torch.equal(attn_scale, expected) and torch.equal(mlp_scale, expected)
    config = build_config("lns", num_hidden_layers=24)
    for l_one_based, value in [(1, 1.0), (2, 0.7071), (4, 0.5), (12, 0.2887), (24, 0.2041)]:
        assert config.lns_scale(l_one_based - 1) == pytest.approx(value, abs=1e-4)
        assert config.lns_scale(l_one_based - 1) == 1.0 / math.sqrt(l_one_based)


def test_scale_is_a_constant_not_a_parameter():
    model = build("lns")
    assert not any("ln_scale" in n for n, _ in model.named_parameters())
    assert not any("ln_scale" in n for n in model.state_dict())  # the state dict stays Llama's
    assert sum(1 for n, _ in model.named_buffers() if n.endswith("ln_scale")) == 2 * TINY["num_hidden_layers"]
    check_parameter_count(model, 0)


def fold_into_pre_ln(lns_model):
    """A Pre-LN model with the LNS weights and both norm gains of block l multiplied by 1/sqrt(l)."""
    pre = build("pre_ln", seed=5)
    assert copy_shared_weights(lns_model, pre) == []
    with torch.no_grad():
        for block, layer in enumerate(pre.model.layers):
            layer.input_layernorm.weight.mul_(lns_model.config.lns_scale(block))
            layer.post_attention_layernorm.weight.mul_(lns_model.config.lns_scale(block))
    return pre


@pytest.mark.parametrize("mode", ["layer", "depth"])
def test_folding_equivalence_with_pre_ln(mode):
    model = build("lns", lns_scale_mode=mode)
    x = ids()
    pre = fold_into_pre_ln(model)
    torch.testing.assert_close(logits(model, x), logits(pre, x), rtol=0, atol=1e-5)
    unfolded = build("pre_ln", seed=5)
    copy_shared_weights(model, unfolded)
    assert not torch.allclose(logits(model, x), logits(unfolded, x), atol=1e-4)  # the scale does something


def test_depth_scaled_variant_uses_constant_inverse_sqrt_depth():
    model = build("lns", lns_scale_mode="depth")
    expected = torch.tensor(1.0 / math.sqrt(TINY["num_hidden_layers"]))
    assert all(torch.equal(a, expected) and torch.equal(m, expected) for a, m in scales(model))


def test_single_block_lns_equals_pre_ln():
    model = build("lns", num_hidden_layers=1)
    pre = build("pre_ln", seed=3, num_hidden_layers=1)
    copy_shared_weights(model, pre)
    torch.testing.assert_close(logits(model, ids()), logits(pre, ids()), rtol=0, atol=0)


def test_scale_survives_save_load_and_meta_device_init(tmp_path):
    model = build("lns")
    x = ids()
    model.save_pretrained(tmp_path / "lns")
    loaded = LNSForCausalLM.from_pretrained(tmp_path / "lns").float().eval()  # meta build + init of the buffers
    for (a0, m0), (a1, m1) in zip(scales(model), scales(loaded)):
        assert torch.equal(a0, a1) and torch.equal(m0, m1)
    torch.testing.assert_close(logits(loaded, x), logits(model, x), rtol=0, atol=0)
    # the scale is recomputed by the init even when the buffers hold garbage
    with torch.no_grad():
        for layer in loaded.model.layers:
            layer.attn_residual.ln_scale.fill_(123.0)
    for layer in loaded.model.layers:
        layer.attn_residual.reset_parameters(loaded.config)
    assert torch.equal(loaded.model.layers[3].attn_residual.ln_scale, torch.tensor(0.5))


def test_loads_pre_ln_checkpoint(tmp_path):
    check_pre_ln_transfer("lns", tmp_path, extra_suffix=None)


def test_swap_moves_ln_scale_with_the_block():
    model = build("lns")
    with model.swap_blocks(0, 3):
        assert torch.equal(model.model.layers[0].attn_residual.ln_scale, torch.tensor(0.5))
        assert torch.equal(model.model.layers[3].mlp_residual.ln_scale, torch.tensor(1.0))
    assert torch.equal(model.model.layers[0].attn_residual.ln_scale, torch.tensor(1.0))
    check_swap_and_skip(model, 0, 3, skip=1)


def test_config_errors_name_field_and_allowed_values():
    with pytest.raises(ValueError, match=r"lns_scale_mode='sqrt'.*one of \['layer', 'depth'\]"):
        build_config("lns", lns_scale_mode="sqrt")
    with pytest.raises(ValueError, match=r"num_hidden_layers=-1"):
        build_config("lns", num_hidden_layers=-1)


def test_card():
    check_card("lns", "2502.05795")
