"""Shared checks for the normalization-placement architectures' tests (post_ln, peri_ln, lns, deepnorm, keel,
mix_ln, depth_mup, completep): tiny models, pre_ln checkpoint transfer, parameter counts, interventions.

Imported by ``tests/modeling/residuals/test_<id>.py``; not a test module itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from depthbench.registry import get
from tests.helpers import build_tiny, eval_logits, seeded_ids

TINY: dict[str, Any] = {
    "vocab_size": 128,
    "hidden_size": 32,
    "intermediate_size": 96,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
}


def build(arch_id: str, seed: int = 0, **overrides: Any) -> torch.nn.Module:
    """A tiny fp32 causal LM of ``arch_id`` in eval mode, deterministic in ``seed``."""
    return build_tiny(arch_id, TINY, seed, **overrides)


def ids(batch: int = 2, length: int = 9, seed: int = 0) -> torch.Tensor:
    return seeded_ids(TINY["vocab_size"], batch, length, seed, low=0)


logits = eval_logits


def copy_shared_weights(src: torch.nn.Module, dst: torch.nn.Module) -> list[str]:
    """Load ``src``'s state dict into ``dst`` by name (non-strict); returns ``dst``'s missing keys."""
    result = dst.load_state_dict(src.state_dict(), strict=False)
    assert not result.unexpected_keys, result.unexpected_keys
    return list(result.missing_keys)


def check_parameter_count(model: torch.nn.Module, expected_extra: int) -> None:
    """The config's count (and its ``extra`` part) equals the built model's."""
    counts = model.config.parameter_counts()
    assert counts["extra"] == expected_extra
    assert model.config.num_extra_parameters() == expected_extra
    assert counts["total"] == sum(p.numel() for p in model.parameters())


def check_pre_ln_transfer(
    arch_id: str, tmp_path: Path, extra_suffix: str | tuple[str, ...] | None, **overrides: Any
) -> None:
    """A saved ``pre_ln`` checkpoint loads by name into ``arch_id``: shared weights equal, only the extra norm gains
    (names ending in ``extra_suffix``; ``None`` = no extra parameters) are missing, and those are initialised to 1.
    Checked both through ``from_pretrained`` (meta-device build + init of missing keys) and ``load_state_dict``."""
    pre = build("pre_ln", seed=1)
    pre.save_pretrained(tmp_path / "pre_ln")
    config = get(arch_id).config_class(**{**TINY, **overrides})
    model, info = get(arch_id).causal_lm_class.from_pretrained(
        tmp_path / "pre_ln", config=config, output_loading_info=True
    )
    assert not info["unexpected_keys"] and not info["mismatched_keys"], info
    missing = sorted(info["missing_keys"])
    expected_missing = sorted(n for n in model.state_dict() if extra_suffix and n.endswith(extra_suffix))
    assert missing == expected_missing
    assert bool(missing) == (extra_suffix is not None)
    pre_state = pre.state_dict()
    for name, tensor in model.state_dict().items():
        if name in pre_state:
            assert torch.equal(tensor, pre_state[name]), name
        else:
            assert torch.equal(tensor, torch.ones_like(tensor)), name
    # load_state_dict(strict=False) into a fresh model: same missing keys, same result.
    fresh = build(arch_id, seed=2, **overrides)
    assert sorted(copy_shared_weights(pre, fresh)) == expected_missing
    x = ids()
    torch.testing.assert_close(logits(fresh, x), logits(model.float().eval(), x), rtol=0, atol=0)


def check_swap_and_skip(model: torch.nn.Module, i: int, j: int, skip: int) -> None:
    """``swap_blocks(i, j)`` changes the logits inside and restores the state dict bit-identically on exit;
    ``skip_block(skip)`` makes that block the identity in ``depth_states`` (z_{skip+1} == z_skip)."""
    x = ids()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    buffers_before = {k: v.clone() for k, v in model.named_buffers()}
    base = logits(model, x)
    with model.swap_blocks(i, j):
        swapped = logits(model, x)
        layers = model.model.layers
        assert torch.equal(layers[i].self_attn.q_proj.weight, before[f"model.layers.{j}.self_attn.q_proj.weight"])
    assert not torch.allclose(swapped, base, atol=1e-6)
    after = model.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert all(torch.equal(v, buffers_before[k]) for k, v in model.named_buffers())
    torch.testing.assert_close(logits(model, x), base, rtol=0, atol=0)

    states = model.depth_states(x)
    assert len(states) == model.config.num_hidden_layers + 1
    assert not torch.equal(states[skip + 1], states[skip])
    with model.skip_block(skip):
        skipped = model.depth_states(x)
    assert torch.equal(skipped[skip + 1], skipped[skip])
    for k in range(skip + 1):  # blocks before the skipped one are untouched
        assert torch.equal(skipped[k], states[k])


def check_card(arch_id: str, arxiv: str) -> None:
    """The registry card is the config docstring: a paragraph, equations and the paper link."""
    card = get(arch_id).card
    assert f"https://arxiv.org/abs/{arxiv}" in card
    assert get(arch_id).arxiv == arxiv
    assert "=" in card and len(card.splitlines()) > 5


# ------------------------------------------------------------------------------------- hand-written reference
def norm_fn(module: torch.nn.Module):
    """A hand-written copy of a norm module: RMSNorm ``w * x / rms(x)`` or LayerNorm ``w * (x - mean) / std``."""
    eps, weight = module.variance_epsilon, module.weight

    def apply(x: torch.Tensor) -> torch.Tensor:
        if type(module).__name__ == "LayerNorm":
            x = x - x.mean(-1, keepdim=True)
        return weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    return apply


def attention_fn(attn: torch.nn.Module, theta: float):
    """Hand-written causal RoPE attention with the module's weights (no mask other than causal)."""

    def apply(x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        hd, h, h_kv = attn.head_dim, attn.num_heads, attn.num_key_value_heads
        q = (x @ attn.q_proj.weight.T).view(b, t, h, hd).transpose(1, 2)
        k = (x @ attn.k_proj.weight.T).view(b, t, h_kv, hd).transpose(1, 2).repeat_interleave(h // h_kv, 1)
        v = (x @ attn.v_proj.weight.T).view(b, t, h_kv, hd).transpose(1, 2).repeat_interleave(h // h_kv, 1)
        inv_freq = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float) / hd)
        angles = torch.arange(t, dtype=torch.float)[:, None] * inv_freq[None]  # [T, hd/2]
        cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)

        def rope(u: torch.Tensor) -> torch.Tensor:
            u1, u2 = u[..., : hd // 2], u[..., hd // 2:]
            return u * cos + torch.cat([-u2, u1], -1) * sin

        scores = rope(q) @ rope(k).transpose(-1, -2) / hd**0.5
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, h * hd)
        return out @ attn.o_proj.weight.T

    return apply


def mlp_fn(mlp: torch.nn.Module):
    """Hand-written SwiGLU ``W_down(silu(W_gate x) * W_up x)``."""
    return lambda x: torch.nn.functional.silu(x @ mlp.gate_proj.weight.T) * (x @ mlp.up_proj.weight.T) @ (
        mlp.down_proj.weight.T
    )


@torch.no_grad()
def reference_logits(model: torch.nn.Module, input_ids: torch.Tensor, update, enter=None) -> torch.Tensor:
    """Logits of a hand-written forward on ``model``'s weights.

    ``update(block, sub, x, norm, branch, residual)`` returns the stream after sublayer ``sub`` (0 = attention,
    1 = MLP) of block ``block``; ``norm`` / ``branch`` are hand-written copies of the sublayer's own norm and of
    attention / MLP, ``residual`` is the model's residual module (to read its extra norms). ``enter`` maps the
    embedding to the first stream (identity by default).
    """
    base = model.model
    x = base.embed_tokens.weight[input_ids]
    if enter is not None:
        x = enter(x)
    for block, layer in enumerate(base.layers):
        theta = model.config.rope_theta
        x = update(block, 0, x, norm_fn(layer.input_layernorm), attention_fn(layer.self_attn, theta),
                   layer.attn_residual)
        x = update(block, 1, x, norm_fn(layer.post_attention_layernorm), mlp_fn(layer.mlp), layer.mlp_residual)
    return norm_fn(base.norm)(x) @ model.lm_head.weight.T


def pre_ln_update(block, sub, x, norm, branch, residual):
    return x + branch(norm(x))


def post_ln_update(block, sub, x, norm, branch, residual):
    return norm(x + branch(x))


def token_rms(x: torch.Tensor) -> torch.Tensor:
    return x.pow(2).mean(-1).sqrt()
