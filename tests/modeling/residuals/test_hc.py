"""Math tests for Hyper-Connections (``hc``): the oracles of the HC paper (arXiv 2409.19606) plus HC-specific
plumbing.

Run: ``python -m pytest tests/modeling/residuals/test_hc.py -q``
"""

from __future__ import annotations

import math

import pytest
import torch
from depthbench.modeling.modeling_hc import HCConfig, HCResidual, hyper_connection_update

from depthbench.registry import build_model
from tests.helpers import build_tiny, seeded_ids

SHAPE = dict(vocab_size=128, hidden_size=32, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4)


def _ids(batch: int = 2, length: int = 9, seed: int = 0) -> torch.Tensor:
    return seeded_ids(SHAPE["vocab_size"], batch, length, seed, low=0)


def _hc(seed: int = 0, **fields):
    return build_tiny("hc", SHAPE, seed, **fields)


def _pre_ln_with_shared_weights(model):
    """A pre_ln model holding exactly ``model``'s shared (Llama-named) tensors; returns it and the extra keys."""
    pre_ln = build_model("pre_ln", **SHAPE).eval()
    missing, unexpected = pre_ln.load_state_dict(model.state_dict(), strict=False)
    assert missing == []
    return pre_ln, unexpected


def _residuals(model) -> list[HCResidual]:
    return [r for layer in model.model.layers for r in (layer.attn_residual, layer.mlp_residual)]


@torch.no_grad()
@pytest.mark.parametrize("n", [1, 2, 4])
def test_standard_init_equals_pre_ln_logits(n):
    model = _hc(hc_num_streams=n)
    assert model.config.hc_scale_output_init  # the standard init, 1/sqrt(n) o_proj/down_proj included
    pre_ln, extra = _pre_ln_with_shared_weights(model)
    assert extra and all("_residual." in k for k in extra)  # only the connectors are HC-specific
    ids = _ids()
    torch.testing.assert_close(model(ids).logits, pre_ln(ids).logits, rtol=0, atol=1e-5)


@torch.no_grad()
def test_pre_ln_checkpoint_loads_into_hc_and_matches(tmp_path):
    """from_pretrained on a pre_ln checkpoint: connectors are missing keys and get their init (meta-device path)."""
    torch.manual_seed(1)
    pre_ln = build_model("pre_ln", **SHAPE).eval()
    pre_ln.save_pretrained(tmp_path)
    from depthbench.modeling.modeling_hc import HCForCausalLM

    model = HCForCausalLM.from_pretrained(tmp_path, config=HCConfig(**SHAPE)).eval()
    residual = model.model.layers[1].mlp_residual  # sublayer 3 -> one-hot at stream 3
    assert torch.equal(residual.static_alpha[:, 0], torch.eye(4)[3])
    assert torch.equal(residual.static_alpha[:, 1:], torch.eye(4))
    ids = _ids()
    torch.testing.assert_close(model(ids).logits, pre_ln(ids).logits, rtol=0, atol=1e-5)


def test_init_values_and_output_scaling():
    model = _hc(hc_num_streams=4)
    for r in _residuals(model):
        expected = torch.zeros(4, 5)
        expected[r.index % 4, 0] = 1
        expected[:, 1:] = torch.eye(4)
        assert torch.equal(r.static_alpha, expected)
        assert torch.equal(r.static_beta, torch.ones(4))
        assert not r.dynamic_alpha_fn.any() and not r.dynamic_beta_fn.any()
        assert r.dynamic_alpha_scale.item() == pytest.approx(0.01)
        assert r.dynamic_beta_scale.item() == pytest.approx(0.01)
    # o_proj / down_proj std is 0.02 / sqrt(4) = 0.01; q_proj keeps 0.02 (loose bounds: few thousand samples)
    layer = model.model.layers[0]
    assert 0.008 < layer.self_attn.o_proj.weight.std().item() < 0.012
    assert 0.008 < layer.mlp.down_proj.weight.std().item() < 0.012
    assert 0.017 < layer.self_attn.q_proj.weight.std().item() < 0.023
    off = _hc(hc_num_streams=4, hc_scale_output_init=False)
    assert 0.017 < off.model.layers[0].self_attn.o_proj.weight.std().item() < 0.023


@torch.no_grad()
def test_dynamic_terms_are_exactly_zero_at_init():
    model = _hc()
    stream = torch.randn(2, 5, 4, SHAPE["hidden_size"])
    for r in _residuals(model):
        alpha, beta = r.connections(stream)
        assert torch.equal(alpha, r.static_alpha.expand_as(alpha))
        assert torch.equal(beta, r.static_beta.expand_as(beta))


@torch.no_grad()
def test_streams_stay_identical_after_every_sublayer():
    model = _hc()
    outputs = []
    hooks = [r.register_forward_hook(lambda mod, args, out: outputs.append(out)) for r in _residuals(model)]
    model(_ids())
    for h in hooks:
        h.remove()
    assert len(outputs) == 2 * SHAPE["num_hidden_layers"]
    for out in outputs:
        assert out.shape[-2:] == (4, SHAPE["hidden_size"])  # the stream dim persists between blocks
        assert torch.equal(out, out[..., :1, :].expand_as(out))


@torch.no_grad()
def test_connector_matches_explicit_formula():
    """Random (non-init) parameters: the batched implementation equals the per-stream equations in fp64."""
    config = HCConfig(**SHAPE, hc_num_streams=3)
    r = HCResidual(config, index=5).double()
    torch.manual_seed(0)
    for p in r.parameters():
        p.copy_(torch.randn_like(p) * 0.5)
    d = SHAPE["hidden_size"]
    w = torch.randn(d, d, dtype=torch.float64) / math.sqrt(d)
    norm = torch.nn.LayerNorm(d, dtype=torch.float64)

    def branch(x):
        return torch.tanh(x @ w)

    H = torch.randn(2, 4, 3, d, dtype=torch.float64)
    got = r(H, norm, branch)
    for b in range(2):
        for t in range(4):
            h = H[b, t]  # [n, d]
            hn = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + config.hc_norm_eps)
            A = r.static_alpha + r.dynamic_alpha_scale * torch.tanh(hn @ r.dynamic_alpha_fn.t())  # [n, n+1]
            beta = r.static_beta + r.dynamic_beta_scale * torch.tanh(hn @ r.dynamic_beta_fn)  # [n]
            u = sum(A[s, 0] * h[s] for s in range(3))
            out = branch(norm(u))
            for j in range(3):
                expected = sum(A[s, 1 + j] * h[s] for s in range(3)) + beta[j] * out
                torch.testing.assert_close(got[b, t, j], expected)


def test_sublayer_saves_the_streams_once_and_no_mixing_product():
    """For backward an HC sublayer keeps its n-stream input, its branch input and output and small per-token
    coefficients; never the [N, n+1, d] mixing product (a view of it as the norm's input would keep all of it)."""
    n, d, tokens = 4, SHAPE["hidden_size"], 2 * 9
    residual = HCResidual(HCConfig(**SHAPE, hc_num_streams=n), index=1)
    storages: dict[int, int] = {}

    def pack(tensor):
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes() // tensor.element_size()
        return tensor

    stream = torch.randn(2, 9, n, d, requires_grad=True)
    branch_weight = torch.randn(d, d, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        residual(stream, lambda x: x * 2.0, lambda x: x @ branch_weight)
    storages.pop(branch_weight.untyped_storage().data_ptr())  # the branch's own weight, not an activation
    activations = {ptr: size for ptr, size in storages.items() if size >= tokens * d}  # drop per-token scalars
    assert max(activations.values()) == n * tokens * d  # the stream input; nothing (n+1)-rows wide
    assert sum(activations.values()) <= (n + 2) * tokens * d  # streams + branch input + branch output


@torch.no_grad()
def test_width_connection_is_applied():
    """Regression for the lucidrains bug (#8) where A_r was silently dropped: a non-identity A_r changes the output,
    and a swap A_r permutes the carried streams exactly."""
    model = _hc(hc_num_streams=2)
    ids = _ids()
    base = model(ids).logits
    # Make the streams differ first (otherwise a permutation is invisible), then permute them.
    r0, r1 = model.model.layers[0].attn_residual, model.model.layers[0].mlp_residual
    r0.static_beta.copy_(torch.tensor([1.0, 0.0]))  # only stream 0 receives the attention output
    differ = model(ids).logits
    assert not torch.allclose(differ, base, atol=1e-4)
    r1.static_alpha[:, 1:] = torch.tensor([[0.0, 1.0], [1.0, 0.0]])  # A_r = swap
    swapped = model(ids).logits
    assert not torch.allclose(swapped, differ, atol=1e-4)

    stream = torch.randn(1, 3, 2, SHAPE["hidden_size"])
    zero_branch = hyper_connection_update(
        stream, r1.static_alpha.t(), torch.zeros(2), torch.nn.Identity(), lambda x: torch.zeros_like(x)
    )
    torch.testing.assert_close(zero_branch, stream.flip(-2))


def test_gradients_reach_dynamic_weights_after_one_backward():
    model = _hc().train()
    ids = _ids()
    model(ids, labels=ids).loss.backward()
    for r in _residuals(model):
        for name in ("dynamic_alpha_fn", "dynamic_beta_fn", "static_alpha", "static_beta"):
            grad = getattr(r, name).grad
            assert grad is not None and grad.abs().sum() > 0, name
    # The gates multiply tanh(Ĥ·0) = 0, so their first gradient is exactly 0; after one step it is not.
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    model.zero_grad()
    model(ids, labels=ids).loss.backward()
    for r in _residuals(model):
        assert r.dynamic_alpha_scale.grad.abs() > 0 and r.dynamic_beta_scale.grad.abs() > 0


def test_parameter_count_and_no_decay():
    for n in (1, 3):
        model = _hc(hc_num_streams=n)
        assert sum(p.numel() for p in model.parameters()) == model.config.parameter_counts()["total"]
        d = SHAPE["hidden_size"]
        assert model.config.num_extra_parameters() == 2 * SHAPE["num_hidden_layers"] * (
            n * (n + 1) + d * (n + 1) + 1 + n + d + 1
        )
    names = model.no_weight_decay_names()
    assert "model.layers.1.mlp_residual.static_alpha" in names
    assert "model.layers.0.attn_residual.static_beta" in names
    assert not any("dynamic" in name for name in names)


@torch.no_grad()
@pytest.mark.parametrize("readout", ["mean", "sum", "sum_norm"])
def test_readouts(readout):
    model = _hc(hc_readout=readout)
    pre_ln, _ = _pre_ln_with_shared_weights(model)
    ids = _ids()
    out = model(ids, output_hidden_states=True)
    ref = pre_ln(ids, output_hidden_states=True)
    n = model.config.hc_num_streams
    scale = 1.0 if readout == "mean" else float(n)
    assert len(out.hidden_states) == SHAPE["num_hidden_layers"] + 1
    for got, want in zip(out.hidden_states[:-1], ref.hidden_states[:-1]):
        torch.testing.assert_close(got, scale * want, rtol=1e-5, atol=1e-5)
    if readout == "sum_norm":  # the reference: n normalised streams summed -> n x Pre-LN's logits at init
        torch.testing.assert_close(out.logits, n * ref.logits, rtol=1e-5, atol=1e-5)
    else:
        # "sum": N(n·h) = N(h) only up to the norm's eps, which is not negligible next to the tiny init-scale
        # states (rms ~ 0.02); that is one reason "mean" is the default.
        atol = 1e-5 if readout == "mean" else 5e-3
        torch.testing.assert_close(out.logits, ref.logits, rtol=0, atol=atol)
        # the head reads exactly the collapsed state that hidden_states / the logit lens report
        last = model.depth_states(ids)[-1].unflatten(-1, (n, -1))  # [B,T,n,d] after the last block
        lens = model.lm_head(model.model.norm(model.model.wiring.readout(last)))
        torch.testing.assert_close(lens, out.logits, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_depth_states_concatenate_streams():
    model = _hc()
    states = model.depth_states(_ids())
    assert len(states) == SHAPE["num_hidden_layers"] + 1
    assert states[0].shape == (2, 9, 4 * SHAPE["hidden_size"])
    emb = model.model.embed_tokens(_ids())
    torch.testing.assert_close(states[0], emb.repeat(1, 1, 4))


@torch.no_grad()
def test_skip_and_swap_blocks():
    model = _hc()
    ids = _ids()
    with model.skip_block(1):
        states = model.depth_states(ids)
    assert torch.equal(states[2], states[1])  # the skipped block is identity on the streams
    base = model(ids).logits
    r0 = model.model.layers[0].attn_residual.static_alpha.clone()
    r1 = model.model.layers[1].attn_residual.static_alpha.clone()
    with model.swap_blocks(0, 1):
        assert torch.equal(model.model.layers[0].attn_residual.static_alpha, r1)  # connectors travel too
        assert not torch.allclose(model(ids).logits, base)
    assert torch.equal(model.model.layers[0].attn_residual.static_alpha, r0)
    torch.testing.assert_close(model(ids).logits, base, rtol=0, atol=0)


def test_bf16_forward_is_finite_and_gates_are_fp32():
    model = _hc().to(torch.bfloat16)
    with torch.no_grad():
        for r in _residuals(model):
            r.dynamic_alpha_fn.normal_(0, 0.3)
        logits = model(_ids()).logits
        alpha, beta = _residuals(model)[0].connections(torch.randn(1, 2, 4, 32, dtype=torch.bfloat16))
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
    assert alpha.dtype == torch.float32 and beta.dtype == torch.float32


@torch.no_grad()
def test_autocast_does_not_lower_gate_precision():
    r = HCResidual(HCConfig(**SHAPE), index=2)
    torch.nn.init.normal_(r.dynamic_alpha_fn, std=0.5)
    torch.nn.init.normal_(r.dynamic_beta_fn, std=0.5)
    stream = torch.randn(2, 5, 4, SHAPE["hidden_size"])
    want = r.connections(stream)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = r.connections(stream)
    for g, w in zip(got, want):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="hc_readout"):
        HCConfig(**SHAPE, hc_readout="max")
    with pytest.raises(ValueError, match="hc_num_streams"):
        HCConfig(**SHAPE, hc_num_streams=0)
    assert HCConfig(**SHAPE).hc_readout == "mean"  # the documented default
