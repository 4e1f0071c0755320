"""depth-muP (``depth_mup``, a = 1/2) and CompleteP (``completep``, a = 1): branch multiplier r = (L / L_base)^(-a),
hand-written forward, equivalence with Pre-LN at L = L_base, optimizer rules, depth-width init, pre_ln transfer,
interventions, config. Every test runs for both ids."""

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
    reference_logits,
)

CASES = [("depth_mup", 0.5, "2310.02244"), ("completep", 1.0, "2505.01618")]


@pytest.fixture(params=CASES, ids=[c[0] for c in CASES])
def case(request):
    return request.param


def test_multiplier_at_l16_lbase4(case):
    ARCH, EXPONENT, _ = case
    config = build_config(ARCH, num_hidden_layers=16, depth_scaling_base_depth=4)
    assert config.residual_multiplier == 4**-EXPONENT  # 0.5 (depth-muP) / 0.25 (CompleteP)
    assert build_config(ARCH).depth_scaling_base_depth == 24
    depth_for_half = round(24 * 2 ** (1 / EXPONENT))  # default L_base = 24
    assert build_config(ARCH, num_hidden_layers=depth_for_half).residual_multiplier == 0.5


def test_matches_hand_written_forward(case):
    ARCH, EXPONENT, _ = case
    model = build(ARCH, depth_scaling_base_depth=1)  # L = 4: r = 4^(-a)
    r = model.config.residual_multiplier
    assert r == 4 ** -EXPONENT

    def update(block, sub, x, norm, branch, residual):
        return x + r * branch(norm(x))

    x = ids()
    torch.testing.assert_close(logits(model, x), reference_logits(model, x, update), rtol=1e-4, atol=1e-5)


def test_equals_pre_ln_at_base_depth(case):
    ARCH, _, _ = case
    model = build(ARCH, depth_scaling_base_depth=4)
    pre = build("pre_ln", seed=4)
    assert copy_shared_weights(model, pre) == []
    torch.testing.assert_close(logits(model, ids()), logits(pre, ids()), rtol=0, atol=0)


def test_optimizer_rules_depth_only(case):
    ARCH, EXPONENT, _ = case
    config = build_config(ARCH, num_hidden_layers=16, depth_scaling_base_depth=4)
    (rule,) = config.optimizer_rules()
    assert rule["lr"] == pytest.approx(4 ** (EXPONENT - 1)) and rule["eps"] == pytest.approx(4 ** -EXPONENT)
    assert rule["weight_decay"] == 1.0


def test_depth_width_init_and_output_multiplier(case):
    ARCH, _, _ = case
    model = build(ARCH, hidden_size=64, intermediate_size=176, num_hidden_layers=2, depth_scaling_axis="depth-width",
                  depth_scaling_base_width=256)  # m_N = 1/4
    m_n = model.config.width_multiplier
    assert m_n == 0.25
    trunc = 0.98658
    assert model.model.layers[0].mlp.up_proj.weight.std().item() == pytest.approx(0.02 * m_n**-0.5 * trunc, rel=0.05)
    assert model.lm_head.weight.std().item() == pytest.approx(0.02 * m_n**0.5 * trunc, rel=0.05)
    assert model.model.embed_tokens.weight.std().item() == pytest.approx(0.02 * trunc, rel=0.05)
    x = ids()
    z_last = model.depth_states(x)[-1]  # stream after the last block
    with torch.no_grad():
        expected = model.lm_head(model.model.norm(z_last)) / m_n  # muP output multiplier m_N^(-1)
    torch.testing.assert_close(logits(model, x), expected, rtol=1e-5, atol=1e-6)


def test_parameter_count_and_pre_ln_transfer(case, tmp_path):
    ARCH, _, _ = case
    check_parameter_count(build(ARCH), 0)
    check_pre_ln_transfer(ARCH, tmp_path, extra_suffix=None)


def test_swap_and_skip_blocks(case):
    ARCH, _, _ = case
    check_swap_and_skip(build(ARCH, depth_scaling_base_depth=1), 0, 1, skip=2)


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("depth_scaling_base_depth", 0, "integer >= 1"),
        ("depth_scaling_base_depth", -24, "integer >= 1"),
        ("depth_scaling_base_width", 0, "integer >= 1"),
        ("depth_scaling_axis", "width-only", r"one of \['depth-only', 'depth-width'\]"),
    ],
)
def test_config_errors_name_field_and_allowed_values(case, field, value, allowed):
    ARCH, _, _ = case
    with pytest.raises(ValueError, match=rf"{field}={value!r}.*{allowed}"):
        build_config(ARCH, **{field: value})


def test_card(case):
    ARCH, _, arxiv = case
    check_card(ARCH, arxiv)
