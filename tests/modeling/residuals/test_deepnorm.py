"""DeepNorm (``deepnorm``): alpha/beta constants, beta-scaled init statistics, hand-written forward, equivalence
with Post-LN at alpha = beta = 1, the LayerNorm default, pre_ln transfer, interventions, config."""

import math

import pytest
import torch
from depthbench.modeling.norms import LayerNorm, RMSNorm

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
    reference_logits,
    token_rms,
)

# N (blocks) -> (alpha, beta) = ((2N)^(1/4), (8N)^(-1/4)), the decoder-only constants of DeepNet (arXiv 2203.00555).
TABLE = {6: (1.8612, 0.3799), 12: (2.2134, 0.3195), 24: (2.6321, 0.2686), 32: (2.8284, 0.2500), 48: (3.1302, 0.2259)}
TRUNC_STD = 0.98658  # std of a normal truncated at +-3 std, relative to the untruncated std


@pytest.mark.parametrize("n_blocks", sorted(TABLE))
def test_alpha_beta_match_the_paper(n_blocks):
    config = build_config("deepnorm", num_hidden_layers=n_blocks)
    alpha, beta = TABLE[n_blocks]
    assert config.resolved_alpha == pytest.approx(alpha, abs=1e-4)
    assert config.resolved_beta == pytest.approx(beta, abs=1e-4)
    assert config.resolved_alpha == (2 * n_blocks) ** 0.25 and config.resolved_beta == (8 * n_blocks) ** -0.25


def test_alpha_and_beta_overrides():
    config = build_config("deepnorm", deepnorm_alpha=3.0, deepnorm_beta=0.5)
    assert (config.resolved_alpha, config.resolved_beta) == (3.0, 0.5)
    model = build("deepnorm", deepnorm_alpha=3.0)
    assert all(r.alpha == 3.0 for layer in model.model.layers for r in (layer.attn_residual, layer.mlp_residual))


@pytest.mark.parametrize("base_init", ["normal", "xavier"])
def test_init_std_of_beta_scaled_matrices(base_init):
    model = build("deepnorm", hidden_size=64, intermediate_size=176, num_hidden_layers=2, deepnorm_base_init=base_init)
    beta = model.config.resolved_beta
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for linear in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj):
            if base_init == "xavier":
                base = math.sqrt(2.0 / (linear.in_features + linear.out_features))
            else:
                base = 0.02
            gain = 1.0 if linear in (attn.q_proj, attn.k_proj) else beta
            expected = gain * base * TRUNC_STD
            assert linear.weight.std().item() == pytest.approx(expected, rel=0.05), linear
    for weight in (model.model.embed_tokens.weight, model.lm_head.weight):  # embedding and head keep 0.02
        assert weight.std().item() == pytest.approx(0.02 * TRUNC_STD, rel=0.05)


def deepnorm_update(alpha):
    return lambda block, sub, x, norm, branch, residual: norm(alpha * x + branch(x))


def test_matches_hand_written_deepnorm():
    model = build("deepnorm")
    assert isinstance(model.model.layers[0].input_layernorm, LayerNorm) and isinstance(model.model.norm, LayerNorm)
    x = ids()
    expected = reference_logits(model, x, deepnorm_update(model.config.resolved_alpha))
    torch.testing.assert_close(logits(model, x), expected, rtol=1e-4, atol=1e-5)


def test_alpha_one_without_beta_init_equals_post_ln():
    model = build("deepnorm", deepnorm_alpha=1.0, deepnorm_beta=1.0, norm_type="rmsnorm")
    post = build("post_ln", seed=3)
    assert copy_shared_weights(model, post) == []
    torch.testing.assert_close(logits(model, ids()), logits(post, ids()), rtol=0, atol=0)
    # beta = 1 really turns the scaled init off: the same seed gives Post-LN's weights
    torch.testing.assert_close(build("post_ln").model.layers[1].mlp.down_proj.weight,
                               model.model.layers[1].mlp.down_proj.weight, rtol=0, atol=0)


def test_norm_type_default_and_option():
    assert build_config("deepnorm").norm_type == "layernorm"
    model = build("deepnorm", norm_type="rmsnorm")
    assert isinstance(model.model.layers[0].input_layernorm, RMSNorm) and isinstance(model.model.norm, RMSNorm)
    with pytest.raises(ValueError, match=r"norm_type='instancenorm'.*one of \['rmsnorm', 'layernorm'\]"):
        build_config("deepnorm", norm_type="instancenorm")


def test_block_outputs_have_unit_rms():
    states = build("deepnorm").depth_states(ids())
    for z in states[1:]:
        torch.testing.assert_close(token_rms(z), torch.ones_like(token_rms(z)), rtol=0, atol=1e-3)


def test_parameter_count_and_pre_ln_transfer(tmp_path):
    check_parameter_count(build("deepnorm"), 0)
    check_pre_ln_transfer("deepnorm", tmp_path, extra_suffix=None)


def test_swap_and_skip_blocks():
    check_swap_and_skip(build("deepnorm"), 1, 3, skip=0)


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("deepnorm_alpha", 0.0, "positive number"),
        ("deepnorm_alpha", -1.0, "positive number"),
        ("deepnorm_beta", -0.5, "positive number"),
        ("deepnorm_base_init", "kaiming", r"one of \['normal', 'xavier'\]"),
        ("num_hidden_layers", -4, "integer >= 1"),
    ],
)
def test_config_errors_name_field_and_allowed_values(field, value, allowed):
    with pytest.raises(ValueError, match=rf"{field}={value!r}.*{allowed}"):
        build_config("deepnorm", **{field: value})


def test_card():
    check_card("deepnorm", "2203.00555")


def test_final_norm_type_can_differ_from_the_block_norms(tmp_path):
    """``deepnorm_final_norm_type="rmsnorm"``: LayerNorm blocks with an RMSNorm final norm (the study's checkpoints),
    equal to a hand-written forward with those norms; saved and loaded back."""
    model = build("deepnorm", deepnorm_final_norm_type="rmsnorm")
    assert isinstance(model.model.norm, RMSNorm)
    assert all(isinstance(m, LayerNorm) for layer in model.model.layers
               for m in (layer.input_layernorm, layer.post_attention_layernorm))
    with torch.no_grad():
        model.model.norm.weight.uniform_(0.5, 1.5)
    x = ids()
    hidden = model.model(x).last_hidden_state
    pre_norm = model.model(x, output_hidden_states=True).hidden_states
    assert pre_norm[-1].shape == hidden.shape
    # the final hidden state is an RMSNorm (not a LayerNorm) of the last block's output
    last = model.model.layers[-1]
    captured = {}
    handle = last.register_forward_hook(lambda mod, args, out: captured.setdefault("out", out))
    model.model(x)
    handle.remove()
    h = captured["out"].float()
    expected = model.model.norm.weight * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + model.config.rms_norm_eps)
    assert (hidden - expected).abs().max() < 1e-5
    model.save_pretrained(tmp_path)
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert isinstance(loaded.model.norm, RMSNorm) and torch.equal(logits(loaded, x), logits(model, x))
    with pytest.raises(ValueError, match="deepnorm_final_norm_type"):
        build_config("deepnorm", deepnorm_final_norm_type="batchnorm")
