"""The no-autograd inference paths of HC and mHC (``_inference_forward``, taken under ``torch.no_grad()`` /
``generate()``) compute the same function as the differentiable path: full-forward logits (with padding masks),
cached one-token decode logits, batch 1 and > 1, every variant, and identical greedy ``generate()`` tokens; mHC's
early-exit Sinkhorn equals the full iterations.

Run: ``python -m pytest tests/modeling/residuals/test_hc_inference_paths.py -q``
"""

from __future__ import annotations

import pytest
import torch
from depthbench.modeling import modeling_hc, modeling_mhc
from depthbench.modeling.mhc_sinkhorn import sinkhorn_inference, sinkhorn_scaled
from torch.utils._python_dispatch import TorchDispatchMode

from tests.helpers import build_tiny, cache_of, left_pad, seeded_ids

SHAPE = dict(vocab_size=128, hidden_size=32, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)
RTOL = 2e-6  # max |fast - differentiable| / max |logits| (fp32 rounding through 6 sublayers)

VARIANTS = [
    ("hc", {}),
    ("hc", {"hc_use_tanh": False}),
    ("hc", {"hc_readout": "sum_norm", "hc_num_streams": 2}),
    ("hc", {"hc_readout": "sum", "hc_num_streams": 1}),
    ("mhc", {}),
    ("mhc", {"mhc_dynamic": False}),
    ("mhc", {"mhc_sinkhorn_temperature": 0.5, "mhc_sinkhorn_iters": 7, "mhc_readout": "sum_norm"}),
    ("mhc", {"mhc_num_streams": 2, "mhc_init_gap": 0.0}),
]
IDS = [f"{arch}-{'-'.join(f'{k}={v}' for k, v in fields.items()) or 'default'}" for arch, fields in VARIANTS]


def _residuals(model):
    return [r for layer in model.model.layers for r in (layer.attn_residual, layer.mlp_residual)]


def _model(arch: str, fields: dict, seed: int = 0, noise: float = 0.1):
    """A tiny model whose mixing parameters are moved off their init (input-dependent, asymmetric maps)."""
    model = build_tiny(arch, SHAPE, seed, **fields)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for residual in _residuals(model):
            for param in residual.parameters():
                param.add_(noise * torch.randn(param.shape, generator=generator))
    return model


@pytest.fixture
def differentiable(monkeypatch):
    """Call ``differentiable(fn)`` to run ``fn`` with the fast paths switched off (the plain path, no autograd)."""

    def run(fn):
        with monkeypatch.context() as patch:
            for module in (modeling_hc, modeling_mhc):
                patch.setattr(module, "inference_fast_path", lambda module: False)
            return fn()

    return run


def _assert_close(fast: torch.Tensor, reference: torch.Tensor, rtol: float = RTOL) -> None:
    error = (fast.double() - reference.double()).abs().max().item() / reference.abs().max().item()
    assert error <= rtol, f"relative max error {error:.2e} > {rtol:.0e}"


def _fast_path_taken(model) -> bool:
    return all("inference" in residual.__dict__.get("_derived_weights", {}) for residual in _residuals(model))


def _padded_batch(seed: int = 0):
    rows = [seeded_ids(SHAPE["vocab_size"], 1, length, seed + length)[0] for length in (11, 7, 9)]
    return left_pad(rows)


@pytest.mark.parametrize("arch,fields", VARIANTS, ids=IDS)
@pytest.mark.parametrize("batch", [1, 3])
def test_full_forward_logits_match(arch, fields, batch, differentiable):
    model = _model(arch, fields)
    ids, mask = _padded_batch()
    ids, mask = ids[:batch], mask[:batch]
    with torch.no_grad():
        fast = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        assert _fast_path_taken(model)
        reference = differentiable(lambda: model(input_ids=ids, attention_mask=mask, use_cache=False).logits)
    # and the path that training takes (autograd on) agrees with the no-grad reference
    with torch.enable_grad():
        trained = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    assert trained.requires_grad
    torch.testing.assert_close(trained.detach(), reference, rtol=0, atol=0)
    real = mask.bool()
    _assert_close(fast[real], reference[real])


@pytest.mark.parametrize("arch,fields", VARIANTS, ids=IDS)
@pytest.mark.parametrize("batch", [1, 3])
def test_cached_decode_logits_match(arch, fields, batch, differentiable):
    model = _model(arch, fields, seed=1)
    ids, mask = _padded_batch(seed=5)
    ids, mask = ids[:batch], mask[:batch]
    step = seeded_ids(SHAPE["vocab_size"], batch, 1, seed=9)
    step_mask = torch.cat([mask, torch.ones_like(step)], dim=-1)

    def decode():
        with torch.no_grad():
            cache = cache_of(model(input_ids=ids, attention_mask=mask, use_cache=True))
            return model(input_ids=step, attention_mask=step_mask, use_cache=True,
                         **{_cache_kwarg(): cache}).logits

    fast = decode()
    reference = differentiable(decode)
    _assert_close(fast, reference)


def _cache_kwarg() -> str:
    from depthbench.modeling.modeling_depthbench import CACHE_FIELD

    return CACHE_FIELD


@pytest.mark.parametrize("arch,fields", VARIANTS, ids=IDS)
def test_generate_tokens_identical(arch, fields, differentiable):
    model = _model(arch, fields, seed=2)
    ids, mask = _padded_batch(seed=3)
    kwargs = dict(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0,
                  eos_token_id=None)
    fast = model.generate(**kwargs)
    reference = differentiable(lambda: model.generate(**kwargs))
    assert fast.shape == (3, ids.shape[1] + 12)
    torch.testing.assert_close(fast, reference, rtol=0, atol=0)


@pytest.mark.parametrize("arch,fields", [VARIANTS[0], VARIANTS[4], VARIANTS[5]], ids=[IDS[0], IDS[4], IDS[5]])
def test_bf16_autocast_matches(arch, fields, differentiable):
    """Under bf16 autocast both paths run the stream mixing in bf16 and the gate math in fp32."""
    model = _model(arch, fields, seed=3)
    ids, mask = _padded_batch(seed=4)

    def forward():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float()

    fast, reference = forward(), differentiable(forward)
    _assert_close(fast[mask.bool()], reference[mask.bool()], rtol=2e-2)
    assert (fast.argmax(-1) == reference.argmax(-1))[mask.bool()].float().mean() > 0.9


@pytest.mark.parametrize("arch,fields", [VARIANTS[0], VARIANTS[4], VARIANTS[5]], ids=[IDS[0], IDS[4], IDS[5]])
def test_derived_weights_follow_parameter_updates(arch, fields, differentiable):
    model = _model(arch, fields, seed=4)
    ids = seeded_ids(SHAPE["vocab_size"], 2, 8, seed=6)
    with torch.no_grad():
        before = model(input_ids=ids).logits
        for residual in _residuals(model):
            for param in residual.parameters():
                param.mul_(1.5)  # an in-place update, as an optimizer step
        after = model(input_ids=ids).logits
        reference = differentiable(lambda: model(input_ids=ids).logits)
    assert (after - before).abs().max() > 1e-3
    _assert_close(after, reference)


# ------------------------------------------------------------------------------------------------ Sinkhorn early exit
class _CountLogSoftmax(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += func.overloadpacket.__name__ == "_log_softmax"
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("std", [0.01, 0.3, 1.0, 3.0, 30.0])
@pytest.mark.parametrize("gap", [0.0, 8.0])
def test_early_exit_sinkhorn_equals_full_iterations(std, gap):
    n = 4
    z = std * torch.randn(256, n, n, generator=torch.Generator().manual_seed(7))
    z = z + torch.full((n, n), -gap).fill_diagonal_(0.0)
    full = sinkhorn_scaled(z, 20).view(z.shape)  # the differentiable path's (and the training) iterations
    with torch.no_grad():
        for batch in (z, z[:1], z[5:13]):  # the whole batch and decode-sized ones
            fast = sinkhorn_inference(batch.clone(), 20)
            expected = full if batch is z else sinkhorn_scaled(batch, 20).view(batch.shape)
            torch.testing.assert_close(fast, expected, rtol=0, atol=1e-6)
            torch.testing.assert_close(fast.sum(-1), torch.ones(len(batch), n), rtol=0, atol=1e-6)  # rows exact


def test_early_exit_sinkhorn_stops_once_converged():
    """A matrix that one round makes doubly stochastic (symmetric exp(z) with equal row sums, as at the mHC init)
    costs one round; a near-permutation one (gap 8, asymmetric) runs all rounds."""
    n = 4
    symmetric = torch.full((n, n), -8.0).fill_diagonal_(0.0).expand(2, n, n)
    slow = symmetric + 0.1 * torch.randn(2, n, n, generator=torch.Generator().manual_seed(0))
    for z, calls in ((symmetric, 2), (slow, 2 * 20)):
        counter = _CountLogSoftmax()
        with torch.no_grad(), counter:
            out = sinkhorn_inference(z, 20)
        assert counter.calls == calls
        torch.testing.assert_close(out, sinkhorn_scaled(z, 20).view(z.shape), rtol=0, atol=1e-6)
