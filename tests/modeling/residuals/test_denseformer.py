"""DenseFormer (``denseformer``): depth-weighted averaging after each block, identity init, dilation/period masks,
parameter count, init/loading, analysis hooks.

Oracles from the DenseFormer paper (arXiv 2402.02622). Run with::

    python -m pytest tests/modeling/residuals/test_denseformer.py -q
"""

from __future__ import annotations

import pytest
import torch
from depthbench.modeling.modeling_denseformer import DenseFormerStream, depth_weighted_average

from depthbench.registry import build_config
from tests.helpers import build_tiny, eval_logits, seeded_ids

TINY = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4)
L = TINY["num_hidden_layers"]


def build(arch: str = "denseformer", seed: int = 0, **overrides):
    return build_tiny(arch, TINY, seed, **overrides)


def ids(batch: int = 2, length: int = 7, seed: int = 1) -> torch.Tensor:
    return seeded_ids(TINY["vocab_size"], batch, length, seed)


logits = eval_logits


def dwa_modules(model) -> dict[int, torch.nn.Module]:
    """DenseFormer block number i (1-based) -> the residual module owning its DWA weights."""
    return {idx + 1: layer.mlp_residual for idx, layer in enumerate(model.model.layers)
            if layer.mlp_residual.dwa_weights is not None}


@torch.no_grad()
def randomize_dwa(model, seed: int = 2) -> None:
    generator = torch.Generator().manual_seed(seed)
    for module in dwa_modules(model).values():
        module.dwa_weights.copy_(torch.randn(module.dwa_weights.shape, generator=generator))


def record_layer_streams(model) -> tuple[list[DenseFormerStream], list]:
    records, handles = [], []
    for layer in model.model.layers:
        handles.append(layer.register_forward_hook(lambda m, args, out: records.append(out)))
    return records, handles


def brute_force_pairs(layers: int, dilation: int, period: int) -> dict[int, list[int]]:
    """(i, j) pairs kept by the masks: DWA after block i iff p | i, over j <= i with j = i (mod k)."""
    return {i: [j for j in range(i + 1) if (i - j) % dilation == 0] for i in range(1, layers + 1) if i % period == 0}


# ================================================================================================ equivalence
def test_identity_init_equals_pre_ln_exactly():
    pre, dense = build("pre_ln", seed=3), build(seed=4)
    missing, unexpected = dense.load_state_dict(pre.state_dict(), strict=False)
    assert unexpected == [] and missing and all(k.endswith("dwa_weights") for k in missing)
    x = ids(2, 9)
    assert torch.equal(logits(dense, x), logits(pre, x))
    with torch.no_grad():
        hidden_pre = pre(input_ids=x, output_hidden_states=True).hidden_states
        hidden_dense = dense(input_ids=x, output_hidden_states=True).hidden_states
    assert all(torch.equal(a, b) for a, b in zip(hidden_pre, hidden_dense))


def test_identity_weighted_average_is_bit_exact_in_bf16():
    outputs = [torch.randn(2, 3, 8).bfloat16() for _ in range(4)]
    identity = torch.tensor([0.0, 0.0, 0.0, 1.0])
    assert torch.equal(depth_weighted_average(identity, outputs), outputs[-1])
    weights = torch.tensor([0.5, -1.0, 2.0, 0.25])
    out = depth_weighted_average(weights, outputs)
    assert out.dtype == torch.bfloat16
    expected = sum(w * o.float() for w, o in zip(weights, outputs))
    torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=1e-2)


def test_weighted_average_backward_passes_gradcheck_in_float64():
    """The hand-written backward of the DWA (weights and every averaged output) against finite differences."""
    generator = torch.Generator().manual_seed(3)
    outputs = [torch.randn(2, 3, 4, generator=generator, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    weights = torch.randn(3, generator=generator, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda w, *xs: depth_weighted_average(w, list(xs)), (weights, *outputs))


def test_bf16_weighted_average_gradients_match_fp32_math():
    generator = torch.Generator().manual_seed(4)
    base = [torch.randn(2, 3, 8, generator=generator) for _ in range(3)]
    weights = torch.randn(3, generator=generator)
    grads = {}
    for dtype in (torch.float32, torch.bfloat16):
        xs = [x.detach().to(dtype).requires_grad_() for x in base]
        w = weights.clone().requires_grad_()
        depth_weighted_average(w, xs).float().pow(2).sum().backward()
        assert all(x.grad.dtype == dtype for x in xs) and w.grad.dtype == torch.float32
        grads[dtype] = [x.grad.float() for x in xs] + [w.grad]
    for a, b in zip(grads[torch.bfloat16], grads[torch.float32]):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-2)


def test_trained_weights_change_the_function():
    model = build()
    before = logits(model, ids())
    randomize_dwa(model)
    assert not torch.allclose(logits(model, ids()), before, atol=1e-3)


# ================================================================================================ masks and counts
def test_parameter_count_is_d_times_d_plus_3_over_2():
    model, pre = build(), build("pre_ln")
    extra = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in pre.parameters())
    assert extra == L * (L + 3) // 2 == model.config.num_extra_parameters() == 14
    assert model.config.parameter_counts()["total"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("dilation, period", [(1, 1), (2, 1), (1, 2), (2, 2), (3, 1), (4, 4), (3, 2)])
def test_masks_and_counts_with_dilation_and_period(dilation, period):
    model = build(num_hidden_layers=6, denseformer_dilation=dilation, denseformer_period=period)
    expected = brute_force_pairs(6, dilation, period)
    found = dwa_modules(model)
    assert {i: m.sources for i, m in found.items()} == expected
    count = sum(len(js) for js in expected.values())
    assert model.config.num_extra_parameters() == count
    assert sum(p.numel() for p in model.parameters()) == model.config.parameter_counts()["total"]
    # the forward uses exactly the masked sources with the learned weights, and Y_i = X_i without DWA
    randomize_dwa(model)
    x = ids()
    streams, handles = record_layer_streams(model)
    logits(model, x)
    for handle in handles:
        handle.remove()
    history = streams[-1].history  # X_0 .. X_6
    assert len(history) == 7
    for i in range(1, 7):
        current = streams[i - 1].current
        if i in expected:
            weights = found[i].dwa_weights.detach()
            reference = sum(w * history[j] for w, j in zip(weights, expected[i]))
            torch.testing.assert_close(current, reference, rtol=1e-5, atol=1e-6)
        else:
            assert torch.equal(current, history[i])


def test_masked_out_outputs_do_not_influence_the_average():
    model = build(num_hidden_layers=4, denseformer_dilation=2)  # block 4 averages X_0, X_2, X_4
    randomize_dwa(model)
    module = model.model.layers[3].mlp_residual
    assert module.sources == [0, 2, 4]
    history = tuple(torch.randn(1, 2, 32) for _ in range(4))
    x = torch.randn(1, 2, 32)
    identity_norm, zero_branch = (lambda t: t), (lambda t: torch.zeros_like(t))
    out = module(DenseFormerStream(x, history), identity_norm, zero_branch).current
    changed = (history[0], 100 * history[1], history[2], -history[3])  # X_1, X_3 are masked out for i = 4
    assert torch.equal(module(DenseFormerStream(x, changed), identity_norm, zero_branch).current, out)
    changed = (history[0], history[1], 2 * history[2], history[3])
    assert not torch.allclose(module(DenseFormerStream(x, changed), identity_norm, zero_branch).current, out)


# ================================================================================================ config
@pytest.mark.parametrize("field, value", [
    ("denseformer_dilation", 0), ("denseformer_dilation", L + 1), ("denseformer_period", 0),
    ("denseformer_period", 1.5), ("denseformer_dilation", True),
])
def test_bad_dilation_or_period_is_rejected_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"{field}=.*\[1, num_hidden_layers={L}\]"):
        build_config("denseformer", **TINY, **{field: value})


def test_defaults_are_valid_for_any_depth():
    for layers in (1, 2, 3, 8, 70):
        config = build_config("denseformer", **{**TINY, "num_hidden_layers": layers})
        assert config.num_extra_parameters() == layers * (layers + 3) // 2


# ================================================================================================ init and loading
def assert_identity(model) -> None:
    for i, module in dwa_modules(model).items():
        expected = torch.zeros(len(module.sources))
        expected[-1] = 1.0
        assert torch.equal(module.dwa_weights, expected), i


def test_identity_init_survives_post_init_and_loading(tmp_path):
    model = build()
    assert_identity(model)
    model.save_pretrained(tmp_path / "fresh")
    assert_identity(type(model).from_pretrained(tmp_path / "fresh"))
    randomize_dwa(model)
    model.save_pretrained(tmp_path / "trained")
    loaded = type(model).from_pretrained(tmp_path / "trained").eval()
    for i, module in dwa_modules(model).items():
        assert torch.equal(dwa_modules(loaded)[i].dwa_weights, module.dwa_weights)
    pre = build("pre_ln", seed=5)
    pre.save_pretrained(tmp_path / "pre_ln")
    from_pre = type(model).from_pretrained(tmp_path / "pre_ln").eval()
    assert_identity(from_pre)
    assert torch.equal(logits(from_pre, ids()), logits(pre, ids()))


def test_dwa_weights_get_no_weight_decay():
    model = build()
    names = {n for n, _ in model.named_parameters() if n.endswith("dwa_weights")}
    assert len(names) == L and names <= model.no_weight_decay_names()


# ================================================================================================ analysis hooks
def test_depth_states_are_the_averaged_states():
    model = build()
    randomize_dwa(model)
    x = ids()
    streams, handles = record_layer_streams(model)
    logits(model, x)
    for handle in handles:
        handle.remove()
    states = model.depth_states(x)
    assert torch.equal(states[0], model.model.embed_tokens(x))
    for block in range(L):
        assert torch.equal(states[block + 1], streams[block].current)
        assert not torch.equal(states[block + 1], streams[block].history[-1])  # Y_i, not the raw block output X_i


def test_skip_block_makes_block_and_its_average_the_identity():
    model = build()
    randomize_dwa(model)
    x = ids()
    baseline = logits(model, x)
    streams, handles = record_layer_streams(model)
    with model.skip_block(1):
        skipped = logits(model, x)
    for handle in handles:
        handle.remove()
    assert torch.equal(streams[1].current, streams[0].current)  # Y_2 = Y_1
    assert torch.equal(streams[1].history[2], streams[0].current)  # X_2 := Y_1 keeps later indices aligned
    assert len(streams[-1].history) == L + 1
    assert not torch.allclose(skipped, baseline, atol=1e-4)
    assert torch.equal(logits(model, x), baseline)


def test_swap_blocks_keeps_dwa_weights_in_place_and_restores():
    model = build(denseformer_dilation=2)  # blocks 2 and 4 both average 3 outputs, so shapes would match
    randomize_dwa(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    baseline = logits(model, ids())
    with model.swap_blocks(1, 3):
        state = model.state_dict()
        for block in (1, 3):
            assert torch.equal(state[f"model.layers.{block}.mlp_residual.dwa_weights"],
                               before[f"model.layers.{block}.mlp_residual.dwa_weights"])
        assert torch.equal(state["model.layers.1.mlp.up_proj.weight"], before["model.layers.3.mlp.up_proj.weight"])
        assert not torch.allclose(logits(model, ids()), baseline, atol=1e-4)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert torch.equal(logits(model, ids()), baseline)
