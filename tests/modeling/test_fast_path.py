"""The no-autograd fast paths (``modeling/fast_path.py``: decoding, evaluation) compute the same function as the
differentiable paths.

The switches themselves (eval mode without autograd; derived weights rebuilt after a parameter change), then each
architecture's fast path against its differentiable path (the same model and inputs with autograd on): AttnRes /
Block AttnRes mix depth from cached key norms and a cached ``query * key_gain`` (``modeling/modeling_attnres.py``),
MoDA scores a single query token with :func:`moda_single_query_attention` (``modeling/modeling_moda.py``), Peri-LN
fuses its output norm with the residual add (``modeling/norms.py``), HC and mHC take ``_inference_forward``: logits
of a full forward (with padding masks) and of cached one-token decode steps, batch 1 and > 1, fp32 (and bf16 at bf16
tolerance), and ``generate()`` returns the same tokens with the fast paths switched off.

Run: ``python -m pytest tests/modeling/test_fast_path.py -q``
"""

from __future__ import annotations

import pytest
import torch
from depthbench.modeling import modeling_attnres, modeling_hc, modeling_mhc, modeling_moda, norms
from depthbench.modeling.fast_path import derived_weights, inference_fast_path
from transformers import DynamicCache

from depthbench.registry import build_model
from tests.helpers import build_tiny, cache_of, left_pad, seeded_ids


def test_fast_path_only_in_eval_mode_without_autograd():
    module = torch.nn.Linear(2, 2).eval()
    assert not inference_fast_path(module)  # autograd on
    with torch.no_grad():
        assert inference_fast_path(module)
        # a training-mode module (e.g. the no-grad forward of reentrant activation checkpointing) keeps the
        # differentiable path, so that forward is bitwise the one recomputed in the backward pass
        assert not inference_fast_path(module.train())
    with torch.inference_mode():
        assert inference_fast_path(module.eval())


def test_derived_weights_rebuild_after_every_parameter_change():
    layer = torch.nn.Linear(3, 3)
    builds = []

    def build():
        builds.append(1)
        return layer.weight.sum() * 2

    with torch.no_grad():
        first = derived_weights(layer, "twice_sum", build, layer.weight)
        assert derived_weights(layer, "twice_sum", build, layer.weight) is first and len(builds) == 1
        layer.weight.add_(1.0)  # an optimizer step: in place, same storage
        after_step = derived_weights(layer, "twice_sum", build, layer.weight)
        torch.testing.assert_close(after_step, first + 18)
        layer.load_state_dict({"weight": torch.zeros(3, 3), "bias": torch.zeros(3)})
        torch.testing.assert_close(derived_weights(layer, "twice_sum", build, layer.weight), torch.tensor(0.0))
        layer.weight = torch.nn.Parameter(torch.ones(3, 3))  # a new storage
        torch.testing.assert_close(derived_weights(layer, "twice_sum", build, layer.weight), torch.tensor(18.0))
    assert len(builds) == 4


ARCHS = ["attnres", "block_attnres", "moda", "peri_ln"]


SHAPE = dict(
    vocab_size=96, hidden_size=64, intermediate_size=176, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64,
)


#: Per architecture, the fast-path function a no-autograd decode step must call (module, attribute).
FAST_PATH = {
    "attnres": (modeling_attnres, "fast_inv_rms"),
    "block_attnres": (modeling_attnres, "fast_inv_rms"),
    "moda": (modeling_moda, "moda_single_query_attention"),
    "peri_ln": (norms.OutputRMSNorm, "_add_normed"),
}


#: Relative to the logits' scale (fp32 rounding through four blocks of different summation orders).
FP32_REL = 1e-5


def make(arch: str, attn_implementation: str = "sdpa", dtype: torch.dtype = torch.float32, **overrides):
    """A model whose norm gains, key gains and pseudo-queries are random (not the uniform-mixing init)."""
    torch.manual_seed(0)
    model = build_model(arch, attn_implementation=attn_implementation, **{**SHAPE, **overrides})
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:  # gains (init 1) and AttnRes queries (init 0)
                param.add_(0.5 * torch.randn(param.shape, generator=generator))
    return model.to(dtype).eval()


def inputs(batch: int, length: int, seed: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and a 0/1 mask, left-padded by 1, 2, ... tokens from the second row on."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, SHAPE["vocab_size"], (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    for row in range(1, batch):
        mask[row, :row] = 0
    return ids, mask


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids as ``generate()`` derives them from a left-padded mask."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def decode(model, ids, mask, steps: int, grad: bool) -> list[torch.Tensor]:
    """Logits of a prefill and of ``steps`` cached one-token steps (fixed next tokens), with or without autograd."""
    generator = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, SHAPE["vocab_size"], (ids.shape[0], steps), generator=generator)
    cache = DynamicCache(config=model.config)
    with torch.set_grad_enabled(grad):
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), cache=cache, use_cache=True)
        logits = [out.logits.detach()]
        for step in range(steps):
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = model(input_ids=tokens[:, step:step + 1], attention_mask=mask,
                        position_ids=positions(mask)[:, -1:], cache=cache, use_cache=True)
            logits.append(out.logits.detach())
    return logits


def assert_real_rows_close(fast: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor, rel: float) -> None:
    """Logits at real (unpadded) positions agree within ``rel`` relative to their scale: elementwise within
    ``rel * max|reference|`` and as a whole within ``rel`` in norm (float rounding, accumulated over the layers,
    is relative to the logits' scale, not to each small logit). Padded positions attend to nothing meaningful."""
    real = mask[:, -fast.shape[1]:].bool()
    fast, reference = fast[real].double(), reference[real].double()
    scale = reference.abs().max()
    assert scale > 0.1  # a real signal, not all-zero logits
    torch.testing.assert_close(fast, reference, rtol=0, atol=float(rel * scale))
    assert (fast - reference).norm() <= rel * reference.norm()


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("arch", ARCHS)
def test_full_forward_without_autograd_equals_the_differentiable_forward(arch, attn_implementation):
    model = make(arch, attn_implementation)
    for batch in (1, 3):
        ids, mask = inputs(batch, 9)
        with torch.no_grad():
            fast = model(input_ids=ids, attention_mask=mask).logits
        reference = model(input_ids=ids, attention_mask=mask).logits.detach()
        assert_real_rows_close(fast, reference, mask, FP32_REL)


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("arch", ARCHS)
def test_cached_decode_steps_take_the_fast_path_and_equal_the_differentiable_steps(
    arch, attn_implementation, monkeypatch
):
    model = make(arch, attn_implementation)
    owner, name = FAST_PATH[arch]
    original, calls = getattr(owner, name), []

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    for batch in (1, 3):
        ids, mask = inputs(batch, 7)
        calls.clear()
        fast = decode(model, ids, mask, steps=4, grad=False)
        assert calls, f"{arch}: the no-autograd decode never called {name}"
        calls.clear()
        reference = decode(model, ids, mask, steps=4, grad=True)
        assert not calls, f"{arch}: the differentiable path called the fast-path function {name}"
        full_mask = torch.cat([mask, torch.ones(batch, 4, dtype=torch.long)], dim=1)
        for step, (f, r) in enumerate(zip(fast, reference)):
            step_mask = full_mask[:, :mask.shape[1] + step]
            assert_real_rows_close(f, r, step_mask, FP32_REL)


@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_fast_path_matches_the_differentiable_path_to_bf16_precision(arch):
    """bf16 weights: both paths round differently (e.g. Peri-LN's fused add rounds once where the norm-then-add
    rounds twice); measured gaps are <= 2% of the logits' scale, no more than the bf16 reference's own gap to
    fp32, so 5% catches a wrong formula without flagging rounding."""
    model = make(arch, dtype=torch.bfloat16)
    ids, mask = inputs(3, 7)
    fast = decode(model, ids, mask, steps=3, grad=False)
    reference = decode(model, ids, mask, steps=3, grad=True)
    full_mask = torch.cat([mask, torch.ones(3, 3, dtype=torch.long)], dim=1)
    for step, (f, r) in enumerate(zip(fast, reference)):
        assert f.dtype == r.dtype == torch.bfloat16
        assert_real_rows_close(f, r, full_mask[:, :mask.shape[1] + step], 0.05)


@pytest.mark.parametrize("arch", ARCHS)
def test_generate_returns_the_same_tokens_with_and_without_the_fast_paths(arch, monkeypatch):
    model = make(arch)
    ids, mask = inputs(2, 6)
    kwargs = dict(attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None)
    fast = model.generate(ids, **kwargs)
    for module in (modeling_attnres, modeling_moda, norms):  # Peri-LN: its OutputRMSNorm
        monkeypatch.setattr(module, "inference_fast_path", lambda module: False)
    slow = model.generate(ids, **kwargs)
    assert fast.shape == (2, 6 + 8)
    torch.testing.assert_close(fast, slow, rtol=0, atol=0)


def test_single_query_attention_equals_moda_attention_with_masks_and_gqa():
    """The decode kernel against the reference explicit math, for every mask form and a RoPE depth factor."""
    generator = torch.Generator().manual_seed(4)
    b, h, hkv, kv_len, hd, s = 3, 4, 2, 6, 16, 5
    query = torch.randn(b, h, 1, hd, generator=generator)
    key, value = (torch.randn(b, hkv, kv_len, hd, generator=generator) for _ in range(2))
    depth_keys = [torch.randn(b, hkv, 1, hd, generator=generator) for _ in range(s)]
    depth_values = [torch.randn(b, hkv, 1, hd, generator=generator) for _ in range(s)]
    allowed = torch.ones(b, 1, 1, kv_len, dtype=torch.bool)
    allowed[1, ..., :2] = False
    additive = torch.zeros(b, 1, 1, kv_len).masked_fill(~allowed, torch.finfo(torch.float32).min)
    for mask in (None, allowed, additive):
        for depth_scale in (1.0, 1.3):
            for slots in (s, 0):
                dk, dv = (depth_keys[:slots], depth_values[:slots]) if slots else (None, None)
                with torch.no_grad():
                    out, weights = modeling_moda.moda_single_query_attention(
                        query, key, value, dk, dv, mask, scaling=hd**-0.5, depth_scale=depth_scale,
                        need_weights=True)
                ref_out, ref_weights = modeling_moda.moda_attention(
                    query, key, value, dk, dv, mask, scaling=hd**-0.5, depth_scale=depth_scale)
                torch.testing.assert_close(out, ref_out, rtol=1e-6, atol=1e-6)
                torch.testing.assert_close(weights, ref_weights, rtol=1e-6, atol=1e-6)
                if mask is not None:
                    assert weights[1, :, 0, :2].abs().max() == 0  # masked keys get no weight


HC_SHAPE = dict(vocab_size=128, hidden_size=32, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
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


HC_IDS = [f"{arch}-{'-'.join(f'{k}={v}' for k, v in fields.items()) or 'default'}" for arch, fields in VARIANTS]


def _residuals(model):
    return [r for layer in model.model.layers for r in (layer.attn_residual, layer.mlp_residual)]


def _model(arch: str, fields: dict, seed: int = 0, noise: float = 0.1):
    """A tiny model whose mixing parameters are moved off their init (input-dependent, asymmetric maps)."""
    model = build_tiny(arch, HC_SHAPE, seed, **fields)
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
    rows = [seeded_ids(HC_SHAPE["vocab_size"], 1, length, seed + length)[0] for length in (11, 7, 9)]
    return left_pad(rows)


@pytest.mark.parametrize("arch,fields", VARIANTS, ids=HC_IDS)
@pytest.mark.parametrize("batch", [1, 3])
def test_hc_full_forward_logits_match(arch, fields, batch, differentiable):
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


@pytest.mark.parametrize("arch,fields", VARIANTS, ids=HC_IDS)
@pytest.mark.parametrize("batch", [1, 3])
def test_hc_cached_decode_logits_match(arch, fields, batch, differentiable):
    model = _model(arch, fields, seed=1)
    ids, mask = _padded_batch(seed=5)
    ids, mask = ids[:batch], mask[:batch]
    step = seeded_ids(HC_SHAPE["vocab_size"], batch, 1, seed=9)
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


@pytest.mark.parametrize("arch,fields", VARIANTS, ids=HC_IDS)
def test_hc_generate_tokens_identical(arch, fields, differentiable):
    model = _model(arch, fields, seed=2)
    ids, mask = _padded_batch(seed=3)
    kwargs = dict(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0,
                  eos_token_id=None)
    fast = model.generate(**kwargs)
    reference = differentiable(lambda: model.generate(**kwargs))
    assert fast.shape == (3, ids.shape[1] + 12)
    torch.testing.assert_close(fast, reference, rtol=0, atol=0)


@pytest.mark.parametrize("arch,fields", [VARIANTS[0], VARIANTS[4], VARIANTS[5]], ids=[HC_IDS[0], HC_IDS[4], HC_IDS[5]])
def test_hc_bf16_autocast_matches(arch, fields, differentiable):
    """Under bf16 autocast both paths run the stream mixing in bf16 and the gate math in fp32."""
    model = _model(arch, fields, seed=3)
    ids, mask = _padded_batch(seed=4)

    def forward():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float()

    fast, reference = forward(), differentiable(forward)
    _assert_close(fast[mask.bool()], reference[mask.bool()], rtol=2e-2)
    assert (fast.argmax(-1) == reference.argmax(-1))[mask.bool()].float().mean() > 0.9


@pytest.mark.parametrize("arch,fields", [VARIANTS[0], VARIANTS[4], VARIANTS[5]], ids=[HC_IDS[0], HC_IDS[4], HC_IDS[5]])
def test_hc_derived_weights_follow_parameter_updates(arch, fields, differentiable):
    model = _model(arch, fields, seed=4)
    ids = seeded_ids(HC_SHAPE["vocab_size"], 2, 8, seed=6)
    with torch.no_grad():
        before = model(input_ids=ids).logits
        for residual in _residuals(model):
            for param in residual.parameters():
                param.mul_(1.5)  # an in-place update, as an optimizer step
        after = model(input_ids=ids).logits
        reference = differentiable(lambda: model(input_ids=ids).logits)
    assert (after - before).abs().max() > 1e-3
    _assert_close(after, reference)
