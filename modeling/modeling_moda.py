"""MoDA: Mixture-of-Depths Attention (the study's ``moda`` and ``post_norm_moda`` blocks).

Ships to the Hugging Face Hub as remote code (imports only torch, transformers and sibling files).

Every attention query at token t attends, in one softmax, over the causal sequence keys of its own layer *and* over
the keys/values that earlier sublayers produced for the same token t (the "depth cache"). The attention math is
pure PyTorch (no custom kernel): :func:`moda_attention` concatenates sequence scores ``[B, H, T, T_kv]`` and
same-position depth scores ``[B, H, T, S]`` along the key axis and normalises them with one fp32 softmax (eager);
:func:`moda_attention_sdpa` computes the same function through one fused SDPA call (sdpa, the default). The
products with the per-token depth slots (memory-lean under autograd) are in ``moda_depth_slots.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.utils import logging

from .configuration_depthbench import DepthBenchConfig
from .depthbench_checkpointing import stream_checkpointing  # noqa: F401  (a direct import: see hf_compat.py)
from .fast_path import inference_fast_path
from .hf_compat import OutputRecorder, cache_update
from .moda_depth_slots import depth_logits, depth_readout, num_slots
from .modeling_depthbench import (
    Attention,
    Branch,
    DepthBenchForCausalLM,
    DepthBenchForQuestionAnswering,
    DepthBenchForSequenceClassification,
    DepthBenchForTokenClassification,
    DepthBenchModel,
    Norm,
    Residual,
    Wiring,
    apply_rotary_pos_emb,
    rope_init,
)
from .norms import make_norm  # noqa: F401  (a direct import: see hf_compat.py)
from .numerics import as_dtype, upcast

# Under sdpa, MoDA's fused attention computes no weights: it warns through transformers' own sdpa logger with its
# message (once per process), exactly as Llama's sdpa attention does, and returns none.
_SDPA_LOGGER = logging.get_logger("transformers.integrations.sdpa_attention")
_SDPA_NO_WEIGHTS = (
    "`sdpa` attention does not support `output_attentions=True`."
    " Please set your attention to `eager` if you want any of these features."
)


class MoDAConfig(DepthBenchConfig):
    r"""MoDA, Mixture-of-Depths Attention (Zhu et al., arXiv 2603.15619; https://arxiv.org/abs/2603.15619).

    Identical to Pre-LN except that attention also looks *down the depth axis*: the query of token t in block l
    attends, with one softmax, over the causal sequence keys of block l (with RoPE) and over the 2l "depth" keys of
    the same token t written by the earlier sublayers (no RoPE: same position). Slot 2i holds block i's attention
    key/value before RoPE, ``(W_k u_i, W_v u_i)``; slot 2i+1 holds ``kv_proj_i(m_i)``, a new bias-free linear
    d -> 2 H_kv hd of block i's FFN input m_i. Pre-LN MoDA (the study's ``moda``, default)::

        u_l = N_a(x_l);  q, k, v = W_q u_l, W_k u_l, W_v u_l
        K_l = [RoPE(k)_{<=t} ; K^depth_{t,0..2l-1}],  V_l = [v_{<=t} ; V^depth_{t,0..2l-1}]
        h_l = x_l + W_o softmax(RoPE(q)_t K_l^T / sqrt(hd)) V_l             (one softmax, fp32)
        m_l = N_f(h_l);  (K^depth_{t,2l+1}, V^depth_{t,2l+1}) = kv_proj_l(m_l)   (not in the last block)
        x_{l+1} = h_l + F(m_l)

    With ``moda_post_norm=True`` (the study's ``post_norm_moda``, the paper's recipe) the sublayers read the
    un-normalised stream and the norm follows the add: ``h = N_a(x + MoDA(x))``, ``x' = N_f(h + F(h))`` (the LM
    head's final norm then normalises the last block's output a second time, as in the reference).

    Decisions where the reference code and the paper differ:

    * Pre-LN is the default because it is the variant in the study's main table; the paper reports post-norm works
      better with MoDA, so it is one switch away (``moda_post_norm``).
    * ``kv_proj`` is initialised like every other linear (truncated normal, std ``initializer_range``, cut at 3 std),
      as the reference's ``init_depth_kv_weights`` (``nn/moda.py``) does. Only the newest revision of the
      reference's ``nn/transformer/model.py`` (8cc2fd74) calls it; earlier revisions (2d162257, 5152cab0) never do,
      so checkpoints trained with them kept PyTorch's Kaiming-uniform default for ``kv_proj`` (bound 1/sqrt(d),
      std 1/sqrt(3d): 0.018 at d=1024 but 0.036 at d=256, a width-dependent scale no other linear has). The
      init does not change what a trained checkpoint computes.
    * The last block has no ``kv_proj`` (reference ``moda_skip_ffn_kv=True``): its slot would never be read.
    * A block removed by ``skip_block`` leaves its depth slots at zero, as the reference's zero-initialised depth
      cache does: a zero key still takes softmax mass (logit 0) but contributes a zero value.
    * Attention always runs this file's own MoDA math, never a backend kernel: ``attn_implementation="eager"``
      materialises the scores and one fp32 softmax (the readable reference, returns the weights); ``"sdpa"`` (the
      default) computes the same function exactly through one ``F.scaled_dot_product_attention`` call whose extra
      "selector" keys carry the per-token depth logits (faster; see docs/benchmarks.md). Tests check both agree,
      values and gradients. Flash and flex attention are not supported (no way to add per-token keys).
    * Generation: the sequence keys use the normal KV cache; depth entries are same-position only, so they are
      recomputed for the new token at every step and never cached.

    MoDA is not parameter-matched: it adds ``2 d H_kv hd (L - 1)`` parameters (= 2 d^2 (L-1) for MHA, +12% at the
    400M/L24 shape) while the other architectures add <= 2%.

    Args:
        moda_post_norm: Post-norm MoDA (``h = N(x + MoDA(x))``) instead of Pre-LN MoDA.
        moda_depth: Debug/ablation switch. ``False`` masks every depth key, which makes each attention plain causal
            attention and the model exactly Pre-LN (``kv_proj`` is kept, unused, so checkpoints stay compatible).
        **kwargs: Backbone fields, see :class:`DepthBenchConfig`.
    """

    model_type = "depthbench_moda"
    upcycle_start = "changes"
    upcycle_reason = ("every attention also attends over the same token's depth keys (earlier blocks' keys and the "
                      "new kv_proj outputs), which take softmax mass from the sequence keys the source trained on; "
                      "moda_depth = False would be Pre-LN")

    def __init__(self, moda_post_norm: bool = False, moda_depth: bool = True, **kwargs):
        self.moda_post_norm = moda_post_norm
        self.moda_depth = moda_depth
        super().__init__(**kwargs)

    def validate(self) -> None:
        super().validate()
        for name in ("moda_post_norm", "moda_depth"):
            value = getattr(self, name)
            self._check(isinstance(value, bool), name, value, "a bool (True or False)")

    def num_extra_parameters(self) -> int:
        """``kv_proj`` (d -> 2 H_kv hd, no bias) in every block but the last: ``2 d H_kv hd (L - 1)``."""
        kv_width = self.num_key_value_heads * self.head_dim
        return 2 * self.hidden_size * kv_width * (self.num_hidden_layers - 1)


# ================================================================================================ attention
class MoDAStream(NamedTuple):
    """The residual stream of MoDA: the hidden state plus the depth cache written so far.

    ``keys[s]`` / ``values[s]`` are the depth key/value of slot s, each ``[B, H_kv, T, hd]`` (slot 2l: block l's
    attention, slot 2l+1: block l's FFN). The tuples grow by one entry per sublayer that writes a slot.
    """

    hidden: torch.Tensor
    keys: tuple[torch.Tensor, ...] = ()
    values: tuple[torch.Tensor, ...] = ()


@dataclass
class DepthIO:
    """What an attention sublayer exchanges with the depth cache: the slots it reads, the slot it writes."""

    keys: tuple[torch.Tensor, ...] = ()
    values: tuple[torch.Tensor, ...] = ()
    new_key: torch.Tensor | None = None
    new_value: torch.Tensor | None = None


def additive_mask(
    attention_mask: torch.Tensor | None,
    q_len: int,
    kv_len: int,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Any mask the backbone builds -> an additive mask ``[B or 1, 1, T, T_kv]`` of ``dtype`` (0 = attend).

    Accepts the eager float mask, the sdpa boolean mask (True = attend), a 2-D padding mask ``[B, T_kv]`` (the
    queries are the last ``q_len`` of ``kv_len`` positions) and ``None``. ``None`` is transformers' sdpa fast path
    and means exactly what ``F.scaled_dot_product_attention(is_causal=q_len > 1)`` does for Llama: a top-left
    aligned causal mask (query i sees keys 0..i) for a multi-token query, every key for a single query. Reading
    it as bottom-right aligned would be wrong on a static-cache prefill, where ``kv_len`` is the whole cache and
    the keys after the prompt are empty slots. Masked entries get the most negative finite value of ``dtype``
    rather than -inf, so a row with no visible key stays finite.
    """
    neg = torch.finfo(dtype).min
    if attention_mask is None:
        if q_len == 1:
            return torch.zeros(1, 1, 1, kv_len, dtype=dtype, device=device)
        top_left = torch.arange(kv_len, device=device)[None, :] <= torch.arange(q_len, device=device)[:, None]
        allowed = top_left[None, None]
    elif not isinstance(attention_mask, torch.Tensor):
        raise NotImplementedError(
            f"MoDA attention got a {type(attention_mask).__name__} mask; it supports attn_implementation "
            "'eager' and 'sdpa' only (flash/flex attention cannot mix in the per-token depth keys)."
        )
    elif attention_mask.dim() == 2:  # [B, T_kv] padding mask (1 = real token)
        causal = torch.arange(kv_len, device=device)[None, :] <= torch.arange(q_len, device=device)[:, None] + (
            kv_len - q_len
        )
        allowed = causal[None, None] & attention_mask[:, None, None, -kv_len:].bool()
    elif attention_mask.dtype == torch.bool:
        allowed = attention_mask[..., :kv_len]
    else:
        return attention_mask[..., :kv_len].to(dtype).clamp(min=neg)
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, neg)


def moda_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    depth_keys: torch.Tensor | Sequence[torch.Tensor] | None,
    depth_values: torch.Tensor | Sequence[torch.Tensor] | None,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    depth_scale: float = 1.0,
    split_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor]]:
    r"""One softmax over the causal sequence keys and the same-position depth keys.

    .. math::

        a_t = \mathrm{softmax}([s q_t k_j^\top + M_{tj}]_j \Vert [s q_t \kappa_{t,i}^\top]_i),
        \qquad o_t = \sum_j a_{tj} v_j + \sum_i a_{t,i} \nu_{t,i}

    with s = 1/sqrt(hd), ``M`` the additive causal/padding mask, ``kappa_{t,i}`` / ``nu_{t,i}`` the depth key/value of
    slot i *at the query's own position t*. Scores and the softmax are fp32; weights are cast back to the value dtype.

    Args:
        query: ``[B, H, T, hd]`` (RoPE applied).
        key: ``[B, H_kv, T_kv, hd]`` sequence keys (RoPE applied, cached prefix included).
        value: ``[B, H_kv, T_kv, hd]``.
        depth_keys: ``[B, H_kv, T, S, hd]``, a sequence of S slots ``[B, H_kv, T, hd]`` (what the model passes: the
            slots are not stacked where autograd would keep the stack) or ``None`` (S = 0: plain causal attention).
        depth_values: Like ``depth_keys``.
        attention_mask: Any mask accepted by :func:`additive_mask`.
        scaling: Softmax scale (1/sqrt(hd)).
        dropout: Attention-probability dropout (applied to the joint weights).
        depth_scale: Extra factor on the depth logits (the RoPE attention factor, see :class:`MoDAAttention`).
        split_weights: Return the weights as their sequence and depth parts (``[B, H, T, T_kv]``, ``[B, H, T, S]``).

    Returns:
        ``(out [B, T, H, hd], weights [B, H, T, T_kv + S])``; each row of ``weights`` sums to 1.
    """
    b, h, t, hd = query.shape
    hkv, kv_len = key.shape[1], key.shape[2]
    g = h // hkv
    q = query.view(b, hkv, g, t, hd)
    scores = upcast(torch.matmul(q, key.unsqueeze(2).transpose(-1, -2))) * scaling
    if attention_mask is not None or t > 1:  # (a single unmasked query sees every key)
        scores = scores + additive_mask(attention_mask, t, kv_len, query.device).unsqueeze(2)  # [B|1,1,1,T,T_kv]
    s = num_slots(depth_keys)
    if s:
        depth_scores = upcast(depth_logits(q, depth_keys)) * (scaling * depth_scale)
        scores = torch.cat([scores, depth_scores], dim=-1)  # [B, H_kv, G, T, T_kv + S]
    weights = F.softmax(scores, dim=-1, dtype=scores.dtype).to(value.dtype).reshape(b, h, t, kv_len + s)
    if dropout:
        weights = F.dropout(weights, p=dropout, training=True)
    # The products read views of the returned weights (and of their two parts), so those are the tensors gradients
    # flow through (`retain_grad()` on an output attention sees its gradient, as in Llama).
    sequence_weights, depth_weights = weights[..., :kv_len], weights[..., kv_len:]
    out = torch.matmul(sequence_weights.view(b, hkv, g, t, kv_len), value.unsqueeze(2))  # [B, H_kv, G, T, hd]
    if s:
        out = out + depth_readout(depth_weights.view(b, hkv, g, t, s), depth_values)
    out = out.reshape(b, h, t, hd).transpose(1, 2).contiguous()
    return out, ((sequence_weights, depth_weights) if split_weights else weights)


#: Shortest sequence for which :func:`moda_attention_sdpa` runs SDPA's causal kernel (zero queries in front of the
#: selector keys) rather than an explicit mask on CPU. CPU flash attention splits the keys in blocks of 512, so
#: shorter sequences skip little (timings: docs/benchmarks.md). Accelerators always take the causal path.
CPU_CAUSAL_MIN_TOKENS = 512


def moda_attention_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    depth_keys: torch.Tensor | Sequence[torch.Tensor] | None,
    depth_values: torch.Tensor | Sequence[torch.Tensor] | None,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    depth_scale: float = 1.0,
) -> tuple[torch.Tensor, None]:
    r"""The same function as :func:`moda_attention`, computed by one ``F.scaled_dot_product_attention`` call.

    The per-token depth logits are smuggled into a shared key set through S extra feature dimensions: with
    ``l_{t,i} = q_t . kappa_{t,i}`` (raw depth logit) and e_i the i-th unit vector of R^S,

    .. math::

        q'_t = [q_t, l_{t,:}],\quad k'_j = [k_j, 0],\quad v'_j = [v_j, 0],\quad
        k'_{sel,i} = v'_{sel,i} = [0, e_i]

    so ``s q'_t . k'_{sel,i} = s l_{t,i}`` is exactly the depth score of query t, the S "selector" keys (always
    visible, placed before the sequence keys) share the one softmax with the sequence keys, and the last S output
    features are the depth weights ``a_{t,i}``. Then ``o_t = out'_t[:hd] + sum_i a_{t,i} nu_{t,i}``. This is exact
    (same softmax, same normaliser; SDPA kernels keep the softmax statistics in fp32), differentiable through
    SDPA's own backward, and avoids materialising the ``[B, H, T, T_kv]`` score tensor. The extra width (hd + S,
    rounded up to a multiple of 8) is the price; weights are not returned.
    """
    b, h, t, hd = query.shape
    hkv, kv_len = key.shape[1], key.shape[2]
    g = h // hkv
    # No mask and no cached keys (training, a cache-free forward, the prefill of an empty dynamic cache): plain
    # causal attention, run as SDPA's `is_causal` (its kernels skip the blocks above the diagonal) instead of an
    # explicit mask that makes them compute and then mask all of them. A single query with no mask sees every key
    # (selectors included): no mask at all, as for Llama.
    causal = attention_mask is None and t > 1 and kv_len == t and (
        t >= CPU_CAUSAL_MIN_TOKENS or query.device.type != "cpu")
    mask = None if causal or (attention_mask is None and t == 1) else additive_mask(
        attention_mask, t, kv_len, query.device, query.dtype
    )  # [B|1, 1, T, T_kv]
    s = num_slots(depth_keys)
    if s:
        extra = s + (-(hd + s)) % 8  # zero feature columns keep the width a multiple of 8 (fused GPU kernels)
        logits = depth_logits(query.view(b, hkv, g, t, hd), depth_keys).reshape(b, h, t, s)
        if depth_scale != 1.0:
            logits = logits * depth_scale
        query = torch.cat([query, logits], dim=-1)
        if extra > s:
            query = F.pad(query, (0, extra - s))
        eye = torch.eye(s, extra, dtype=key.dtype, device=key.device)
        selector = F.pad(eye, (hd, 0)).expand(b, hkv, s, hd + extra)  # [0 | e_i] rows
        key = torch.cat([selector, F.pad(key, (0, extra))], dim=2)  # [B, H_kv, S + T_kv, hd + extra]
        value = torch.cat([selector, F.pad(value, (0, extra))], dim=2)
        if mask is not None:
            mask = F.pad(mask, (s, 0))  # selector keys are visible to every query
        if causal:
            # S zero queries in front of the T real ones: in square causal attention over the S + T keys, query
            # S + i then sees exactly the S selectors and the sequence keys 0..i; the S extra rows are dropped.
            query = F.pad(query, (0, 0, s, 0))
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling, is_causal=causal, enable_gqa=g > 1
    )  # [B, H, (S +) T, hd (+ extra)]
    if s:
        out = out[:, :, s:] if causal else out
        weights = out[..., hd:hd + s].reshape(b, hkv, g, t, s)
        out = out[..., :hd] + depth_readout(weights, depth_values).reshape(b, h, t, hd)
    return out.transpose(1, 2).contiguous(), None


def moda_single_query_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    depth_keys: Sequence[torch.Tensor] | None,
    depth_values: Sequence[torch.Tensor] | None,
    attention_mask: torch.Tensor | None,
    scaling: float,
    depth_scale: float = 1.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r""":func:`moda_attention` for a single query token without autograd (a cached decode step): the same explicit
    fp32 scores and one softmax, in a fixed handful of aten calls.

    The ``B * H_kv`` (key head) groups become the batch of three batched products: the query ``[B H_kv, G, hd]``
    against the cached sequence keys (read in place: no copy of the cache, unlike the SDPA path's padded and
    selector-extended keys) and against the depth keys (the S slots stacked once, ``[B H_kv, hd, S]``); one fp32
    softmax over both; the output is ``a_seq V_seq + a_depth V_depth`` (one ``baddbmm``). Takes only what the
    model passes (S slots of ``[B, H_kv, 1, hd]``, any mask of :func:`additive_mask`); no dropout.

    Returns:
        ``(out [B, 1, H, hd], weights [B, H, 1, T_kv + S] or None)`` (the weights only with ``need_weights``).
    """
    b, h, t, hd = query.shape
    hkv, kv_len = key.shape[1], key.shape[2]
    g = h // hkv
    q = query.reshape(b * hkv, g, hd)
    scores = torch.bmm(q, key.reshape(b * hkv, kv_len, hd).transpose(1, 2))  # [B H_kv, G, T_kv]
    s = len(depth_keys) if depth_keys else 0
    if s:
        depth_scores = torch.bmm(q, torch.stack(tuple(depth_keys), dim=-1).reshape(b * hkv, hd, s))  # [B H_kv, G, S]
        if depth_scale != 1.0:
            depth_scores = depth_scores * depth_scale
        scores = torch.cat([scores, depth_scores], dim=-1)
    scores = upcast(scores) * scaling
    if attention_mask is not None:
        mask = additive_mask(attention_mask, 1, kv_len, query.device, scores.dtype)  # [B|1, 1, 1, T_kv]
        scores.view(b, hkv, g, kv_len + s)[..., :kv_len] += mask
    weights = as_dtype(torch.softmax(scores, dim=-1), value.dtype)
    out = torch.bmm(weights[..., :kv_len], value.reshape(b * hkv, kv_len, hd))  # [B H_kv, G, hd]
    if s:
        depth_v = torch.stack(tuple(depth_values), dim=-2).reshape(b * hkv, s, hd)
        out = torch.baddbmm(out, weights[..., kv_len:], depth_v)
    return out.view(b, t, h, hd), weights.view(b, h, t, kv_len + s) if need_weights else None


class MoDAAttention(Attention):
    """Identical to the backbone attention except that it also attends to same-position depth keys.

    Always runs this file's own MoDA math: :func:`moda_attention` (explicit fp32 scores and softmax, returns the
    weights) when ``config._attn_implementation == "eager"``, otherwise :func:`moda_attention_sdpa` (the same
    function through one fused SDPA call; no weights). The sequence keys go through the KV cache as usual. Pass
    ``depth=DepthIO(keys, values)`` to read the depth slots; the module stores its own pre-RoPE key/value
    (slot 2l) in ``depth.new_key`` / ``depth.new_value``.

    Returns ``(output, sequence_weights [B, H, T, T_kv], depth_weights [B, H, T, S])``: the two parts of the one
    softmax (together each row sums to 1), ``None`` without the eager backend. The model reports the first part as
    ``attentions`` (the shape every attention has in transformers) and the second as ``depth_attentions``.
    """

    def __init__(self, config: MoDAConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        # RoPE variants with an attention factor (YaRN, LongRoPE) scale cos/sin, i.e. every rotated query and key,
        # by m, so sequence logits carry m^2; the position-free depth keys get the missing factor m here, so that
        # one temperature still applies to the whole joint softmax.
        self.depth_key_scale = float(rope_init(config)[1])

    def forward(self, hidden_states, position_embeddings, attention_mask=None, cache=None, depth=None, **kwargs):
        b, t, _ = hidden_states.shape
        q, k, v = self.project_qkv(hidden_states)
        depth_keys = depth_values = None
        if depth is not None:
            depth.new_key, depth.new_value = k, v  # before RoPE: the depth slot is position-free
            if depth.keys:
                depth_keys, depth_values = depth.keys, depth.values  # S slots [B, H_kv, T, hd] each
        q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
        if cache is not None:
            k, v = cache_update(cache, k, v, self.layer_idx, kwargs.get("cache_position"))
        implementation = self.config._attn_implementation
        if implementation not in ("eager", "sdpa"):  # e.g. a kernel registered with AttentionInterface
            raise NotImplementedError(
                f"MoDA attention runs its own math with attn_implementation 'eager' or 'sdpa', not "
                f"{implementation!r}: other kernels cannot mix in the per-token depth keys."
            )
        eager = implementation == "eager"
        if not eager and (kwargs.get("output_attentions") or kwargs.get("output_depth_attentions")):
            _SDPA_LOGGER.warning_once(_SDPA_NO_WEIGHTS)  # transformers' own sdpa warning, as Llama under sdpa
        if t == 1 and inference_fast_path(self):
            out, weights = moda_single_query_attention(
                q, k, v, depth_keys, depth_values, attention_mask, scaling=self.scaling,
                depth_scale=self.depth_key_scale, need_weights=eager,
            )
            kv_len = k.shape[2]
            parts = (weights[..., :kv_len], weights[..., kv_len:]) if eager else (None, None)
            return self.o_proj(out.reshape(b, t, -1)), *parts
        if eager or (t == 1 and not torch.is_grad_enabled()):
            # eager: the explicit scores and weights. Decoding one token (sdpa too): the explicit math scores
            # [B, H, 1, T_kv] directly, where the SDPA path would copy the whole cache twice (zero-padded, plus the
            # selector keys) at every step and layer.
            out, (sequence_weights, depth_weights) = moda_attention(
                q, k, v, depth_keys, depth_values, attention_mask,
                scaling=self.scaling, dropout=self.attention_dropout if self.training else 0.0,
                depth_scale=self.depth_key_scale, split_weights=True,
            )
            if not eager:  # as the SDPA path (which never materialises them)
                sequence_weights = depth_weights = None
        else:
            out, _ = moda_attention_sdpa(
                q, k, v, depth_keys, depth_values, attention_mask,
                scaling=self.scaling, dropout=self.attention_dropout if self.training else 0.0,
                depth_scale=self.depth_key_scale,
            )
            sequence_weights = depth_weights = None
        return self.o_proj(out.reshape(b, t, -1)), sequence_weights, depth_weights


# ================================================================================================ residual wiring
class MoDAResidual(Residual):
    """Identical to Pre-LN except that the sublayers read and write the depth cache carried in the stream.

    Attention sublayer of block l (Pre-LN; post-norm in brackets)::

        u = N_a(x) [u = x];  y = MoDAAttn(u, depth slots 0..2l-1);  slot 2l <- (W_k u, W_v u)
        x <- x + y [x <- N_a(x + y)]

    FFN sublayer of block l::

        m = N_f(x) [m = x];  slot 2l+1 <- split(kv_proj(m)) (not in the last block);  x <- x + F(m) [N_f(x + F(m))]

    ``kv_proj`` output is laid out as ``[key heads | value heads]``, each ``H_kv * hd`` wide.
    """

    def __init__(self, config: MoDAConfig, index: int):
        super().__init__(config, index)
        self.post_norm = config.moda_post_norm
        self.use_depth = config.moda_depth
        self.num_key_value_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        last_block = self.layer_idx == config.num_hidden_layers - 1
        if not self.is_attention and not last_block:
            kv_width = config.num_key_value_heads * config.head_dim
            self.kv_proj = nn.Linear(config.hidden_size, 2 * kv_width, bias=False)
        else:
            self.kv_proj = None

    def forward(self, stream: MoDAStream, norm: Norm, branch: Branch) -> MoDAStream:
        x, keys, values = stream
        u = x if self.post_norm else norm(x)
        if self.is_attention and self.use_depth:
            depth = DepthIO(keys, values)
            y = branch(u, depth=depth)
            keys, values = keys + (depth.new_key,), values + (depth.new_value,)
        else:
            y = branch(u)
            if self.kv_proj is not None and self.use_depth:
                b, t, _ = u.shape
                kv = self.kv_proj(u).view(b, t, 2, self.num_key_value_heads, self.head_dim).transpose(1, 3)
                key, value = kv.unbind(2)  # each [B, H_kv, T, hd]
                keys, values = keys + (key,), values + (value,)
        x = x + y
        if self.post_norm:
            x = norm(x)
        return MoDAStream(x, keys, values)

    def extra_repr(self) -> str:
        return f"index={self.index}, post_norm={self.post_norm}"


class MoDAWiring(Wiring):
    """Carries :class:`MoDAStream` (hidden state + depth cache) between sublayers; analysis reads the hidden state.

    ``skip_layer``: a skipped block is the identity on the hidden state and writes all-zero depth slots (zero key:
    logit 0 for later queries; zero value), matching the reference's zero-initialised depth cache.
    """

    residual_class = MoDAResidual
    family = "residual"

    def make_attention(self, config: MoDAConfig, layer_idx: int) -> nn.Module:
        return MoDAAttention(config, layer_idx)

    def enter(self, embeddings: torch.Tensor) -> MoDAStream:
        return MoDAStream(embeddings)

    def exit(self, stream: MoDAStream, final_norm: Norm) -> torch.Tensor:
        return final_norm(stream.hidden)

    def readout(self, stream: MoDAStream) -> torch.Tensor:
        return stream.hidden

    def depth_state(self, stream: MoDAStream, next_layer) -> torch.Tensor:
        return stream.hidden

    def skip_layer(self, layer, stream: MoDAStream) -> MoDAStream:
        if not self.config.moda_depth:
            return stream
        x = stream.hidden
        zero = x.new_zeros(x.shape[0], self.config.num_key_value_heads, x.shape[1], self.config.head_dim)
        written = 1 if layer.mlp_residual.kv_proj is None else 2
        return MoDAStream(x, stream.keys + (zero,) * written, stream.values + (zero,) * written)


# ================================================================================================ HF models
@dataclass
class MoDAModelOutputWithPast(BaseModelOutputWithPast):
    """The decoder's output plus ``depth_attentions``: with ``output_depth_attentions=True`` (eager backend), per
    block the weights ``[B, H, T, S]`` its queries put on the S = 2l depth slots of their own token, the part of
    the one softmax that ``attentions`` (``[B, H, T, T_kv]``, the sequence keys) leaves out."""

    depth_attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class MoDACausalLMOutputWithPast(CausalLMOutputWithPast):
    """The causal LM's output plus the decoder's ``depth_attentions`` (see :class:`MoDAModelOutputWithPast`)."""

    depth_attentions: tuple[torch.Tensor, ...] | None = None


class MoDAModel(DepthBenchModel):
    config_class = MoDAConfig
    wiring_class = MoDAWiring
    output_class = MoDAModelOutputWithPast
    # `attentions` = the weights on the sequence keys (transformers' shape contract), `depth_attentions` = the rest.
    _can_record_outputs = {
        "attentions": OutputRecorder(MoDAAttention, index=1),
        "depth_attentions": OutputRecorder(MoDAAttention, index=2),
    }
    _supports_flash_attn = False
    _supports_flex_attn = False
    _supports_attention_backend = False


class MoDAForCausalLM(DepthBenchForCausalLM):
    config_class = MoDAConfig
    model_class = MoDAModel
    output_class = MoDACausalLMOutputWithPast
    _supports_flash_attn = False
    _supports_flex_attn = False
    _supports_attention_backend = False


class MoDAForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = MoDAConfig
    model_class = MoDAModel
    _supports_flash_attn = False
    _supports_flex_attn = False
    _supports_attention_backend = False


class MoDAForTokenClassification(DepthBenchForTokenClassification):
    config_class = MoDAConfig
    model_class = MoDAModel
    _supports_flash_attn = False
    _supports_flex_attn = False
    _supports_attention_backend = False


class MoDAForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = MoDAConfig
    model_class = MoDAModel
    _supports_flash_attn = False
    _supports_flex_attn = False
    _supports_attention_backend = False
