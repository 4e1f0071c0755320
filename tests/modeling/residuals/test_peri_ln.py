"""Peri-LN (``peri_ln``): hand-written forward, extra output norms (count, init, learnability), embedding-norm
option, pre_ln transfer, interventions, config."""

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


def peri_ln_update(block, sub, x, norm, branch, residual):
    return x + norm_fn(residual.out_norm)(branch(norm(x)))


@pytest.mark.parametrize("embedding_norm", [False, True])
def test_matches_hand_written_peri_ln(embedding_norm):
    model = build("peri_ln", peri_ln_embedding_norm=embedding_norm)
    with torch.no_grad():  # non-trivial output-norm gains so that a missing/misplaced norm shows
        for name, p in model.named_parameters():
            if "out_norm" in name or "embedding_norm" in name:
                p.uniform_(0.5, 1.5)
    enter = norm_fn(model.model.wiring.embedding_norm) if embedding_norm else None
    x = ids()
    expected = reference_logits(model, x, peri_ln_update, enter=enter)
    torch.testing.assert_close(logits(model, x), expected, rtol=1e-4, atol=1e-5)


def test_extra_parameters_are_two_norms_per_block():
    d, n_layers = TINY["hidden_size"], TINY["num_hidden_layers"]
    model = build("peri_ln")
    check_parameter_count(model, 2 * d * n_layers)
    extra = [n for n, _ in model.named_parameters() if "out_norm" in n]
    assert len(extra) == 2 * n_layers
    assert model.model.wiring.embedding_norm is None
    check_parameter_count(build("peri_ln", peri_ln_embedding_norm=True), 2 * d * n_layers + d)


def test_output_norms_start_at_gain_one_and_are_trained():
    model = build("peri_ln").train()
    gains = [p for n, p in model.named_parameters() if "out_norm" in n]
    assert all(torch.equal(g, torch.ones_like(g)) for g in gains)
    assert all(g.requires_grad for g in gains)
    model(input_ids=ids(), labels=ids()).loss.backward()
    assert all(g.grad is not None and g.grad.abs().sum() > 0 for g in gains)
    names = model.no_weight_decay_names()
    assert {n for n, _ in model.named_parameters() if "out_norm" in n} <= names


def test_branch_weight_scale_does_not_change_output():
    """Oracle: the output norm makes each sublayer's contribution invariant to the scale of its weights (up to
    eps, so eps is made negligible: at init the MLP output's mean square is close to the default 1e-6)."""
    model = build("peri_ln", rms_norm_eps=1e-12)
    x = ids()
    base = logits(model, x)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(100.0)
            layer.mlp.down_proj.weight.mul_(100.0)
    torch.testing.assert_close(logits(model, x), base, rtol=1e-4, atol=1e-4)


def test_embedding_norm_normalises_the_first_stream():
    model = build("peri_ln", peri_ln_embedding_norm=True)
    z0 = model.depth_states(ids())[0]
    # the embedding has RMS ~0.02 (mean square 4e-4), so eps = 1e-6 leaves RMS sqrt(4e-4 / (4e-4 + 1e-6)) ~ 0.9988
    torch.testing.assert_close(token_rms(z0), torch.ones_like(token_rms(z0)), rtol=0, atol=5e-3)
    assert token_rms(model.model.embed_tokens.weight).max() < 0.1
    assert "model.wiring.embedding_norm.weight" in model.state_dict()


def test_loads_pre_ln_checkpoint(tmp_path):
    check_pre_ln_transfer("peri_ln", tmp_path, extra_suffix="out_norm.weight")


def test_loads_pre_ln_checkpoint_with_embedding_norm(tmp_path):
    check_pre_ln_transfer("peri_ln", tmp_path, extra_suffix=("out_norm.weight", "embedding_norm.weight"),
                          peri_ln_embedding_norm=True)


def test_swap_and_skip_blocks():
    model = build("peri_ln")
    with torch.no_grad():
        model.model.layers[1].attn_residual.out_norm.weight.fill_(2.0)
    with model.swap_blocks(1, 3):
        assert torch.equal(model.model.layers[3].attn_residual.out_norm.weight, torch.full((TINY["hidden_size"],), 2.0))
    check_swap_and_skip(model, 1, 3, skip=2)


def test_config_errors_name_field_and_allowed_values():
    with pytest.raises(ValueError, match=r"peri_ln_embedding_norm='yes'.*True or False"):
        build_config("peri_ln", peri_ln_embedding_norm="yes")
    with pytest.raises(ValueError, match=r"norm_type='groupnorm'.*one of"):
        build_config("peri_ln", norm_type="groupnorm")
    with pytest.raises(ValueError, match=r"num_hidden_layers=0"):
        build_config("peri_ln", num_hidden_layers=0)


def test_card():
    check_card("peri_ln", "2502.02732")
