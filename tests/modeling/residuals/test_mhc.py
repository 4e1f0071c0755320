"""Math tests for manifold-constrained Hyper-Connections (``mhc``): the oracles of the mHC paper (arXiv 2512.24880).

Run: ``python -m pytest tests/modeling/residuals/test_mhc.py -q``
"""

from __future__ import annotations

import math

import pytest
import torch
from depthbench.modeling.mhc_sinkhorn import sinkhorn
from depthbench.modeling.modeling_mhc import MHCConfig, MHCResidual

from depthbench.registry import build_model
from tests.helpers import build_tiny, seeded_ids

SHAPE = dict(vocab_size=128, hidden_size=32, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4)


def _ids(batch: int = 2, length: int = 9, seed: int = 0) -> torch.Tensor:
    return seeded_ids(SHAPE["vocab_size"], batch, length, seed, low=0)


def _mhc(seed: int = 0, **fields):
    return build_tiny("mhc", SHAPE, seed, **fields)


def _residuals(model) -> list[MHCResidual]:
    return [r for layer in model.model.layers for r in (layer.attn_residual, layer.mlp_residual)]


def _pre_ln_logits(model, ids):
    pre_ln = build_model("pre_ln", **SHAPE, rms_norm_eps=model.config.rms_norm_eps).eval()
    missing, unexpected = pre_ln.load_state_dict(model.state_dict(), strict=False)
    assert missing == [] and all("_residual." in k for k in unexpected)
    return pre_ln(ids).logits


def _logits(seed: int = 0, batch: int = 512, n: int = 4, std: float = 1.0) -> torch.Tensor:
    return std * torch.randn(batch, n, n, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------------ Sinkhorn
def test_sinkhorn_is_doubly_stochastic_rows_last():
    p = sinkhorn(_logits(), num_iters=20)
    assert p.dtype == torch.float32 and (p >= 0).all()
    assert (p.sum(-1) - 1).abs().max() < 1e-6  # last-normalised axis: rows
    assert (p.sum(-2) - 1).abs().max() < 1e-3  # the other axis: approximately
    assert (torch.linalg.matrix_norm(p, ord=2) <= 1 + 1e-3).all()  # non-expansive


def test_sinkhorn_error_shrinks_with_iterations():
    z = _logits(std=1.0)
    errors = [(sinkhorn(z, num_iters=t).sum(-2) - 1).abs().max().item() for t in (1, 2, 5, 10, 20, 40)]
    assert all(b < a for a, b in zip(errors, errors[1:])), errors
    assert errors[0] > 0.1 and errors[-1] < 1e-5


def test_sinkhorn_special_cases():
    assert torch.equal(sinkhorn(torch.randn(7, 1, 1) * 10, num_iters=20), torch.ones(7, 1, 1))  # n = 1: exactly 1
    torch.testing.assert_close(sinkhorn(torch.zeros(3, 4, 4), num_iters=20), torch.full((3, 4, 4), 0.25))  # J/n
    # gap-8 init: ~0.999 on the diagonal, ~3.4e-4 off it (reference values)
    z = torch.full((4, 4), -8.0).fill_diagonal_(0.0)
    p = sinkhorn(z, num_iters=20)
    torch.testing.assert_close(p.diagonal(), torch.full((4,), 0.998995), rtol=0, atol=1e-5)
    assert abs(p[0, 1].item() - 0.000335) < 2e-5


def test_composite_product_stays_doubly_stochastic():
    """60 sublayers: the product of Sinkhorn maps keeps unit row/column sums (Amax gain ~ 1); the unconstrained
    control (same logits, exp only) explodes."""
    maps = sinkhorn(_logits(seed=3, batch=60), num_iters=20).double()
    product = torch.eye(4, dtype=torch.float64)
    control = torch.eye(4, dtype=torch.float64)
    for m, z in zip(maps, _logits(seed=3, batch=60).double()):
        product = m @ product
        control = z.exp() @ control
    assert (product.sum(-1) - 1).abs().max() < 1e-2 and (product.sum(-2) - 1).abs().max() < 1e-2
    amax = max(product.abs().sum(-1).max().item(), product.abs().sum(-2).max().item())
    assert amax <= 1.05
    assert control.abs().sum(-1).max().item() > 1e6 * amax


# ------------------------------------------------------------------------------------------------ maps
def _random_residual(n: int = 4, index: int = 1, **fields) -> MHCResidual:
    r = MHCResidual(MHCConfig(**SHAPE, mhc_num_streams=n, **fields), index=index)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in r.named_parameters():  # moderate logits (std ~ 1): sigmoid is not saturated in fp32
            p.copy_(torch.randn_like(p) * (0.1 if name == "phi" else 1.0))
    return r


@torch.no_grad()
def test_map_ranges_and_applied_operator_convention():
    r = _random_residual()
    stream = torch.randn(2, 6, 4, SHAPE["hidden_size"])
    h_pre, h_post, h_res = r.mappings(stream)
    assert h_pre.shape == (2, 6, 4) and h_res.shape == (2, 6, 4, 4)
    assert ((h_pre > 0) & (h_pre < 1)).all() and ((h_post > 0) & (h_post < 2)).all()
    # The applied operator: with a zero branch the update is H' = H_res @ H (row t = output stream t) ...
    out = r(stream, torch.nn.Identity(), lambda x: torch.zeros_like(x))
    torch.testing.assert_close(out, h_res @ stream)
    # ... whose rows sum to 1 exactly: identical streams map to themselves (a convex combination per output).
    same = stream[..., :1, :].expand_as(stream)
    _, _, res_same = r.mappings(same)
    assert (res_same.sum(-1) - 1).abs().max() < 1e-6
    torch.testing.assert_close(r(same, torch.nn.Identity(), lambda x: torch.zeros_like(x)), same)


@torch.no_grad()
def test_update_matches_explicit_formula():
    """Random parameters, fp64: the batched update equals the per-stream mHC equations (paper Eq. 3, 7-9)."""
    r = _random_residual(n=3, index=4).double()
    d = SHAPE["hidden_size"]
    w = torch.randn(d, d, dtype=torch.float64) / math.sqrt(d)
    norm = torch.nn.LayerNorm(d, dtype=torch.float64)

    def branch(x):
        return torch.tanh(x @ w)

    H = torch.randn(2, 3, 3, d, dtype=torch.float64)
    got = r(H, norm, branch)
    for b in range(2):
        for t in range(3):
            x = H[b, t].flatten()
            xn = x / torch.sqrt(x.pow(2).mean() + r.eps)
            m = xn @ r.phi.t()
            pre = torch.sigmoid(r.alpha_pre * m[:3] + r.bias[:3])
            post = 2 * torch.sigmoid(r.alpha_post * m[3:6] + r.bias[3:6])
            res = sinkhorn((r.alpha_res * m[6:] + r.bias[6:]).view(3, 3), 20)
            out = branch(norm(sum(pre[s] * H[b, t, s] for s in range(3))))
            for j in range(3):
                expected = sum(res[j, s] * H[b, t, s] for s in range(3)) + post[j] * out
                torch.testing.assert_close(got[b, t, j], expected)


@torch.no_grad()
def test_flattened_norm_equivalence():
    """N⁰(vec x) Φ (normalise, then project) equals the fused (x Φ) / r with r = ||x|| / sqrt(n d)."""
    r = _random_residual()
    stream = 3.0 * torch.randn(2, 5, 4, SHAPE["hidden_size"])
    x = stream.flatten(-2)
    normalised = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + r.eps)
    n = r.num_streams
    gains = torch.cat([r.alpha_pre.expand(n), r.alpha_post.expand(n), r.alpha_res.expand(n * n)])
    expected = (normalised @ r.phi.t()) * gains + r.bias
    torch.testing.assert_close(r.logits(stream), expected, rtol=1e-5, atol=1e-5)
    rms = x.norm(dim=-1, keepdim=True) / math.sqrt(x.shape[-1])
    torch.testing.assert_close((x @ r.phi.t()) / rms, normalised @ r.phi.t(), rtol=1e-4, atol=1e-4)


@torch.no_grad()
def test_gap8_init_values():
    model = _mhc()
    for r in _residuals(model):
        s = r.index % 4
        pre = torch.full((4,), -8.0)
        pre[s] = 8.0
        assert torch.equal(r.bias[:4], pre) and torch.equal(r.bias[4:8], torch.zeros(4))
        assert torch.equal(r.bias[8:].view(4, 4), torch.full((4, 4), -8.0).fill_diagonal_(0.0))
        assert not r.phi.any()
        for gain in (r.alpha_pre, r.alpha_post, r.alpha_res):
            assert gain.item() == pytest.approx(0.01)
        h_pre, h_post, h_res = r.mappings(torch.randn(1, 3, 4, SHAPE["hidden_size"]))
        assert torch.equal(h_post, torch.ones_like(h_post))  # 2σ(0) = 1
        assert h_pre[..., s].min() > 0.999 and h_pre.sum(-1).max() < 1.002
        torch.testing.assert_close(h_res.diagonal(dim1=-2, dim2=-1), torch.full((1, 3, 4), 0.998995), atol=1e-5,
                                   rtol=0)


# ------------------------------------------------------------------------------------------------ model level
@torch.no_grad()
def test_single_stream_reduces_to_pre_ln():
    model = _mhc(mhc_num_streams=1)
    ids = _ids()
    for r in _residuals(model):
        assert torch.equal(r.mappings(torch.randn(1, 2, 1, SHAPE["hidden_size"]))[2], torch.ones(1, 2, 1, 1))
    torch.testing.assert_close(model(ids).logits, _pre_ln_logits(model, ids), rtol=0, atol=1e-4)


@torch.no_grad()
@pytest.mark.parametrize("dynamic", [True, False])
def test_zero_gains_and_biases_with_mean_readout_equal_pre_ln(dynamic):
    # The branch input is (n/2)·h; the sublayer norm removes the factor up to its eps, which is not negligible
    # next to init-scale states (rms ~ 0.02), so the exact equivalence is checked with a tiny eps.
    model = _mhc(mhc_init_gap=0.0, mhc_dynamic=dynamic, rms_norm_eps=1e-12)  # b = 0
    assert model.config.mhc_readout == "mean"  # the documented default
    for r in _residuals(model):
        assert not r.bias.any()
        if dynamic:
            r.phi.normal_()  # α = 0 must switch Φ off entirely
            for gain in (r.alpha_pre, r.alpha_post, r.alpha_res):
                gain.zero_()
        h_pre, h_post, h_res = r.mappings(torch.randn(1, 2, 4, SHAPE["hidden_size"]))
        torch.testing.assert_close(h_pre, torch.full_like(h_pre, 0.5), rtol=0, atol=0)
        torch.testing.assert_close(h_post, torch.ones_like(h_post), rtol=0, atol=0)
        torch.testing.assert_close(h_res, torch.full_like(h_res, 0.25), rtol=0, atol=1e-7)
    ids = _ids()
    torch.testing.assert_close(model(ids).logits, _pre_ln_logits(model, ids), rtol=0, atol=1e-5)


@torch.no_grad()
def test_gap8_init_is_close_to_pre_ln_and_streams_stay_close():
    model = _mhc()
    ids = _ids()
    outputs = []
    hooks = [r.register_forward_hook(lambda mod, args, out: outputs.append(out)) for r in _residuals(model)]
    logits = model(ids).logits
    for h in hooks:
        h.remove()
    for out in outputs:  # H_res rows sum to 1: identical streams stay identical (to fp32 rounding)
        torch.testing.assert_close(out, out[..., :1, :].expand_as(out), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits, _pre_ln_logits(model, ids), rtol=0, atol=1e-3)


def test_gradients_reach_every_parameter():
    model = _mhc().train()
    ids = _ids()
    model(ids, labels=ids).loss.backward()
    for r in _residuals(model):  # H_res is near-saturated (gap 8), yet its logits still receive gradient
        for name in ("phi", "bias"):
            assert getattr(r, name).grad.abs().sum() > 0, name
        assert r.bias.grad[8:].abs().sum() > 0
    # m = x̂·Φ = 0 at init, so the gains' first gradient is exactly 0; after one step every parameter learns.
    torch.optim.AdamW(model.parameters(), lr=1e-2).step()
    model.zero_grad()
    model(ids, labels=ids).loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_static_variant():
    model = _mhc(mhc_dynamic=False).train()
    r = model.model.layers[0].attn_residual
    assert [n for n, _ in r.named_parameters()] == ["bias"]
    assert sum(p.numel() for p in model.parameters()) == model.config.parameter_counts()["total"]
    assert model.config.num_extra_parameters() == 2 * SHAPE["num_hidden_layers"] * 24
    h_pre, h_post, h_res = r.mappings(torch.randn(2, 3, 4, SHAPE["hidden_size"]))
    assert h_pre.shape == (4,) and h_res.shape == (4, 4)  # token-independent
    ids = _ids()
    loss = model(ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss) and r.bias.grad.abs().sum() > 0


def test_parameter_count_and_no_decay():
    model = _mhc(mhc_num_streams=3)
    n, d = 3, SHAPE["hidden_size"]
    assert model.config.num_extra_parameters() == 2 * SHAPE["num_hidden_layers"] * (
        n * d * (n * n + 2 * n) + (n * n + 2 * n) + 3
    )
    assert sum(p.numel() for p in model.parameters()) == model.config.parameter_counts()["total"]
    names = model.no_weight_decay_names()
    for leaf in ("bias", "alpha_pre", "alpha_post", "alpha_res"):
        assert f"model.layers.1.mlp_residual.{leaf}" in names
    assert not any(name.endswith(".phi") for name in names)


@torch.no_grad()
def test_bf16_model_runs_mapping_math_in_fp32():
    model = _mhc()
    for r in _residuals(model):  # move away from the saturated init so the maps are non-trivial
        r.phi.normal_(0, 0.05)
        r.bias.normal_()
        for gain in (r.alpha_pre, r.alpha_post, r.alpha_res):
            gain.fill_(1.0)
    ref = [MHCResidual(model.config, r.index) for r in _residuals(model)]
    for copy, r in zip(ref, _residuals(model)):
        copy.load_state_dict(r.state_dict())
    model.to(torch.bfloat16)
    logits = model(_ids()).logits
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
    stream = torch.randn(2, 5, 4, SHAPE["hidden_size"]).to(torch.bfloat16)
    for copy, r in zip(ref, _residuals(model)):
        copy.load_state_dict(r.state_dict())  # the same (bf16-rounded) values, held in fp32
        got, want = r.mappings(stream), copy.mappings(stream.float())
        for g, w in zip(got, want):
            assert g.dtype == torch.float32
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
        assert (got[2].sum(-1) - 1).abs().max() < 1e-6  # impossible if Sinkhorn had run in bf16


@torch.no_grad()
def test_autocast_does_not_lower_mapping_precision():
    """Under bf16 autocast (fp32 weights) the coefficient GEMM and Sinkhorn must still run in fp32."""
    r = _random_residual()
    stream = torch.randn(2, 5, 4, SHAPE["hidden_size"])
    want = r.mappings(stream)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = r.mappings(stream)
        assert sinkhorn(torch.randn(3, 4, 4), 20).dtype == torch.float32
    for g, w in zip(got, want):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


@torch.no_grad()
def test_readouts_and_depth_states():
    ids = _ids()
    ref = _pre_ln_logits(_mhc(mhc_init_gap=0.0, rms_norm_eps=1e-12), ids)
    sum_norm = _mhc(mhc_init_gap=0.0, mhc_readout="sum_norm", rms_norm_eps=1e-12)
    torch.testing.assert_close(sum_norm(ids).logits, 4 * ref, rtol=0, atol=4e-5)  # the reference's n x scale
    model = _mhc()
    states = model.depth_states(ids)
    assert len(states) == SHAPE["num_hidden_layers"] + 1 and states[0].shape == (2, 9, 4 * SHAPE["hidden_size"])
    with model.skip_block(0):
        skipped = model.depth_states(ids)
    assert torch.equal(skipped[1], skipped[0])


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="mhc_sinkhorn_iters"):
        MHCConfig(**SHAPE, mhc_sinkhorn_iters=0)
    with pytest.raises(ValueError, match="mhc_readout"):
        MHCConfig(**SHAPE, mhc_readout="first")
    with pytest.raises(ValueError, match="mhc_sinkhorn_temperature"):
        MHCConfig(**SHAPE, mhc_sinkhorn_temperature=0.0)


# ------------------------------------------------------------------------------------ Sinkhorn ending on columns
def _rows_then_columns(z: torch.Tensor, iters: int) -> torch.Tensor:
    """Hand-written log-domain Sinkhorn whose rounds normalise the rows, then the columns."""
    z = z.double()
    for _ in range(iters):
        z = z - torch.logsumexp(z, dim=-1, keepdim=True)
        z = z - torch.logsumexp(z, dim=-2, keepdim=True)
    return z.exp()


@pytest.mark.parametrize("dynamic", [True, False])
def test_sinkhorn_ending_on_columns_matches_the_hand_written_order(dynamic):
    """``mhc_sinkhorn_ends_on="columns"``: H_res is the rows-then-columns Sinkhorn of the logits (exact column sums),
    applied as Σ_s H_res[t, s] H_s; the default row-ending matrix differs where the iterations have not converged."""
    fields = dict(mhc_dynamic=dynamic, mhc_sinkhorn_iters=3, mhc_init_gap=2.0)
    model = _mhc(seed=4, mhc_sinkhorn_ends_on="columns", **fields)
    rows = _mhc(seed=4, **fields)
    rows.load_state_dict(model.state_dict())
    residual, row_residual = _residuals(model)[1], _residuals(rows)[1]
    with torch.no_grad():
        for p in residual.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(9)))
        row_residual.load_state_dict(residual.state_dict())
    stream = torch.randn(2, 5, 4, SHAPE["hidden_size"], generator=torch.Generator().manual_seed(1))
    n = residual.num_streams
    z_res = residual.logit_parts(stream)[2].unflatten(-1, (n, n))
    h_res = residual.mappings(stream)[2]
    assert (h_res.double() - _rows_then_columns(z_res, 3)).abs().max() < 1e-6
    assert (h_res.sum(-2) - 1).abs().max() < 1e-6
    assert (row_residual.mappings(stream)[2] - h_res).abs().max() > 1e-4
    with torch.no_grad():  # the no-autograd fast path computes the same function
        ids = _ids()
        fast = model.eval()(ids).logits
        with torch.enable_grad():
            slow = model(ids).logits
    assert (fast - slow).abs().max() < 1e-5


def test_sinkhorn_end_is_validated_and_saved(tmp_path):
    with pytest.raises(ValueError, match="mhc_sinkhorn_ends_on"):
        MHCConfig(**SHAPE, mhc_sinkhorn_ends_on="diagonal")
    model = _mhc(mhc_sinkhorn_ends_on="columns", mhc_readout="sum", mhc_readout_evidence={"chosen": "sum"})
    model.save_pretrained(tmp_path)
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert loaded.config.mhc_sinkhorn_ends_on == "columns" and loaded.config.mhc_readout_evidence == {"chosen": "sum"}
    assert torch.equal(loaded.eval()(_ids()).logits, model.eval()(_ids()).logits)
