"""No-autograd fast paths (decoding) compute the same function as the differentiable paths.

Without autograd (``torch.no_grad()``: ``generate()``, evaluation) AttnRes / Block AttnRes mix depth from cached key
norms and a cached ``query * key_gain`` (``modeling/modeling_attnres.py``), MoDA scores a single query token with
:func:`moda_single_query_attention` (``modeling/modeling_moda.py``) and Peri-LN fuses its output norm with the
residual add (``OutputRMSNorm(x, residual=stream)``, ``modeling/norms.py``). Each is checked against the
differentiable path (the same model and inputs with autograd on): logits of a full forward and of cached one-token
decode steps, batch 1 and > 1, with left padding, fp32 (and bf16 at bf16 tolerance); and ``generate()`` returns the
same tokens with the fast paths switched off.

Run with::

    python -m pytest tests/modeling/residuals/test_inference_paths.py -q
"""

from __future__ import annotations

import pytest
import torch
from depthbench.modeling import modeling_attnres, modeling_moda, norms
from transformers import DynamicCache

from depthbench.registry import build_model

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


def test_output_norm_with_residual_equals_the_norm_then_the_add():
    norm = norms.OutputRMSNorm(32, eps=1e-5).eval()  # fast paths are for eval-mode modules
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.5 * torch.randn(32, generator=generator))
    stream, x = torch.randn(2, 3, 32, generator=generator), 7 * torch.randn(2, 3, 32, generator=generator)
    x.requires_grad_(True)
    differentiable = norm(x, residual=stream)
    differentiable.sum().backward()
    assert x.grad is not None and norm.weight.grad is not None  # the training path keeps its gradients
    assert "eps" not in norm.__dict__.get("_derived_weights", {})  # autograd on: the differentiable path
    with torch.no_grad():
        torch.testing.assert_close(norm(x, residual=stream), stream + norm(x), rtol=1e-6, atol=1e-6)
        assert "eps" in norm.__dict__["_derived_weights"]  # the fused add ran
        torch.testing.assert_close(norm(x, residual=stream), differentiable, rtol=1e-6, atol=1e-6)
        xb = x.bfloat16()  # a bf16 branch output (autocast): normalised in fp32, cast back, then scaled
        torch.testing.assert_close(norm(xb, residual=stream), stream + norm(xb), rtol=1e-6, atol=1e-5)
        norm.train()  # a training-mode module (reentrant checkpointing's no-grad forward) keeps the plain sum
        norm.__dict__["_derived_weights"].clear()
        assert torch.equal(norm(x, residual=stream), stream + norm(x))
        assert "eps" not in norm.__dict__["_derived_weights"]
