"""MoDA (Mixture-of-Depths Attention) math: the per-architecture oracles of ``modeling/modeling_moda.py``.

Checks a token-by-token reference of the whole model (Pre-LN and post-norm, GQA), the "depth masked == Pre-LN"
oracle, same-position depth entries, weights summing to 1 over [sequence | depth], the depth-cache layout, the
skip-block rule (zero slots), ``kv_proj`` init and the exact parameter count, and generation with the KV cache.

Run with::

    python -m pytest tests/modeling/residuals/test_moda.py -q
"""

from __future__ import annotations

import math

import pytest
import torch
from depthbench.modeling import modeling_moda
from depthbench.modeling.modeling_moda import (
    DepthIO,
    MoDAConfig,
    MoDAForCausalLM,
    MoDAStream,
    additive_mask,
    moda_attention,
    moda_attention_sdpa,
)
from depthbench.modeling.modeling_pre_ln import PreLNConfig, PreLNForCausalLM

SHAPE = dict(
    vocab_size=128, hidden_size=64, intermediate_size=176, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64,
)


def make_moda(seed: int = 0, attn_implementation: str = "eager", **overrides) -> MoDAForCausalLM:
    config = MoDAConfig(**{**SHAPE, **overrides})
    config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    return MoDAForCausalLM(config).float().eval()


def ids_of(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, SHAPE["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(seed))


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on ``[T, hd]`` written out independently of the backbone helper."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


@torch.no_grad()
def reference_logits(model: MoDAForCausalLM, ids: torch.Tensor) -> torch.Tensor:
    """MoDA written token by token: for every (batch, token, head) one softmax over an explicit key list."""
    cfg, base = model.config, model.model
    post = cfg.moda_post_norm
    heads, kv_heads, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    group = heads // kv_heads
    x = base.embed_tokens(ids)
    batch, length, _ = x.shape
    cos, sin = (c[0] for c in base.rotary_emb(x, torch.arange(length)[None]))  # [T, hd]
    depth_k: list[torch.Tensor] = []  # slots, each [B, T, H_kv, hd]
    depth_v: list[torch.Tensor] = []
    for index, layer in enumerate(base.layers):
        attn = layer.self_attn
        u = x if post else layer.input_layernorm(x)
        q = attn.q_proj(u).view(batch, length, heads, hd)
        k = attn.k_proj(u).view(batch, length, kv_heads, hd)
        v = attn.v_proj(u).view(batch, length, kv_heads, hd)
        out = torch.zeros(batch, length, heads, hd)
        for b in range(batch):
            for t in range(length):
                for h in range(heads):
                    kh = h // group
                    qt = rope(q[b, t, h], cos[t], sin[t])
                    keys = [rope(k[b, j, kh], cos[j], sin[j]) for j in range(t + 1)]
                    keys += [slot[b, t, kh] for slot in depth_k]
                    vals = [v[b, j, kh] for j in range(t + 1)] + [slot[b, t, kh] for slot in depth_v]
                    w = torch.softmax(torch.stack([qt @ key for key in keys]) / math.sqrt(hd), dim=0)
                    out[b, t, h] = sum(wi * vi for wi, vi in zip(w, vals))
        depth_k.append(k)
        depth_v.append(v)
        x = x + attn.o_proj(out.reshape(batch, length, -1))
        if post:
            x = layer.input_layernorm(x)
        m = x if post else layer.post_attention_layernorm(x)
        if index < cfg.num_hidden_layers - 1:
            kv = layer.mlp_residual.kv_proj(m).view(batch, length, 2, kv_heads, hd)
            depth_k.append(kv[:, :, 0])
            depth_v.append(kv[:, :, 1])
        x = x + layer.mlp(m)
        if post:
            x = layer.post_attention_layernorm(x)
    return model.lm_head(base.norm(x))


# ------------------------------------------------------------------------------------------------ whole-model math
@pytest.mark.parametrize("post_norm", [False, True])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_matches_token_by_token_reference(post_norm, attn_implementation):
    model = make_moda(seed=1, attn_implementation=attn_implementation, moda_post_norm=post_norm)
    ids = ids_of(2, 6)
    with torch.no_grad():
        logits = model(ids, use_cache=False).logits
    expected = reference_logits(model, ids)
    assert torch.allclose(logits, expected, atol=2e-5, rtol=1e-4), (logits - expected).abs().max()


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_depth_masked_equals_pre_ln_with_same_weights(attn_implementation):
    """Oracle 1: with every depth key masked, MoDA attention is plain causal attention, i.e. the model is Pre-LN."""
    torch.manual_seed(0)
    pre_ln = PreLNForCausalLM(PreLNConfig(**SHAPE)).float().eval()
    pre_ln.config._attn_implementation = attn_implementation
    model = make_moda(seed=5, attn_implementation=attn_implementation, moda_depth=False)
    missing, unexpected = model.load_state_dict(pre_ln.state_dict(), strict=False)
    assert not unexpected and missing and all("kv_proj" in name for name in missing)
    ids = ids_of(2, 7)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding in the second row
    with torch.no_grad():
        got = model(ids, attention_mask=mask).logits
        want = pre_ln(ids, attention_mask=mask).logits
    real = mask.bool()
    assert torch.allclose(got[real], want[real], atol=1e-5)
    # ... and with depth on, the same weights give different logits (the depth keys matter)
    model.config.moda_depth = True
    for module in model.modules():
        if hasattr(module, "use_depth"):
            module.use_depth = True
    with torch.no_grad():
        assert (model(ids, attention_mask=mask).logits[real] - want[real]).abs().max() > 1e-3


# ------------------------------------------------------------------------------------------------ attention kernel
def random_attention_inputs(seed: int = 0, b: int = 2, h: int = 4, hkv: int = 2, t: int = 5, s: int = 3, hd: int = 8):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, t, hd, generator=g)
    k = torch.randn(b, hkv, t, hd, generator=g)
    v = torch.randn(b, hkv, t, hd, generator=g)
    dk = torch.randn(b, hkv, t, s, hd, generator=g)
    dv = torch.randn(b, hkv, t, s, hd, generator=g)
    return q, k, v, dk, dv


def test_weights_over_sequence_and_depth_sum_to_one():
    """Oracle 3: one softmax over [sequence | depth]; future sequence keys get exactly zero weight."""
    q, k, v, dk, dv = random_attention_inputs()
    t, s = q.shape[2], dk.shape[3]
    _, weights = moda_attention(q, k, v, dk, dv, None, scaling=q.shape[-1] ** -0.5)
    assert weights.shape == (2, 4, t, t + s)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 4, t), atol=1e-6)
    future = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    assert weights[..., :t][..., future].abs().max() == 0
    assert (weights[..., t:] > 0).all()  # depth keys are always visible, including at token 0
    # the depth part of the softmax equals exp(q . kappa * scale) / Z with the same Z as the sequence part
    qg = q.view(2, 2, 2, t, -1)
    logits = torch.einsum("bkgtd,bktsd->bkgts", qg, dk).reshape(2, 4, t, s) * q.shape[-1] ** -0.5
    seq_logits = (qg @ k.unsqueeze(2).transpose(-1, -2)).reshape(2, 4, t, t) * q.shape[-1] ** -0.5
    z = torch.cat([seq_logits.masked_fill(future, float("-inf")), logits], -1).logsumexp(-1, keepdim=True)
    assert torch.allclose(weights[..., t:], (logits - z).exp(), atol=1e-6)


def test_depth_entries_come_only_from_the_same_position():
    """Oracle 2: perturbing token s's depth key/value changes the output at position s only."""
    q, k, v, dk, dv = random_attention_inputs(seed=3)
    out, _ = moda_attention(q, k, v, dk, dv, None, scaling=0.35)
    for pos in range(q.shape[2]):
        dk2, dv2 = dk.clone(), dv.clone()
        dk2[:, :, pos] += 1.0
        dv2[:, :, pos] -= 2.0
        out2, _ = moda_attention(q, k, v, dk2, dv2, None, scaling=0.35)
        changed = (out2 - out).abs().amax(dim=(0, 2, 3)) > 1e-6  # per position
        assert changed.tolist() == [p == pos for p in range(q.shape[2])]


def test_no_depth_is_plain_causal_attention_and_mask_formats_agree():
    q, k, v, dk, dv = random_attention_inputs(seed=4)
    t = q.shape[2]
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), is_causal=True
    ).transpose(1, 2)
    out, _ = moda_attention(q, k, v, None, None, None, scaling=q.shape[-1] ** -0.5)
    assert torch.allclose(out, ref, atol=1e-6)
    # padding mask: None / 2-D / sdpa bool / eager float give the same additive mask
    pad = torch.ones(2, t, dtype=torch.long)
    pad[0, :2] = 0
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
    as_bool = causal[None, None] & pad[:, None, None, :].bool()
    as_float = torch.zeros(2, 1, t, t).masked_fill(~as_bool, torch.finfo(torch.float32).min)
    reference = additive_mask(as_bool, t, t, q.device)
    assert torch.equal(additive_mask(pad, t, t, q.device), reference)
    assert torch.equal(additive_mask(as_float, t, t, q.device), reference)
    # no mask = sdpa's is_causal: top-left aligned (a static-cache prefill: keys after the prompt are empty slots)
    assert torch.equal(additive_mask(None, 2, 5, q.device)[0, 0], reference[1, 0, :2, :5])
    assert torch.equal(additive_mask(None, 1, 5, q.device), torch.zeros(1, 1, 1, 5))  # one query sees every key
    with pytest.raises(NotImplementedError, match="eager"):
        additive_mask(object(), t, t, q.device)
    # a query row whose sequence keys are all masked stays finite (depth keys, or uniform at worst)
    out, weights = moda_attention(q, k, v, dk, dv, as_bool, scaling=0.3)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()


@pytest.mark.parametrize("case", ["causal", "causal_more_slots_than_tokens", "causal_no_depth", "padded", "decode"])
@pytest.mark.parametrize("causal_min_tokens", [0, 10**9])
def test_fused_sdpa_path_equals_explicit_math_with_gradients(case, causal_min_tokens, monkeypatch):
    """The SDPA path (selector keys carry the depth logits) is the same function as the explicit softmax; without a
    mask or cached keys it runs as square causal SDPA over the selectors and the sequence (zero queries in front),
    or with an explicit mask (short sequences on CPU)."""
    monkeypatch.setattr(modeling_moda, "CPU_CAUSAL_MIN_TOKENS", causal_min_tokens)
    q, k, v, dk, dv = random_attention_inputs(seed=6, t=6, s=9 if case == "causal_more_slots_than_tokens" else 4)
    if case == "causal_no_depth":
        dk = dv = dk[:, :, :, :0]
    mask = None
    if case == "padded":
        mask = torch.tril(torch.ones(6, 6, dtype=torch.bool))[None, None].repeat(2, 1, 1, 1)
        mask[1, :, :, :2] = False  # left padding: rows 0-1 of sample 1 see no sequence key at all
    elif case == "decode":  # the last 2 queries of 6 cached positions (KV cache step)
        q, dk, dv = q[:, :, -2:], dk[:, :, -2:], dv[:, :, -2:]
    leaves = [x.clone().requires_grad_() for x in (q, k, v, dk, dv)]
    other = [x.clone().requires_grad_() for x in (q, k, v, dk, dv)]
    out_a, _ = moda_attention(*leaves, mask, scaling=0.35)
    out_b, weights = moda_attention_sdpa(*other, mask, scaling=0.35)
    assert weights is None and out_a.shape == out_b.shape
    assert torch.allclose(out_a, out_b, atol=1e-5)
    cotangent = torch.randn_like(out_a)
    (out_a * cotangent).sum().backward()
    (out_b * cotangent).sum().backward()
    for a, b in zip(leaves, other):
        if a.numel():  # (empty depth slots get no gradient)
            assert torch.allclose(a.grad, b.grad, atol=1e-5)


def test_model_causal_and_masked_sdpa_paths_agree_in_training(monkeypatch):
    """A whole training step (loss and every gradient) is the same function whichever SDPA path the attention takes."""
    ids = ids_of(2, 12, seed=3)
    sdpa, calls = torch.nn.functional.scaled_dot_product_attention, []

    def spy(*args, **kwargs):  # which path each attention call took: (is_causal, explicit mask)
        calls.append((kwargs.get("is_causal", False), kwargs.get("attn_mask") is not None))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(modeling_moda.F, "scaled_dot_product_attention", spy)
    results = []
    for threshold, path in ((0, (True, False)), (10**9, (False, True))):  # causal kernel / explicit mask
        monkeypatch.setattr(modeling_moda, "CPU_CAUSAL_MIN_TOKENS", threshold)
        model = make_moda(seed=4, attn_implementation="sdpa").train()
        calls.clear()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        assert calls and set(calls) == {path}
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    torch.testing.assert_close(loss_a, loss_b, rtol=0, atol=1e-5)
    for name, grad in grads_a.items():
        torch.testing.assert_close(grad, grads_b[name], rtol=0, atol=1e-5, msg=name)


def test_attention_writes_its_pre_rope_key_value_to_the_depth_slot():
    model = make_moda()
    attn = model.model.layers[1].self_attn
    u = torch.randn(2, 5, SHAPE["hidden_size"])
    cos, sin = model.model.rotary_emb(u, torch.arange(5)[None] + 3)
    depth = DepthIO()
    attn(u, (cos, sin), None, depth=depth)
    k_expected = attn.k_proj(u).view(2, 5, 2, 16).transpose(1, 2)
    assert torch.equal(depth.new_key, k_expected)  # no RoPE although positions start at 3
    assert torch.equal(depth.new_value, attn.v_proj(u).view(2, 5, 2, 16).transpose(1, 2))


# ------------------------------------------------------------------------------------------------ depth cache plumbing
def capture_streams(model: MoDAForCausalLM) -> tuple[list[MoDAStream], list[MoDAStream], list]:
    inputs, outputs = [], []

    def hook(module, args, out) -> None:
        inputs.append(args[0])
        outputs.append(out)

    return inputs, outputs, [layer.register_forward_hook(hook) for layer in model.model.layers]


def test_depth_cache_layout_and_skip_block_zero_slots():
    model = make_moda(num_hidden_layers=4)
    ids = ids_of(2, 5)
    inputs, outputs, handles = capture_streams(model)
    with torch.no_grad():
        full = model(ids).logits
        assert [len(o.keys) for o in outputs] == [2, 4, 6, 7]  # slot 2L-1 is never written
        inputs.clear()
        outputs.clear()
        with model.skip_block(1):
            skipped = model(ids).logits
    for handle in handles:
        handle.remove()
    stream_in, stream_out = inputs[1], outputs[1]
    assert torch.equal(stream_out.hidden, stream_in.hidden)  # identity on the hidden state
    assert len(stream_out.keys) == 4 and len(stream_out.values) == 4
    for slot in (2, 3):
        assert stream_out.keys[slot].abs().max() == 0 and stream_out.values[slot].abs().max() == 0
        assert stream_out.keys[slot].shape == (2, 2, 5, 16)
    assert (skipped - full).abs().max() > 1e-4
    # the zero slots are visible (logit 0), not masked: the result differs from dropping them
    model.model.wiring.skip_layer = lambda layer, stream: stream
    with torch.no_grad(), model.skip_block(1):
        dropped = model(ids).logits
    assert (dropped - skipped).abs().max() > 1e-6


def test_depth_gradients_reach_earlier_blocks_and_kv_proj():
    model = make_moda().train()
    ids = ids_of(2, 6)
    model(ids, labels=ids).loss.backward()
    # kv_proj feeds nothing but depth slots, so a gradient on it proves the depth path is differentiable
    for layer in model.model.layers[:-1]:
        assert layer.mlp_residual.kv_proj.weight.grad.abs().sum() > 0
    assert model.model.layers[-1].mlp_residual.kv_proj is None
    assert all(p.grad is not None for p in model.parameters())


# ------------------------------------------------------------------------------------------------ config, params, init
def test_parameter_count_and_config_validation():
    for overrides in ({}, {"num_key_value_heads": 4}, {"num_hidden_layers": 1}, {"moda_post_norm": True}):
        model = make_moda(**overrides)
        cfg = model.config
        extra = 2 * cfg.hidden_size * cfg.num_key_value_heads * cfg.head_dim * (cfg.num_hidden_layers - 1)
        assert cfg.num_extra_parameters() == extra
        assert cfg.parameter_counts()["total"] == sum(p.numel() for p in model.parameters())
        kv = sum(p.numel() for n, p in model.named_parameters() if "kv_proj" in n)
        assert kv == extra
    with pytest.raises(ValueError, match="moda_post_norm"):
        MoDAConfig(**SHAPE, moda_post_norm="yes")
    with pytest.raises(ValueError, match="moda_depth"):
        MoDAConfig(**SHAPE, moda_depth=1)


def test_kv_proj_init_is_truncated_normal_also_when_loading_a_pre_ln_checkpoint(tmp_path):
    torch.manual_seed(0)
    wide = dict(SHAPE, hidden_size=256, num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=2)
    pre_ln = PreLNForCausalLM(PreLNConfig(**wide))
    pre_ln.save_pretrained(tmp_path)
    model = MoDAForCausalLM.from_pretrained(tmp_path, moda_post_norm=False)
    assert isinstance(model.config, MoDAConfig)
    w = model.model.layers[0].mlp_residual.kv_proj.weight
    assert torch.isfinite(w).all() and w.abs().max() <= 0.06 + 1e-6  # cut at 3 std
    assert 0.015 < w.std().item() < 0.021  # truncated normal std 0.02 (~0.0176), not Kaiming (1/sqrt(3d) ~ 0.036)
    for name, tensor in pre_ln.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name


# ------------------------------------------------------------------------------------------------ generation
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_generation_with_cache_incremental_and_left_padding(attn_implementation):
    model = make_moda(seed=2, attn_implementation=attn_implementation)
    ids = ids_of(1, 6, seed=7)
    with torch.no_grad():
        cached = model.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
        uncached = model.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0, use_cache=False)
        assert torch.equal(cached, uncached)
        # incremental decoding == full forward
        full = model(cached).logits
        out = model(cached[:, :6], use_cache=True)
        steps = [out.logits]
        for pos in range(6, cached.shape[1]):
            cache = getattr(out, "cache", None)  # transformers 5.24 field name ...
            cache = out.past_key_values if cache is None else cache  # ... and 5.23's
            out = model(cached[:, pos:pos + 1], cache=cache, use_cache=True)
            steps.append(out.logits)
        assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
        # left-padded batch == each sequence alone
        short = ids_of(1, 3, seed=8)
        batch = torch.cat([ids, torch.cat([torch.zeros(1, 3, dtype=torch.long), short], 1)])
        mask = (torch.arange(6)[None] >= torch.tensor([[0], [3]])).long()
        together = model.generate(batch, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
        alone = model.generate(short, max_new_tokens=4, do_sample=False, pad_token_id=0)
        assert torch.equal(together[0, 6:], cached[0, 6:10])
        assert torch.equal(together[1, 6:], alone[0, 3:])


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_bf16_left_padded_forward_is_finite_and_close_to_fp32(attn_implementation):
    model = make_moda(seed=3, attn_implementation=attn_implementation)
    ids = ids_of(2, 8)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    with torch.no_grad():
        ref = model(ids, attention_mask=mask).logits
        low = model.to(torch.bfloat16)(ids, attention_mask=mask).logits
    assert low.dtype == torch.bfloat16 and torch.isfinite(low).all()  # padded rows included
    assert (low.float() - ref)[mask.bool()].abs().max() < 0.05


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_rope_attention_factor_is_one_temperature_for_sequence_and_depth_keys(attn):
    """YaRN/LongRoPE's attention factor m multiplies cos and sin, i.e. every rotated query and key: sequence logits
    get m^2. The position-free depth keys get the second m too, so the model equals plain RoPE with W_q, W_k and
    the key half of every kv_proj scaled by m (YaRN with factor 1 changes only the attention factor)."""
    m = 1.3
    scaled = make_moda(attn_implementation=attn, rope_parameters={"rope_type": "yarn", "factor": 1.0,
                                                                  "attention_factor": m})
    plain = make_moda(attn_implementation=attn)
    plain.load_state_dict(scaled.state_dict())
    kv_width = SHAPE["num_key_value_heads"] * SHAPE["hidden_size"] // SHAPE["num_attention_heads"]
    with torch.no_grad():
        for layer in plain.model.layers:
            layer.self_attn.q_proj.weight.mul_(m)
            layer.self_attn.k_proj.weight.mul_(m)
            if layer.mlp_residual.kv_proj is not None:
                layer.mlp_residual.kv_proj.weight[:kv_width].mul_(m)  # [key heads | value heads]
    x = ids_of(2, 7, seed=5)
    with torch.no_grad():
        a, b = scaled(x, use_cache=False).logits, plain(x, use_cache=False).logits
    assert torch.allclose(a, b, atol=1e-5)
