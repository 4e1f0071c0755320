"""An independent forward of the study's OLMo-core fork, in plain torch, and fixture releases in its exact layout.

Written for the tests of ``depthbench convert`` from the semantics of the study's repository
(``keyu-wang-2002/DepthBench``, ``pretrain/OLMo-core/src/olmo_core/``: ``nn/transformer/block.py`` and ``model.py``,
``nn/hyper_connections.py``, ``nn/moda.py``, ``kernels/attnres.py``, the PyTorch forward of its Liger kernel in
``analysis/analysis_utils.py``, and ``examples/pretrain_*.py``), never from depthbench's own modules: nothing here
imports depthbench. :func:`fork_logits` reads an OLMo-core state dict (the fork's parameter names) and the model
section of its ``config.json``; :func:`fork_state` / :func:`fork_config` make a fixture in that layout, weights moved
off their init; :func:`write_release` saves it as the fork's trainer does (``stepN/config.json``,
``stepN/model_and_optim/`` with ``torch.distributed.checkpoint``, model and optimizer tensors, and ``tokenizer/``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

OLMO_RMS_DEFAULT_EPS = 1e-5  # LayerNormConfig(name=rms) without an eps: OLMo-core's LayerNorm default
D, L, HEADS, FFN = 32, 3, 4, 64


# ================================================================================================ primitives
def up(x: torch.Tensor) -> torch.Tensor:
    """At least fp32 (the fork computes norms and Sinkhorn in fp32; fp64 stays fp64 for the float64 check)."""
    return x if x.dtype == torch.float64 else x.float()


def rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    x = up(x)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else weight.to(x.dtype) * y


def layer_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = up(x)
    return F.layer_norm(x, (x.shape[-1],), weight.to(x.dtype), None, eps)


def make_norm(norm_cfg: dict):
    """OLMo-core's norm of a ``layer_norm`` config: ``default`` is LayerNorm, ``rms`` RMSNorm (gain, no bias)."""
    eps = norm_cfg.get("eps", 1e-5)
    if norm_cfg.get("name", "rms") == "default":
        return lambda x, w: layer_norm(x, w, eps)
    return lambda x, w: rms(x, w, eps)


def rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """OLMo-core's default RoPE (rotate-half) on [B, T, H, hd]."""
    t, hd = x.shape[1], x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=up(x).dtype) / hd))
    pos = torch.outer(torch.arange(t, dtype=inv.dtype), inv)
    pos = torch.cat([pos, pos], dim=-1)[None, :, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * pos.cos() + torch.cat([-x2, x1], dim=-1) * pos.sin()


class Fork:
    """The fork's model over a state dict ``S`` (OLMo-core names) and its config's ``model`` section."""

    def __init__(self, state: dict, model_cfg: dict, dtype: torch.dtype = torch.float32):
        self.S = {k: v.to(dtype) if v.is_floating_point() and v.dtype != dtype else v for k, v in state.items()}
        self.cfg = model_cfg
        self.block = model_cfg["block"]
        mixer = self.block["sequence_mixer"]
        self.heads, self.kv_heads = mixer["n_heads"], mixer.get("n_kv_heads") or mixer["n_heads"]
        self.theta = mixer["rope"]["theta"]
        self.n_layers = model_cfg["n_layers"]
        self.norm = make_norm(self.block["layer_norm"])
        self.head_norm = make_norm(model_cfg["lm_head"]["layer_norm"])
        self.prefix = ""  # MoDA wraps its attention / feed-forward one level deeper

    def w(self, name: str) -> torch.Tensor:
        return self.S[name]

    # -------------------------------------------------------------------------------------------- sublayers
    def qkv(self, i: int, x: torch.Tensor, attn: str):
        b, t, _ = x.shape
        q = (x @ self.w(f"{attn}w_q.weight").t()).view(b, t, self.heads, -1)
        k = (x @ self.w(f"{attn}w_k.weight").t()).view(b, t, self.kv_heads, -1)
        v = (x @ self.w(f"{attn}w_v.weight").t()).view(b, t, self.kv_heads, -1)
        return q, k, v

    def attention(self, i: int, x: torch.Tensor) -> torch.Tensor:
        attn = f"blocks.{i}.attention.{self.prefix}"
        q, k, v = self.qkv(i, x, attn)
        q, k = rope(q, self.theta), rope(k, self.theta)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        t = x.shape[1]
        scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        out = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(x.shape[0], t, -1)
        return out @ self.w(f"{attn}w_out.weight").t()

    def ffn(self, i: int, x: torch.Tensor) -> torch.Tensor:
        p = f"blocks.{i}.feed_forward.{self.prefix}"
        gate, up = x @ self.w(p + "w1.weight").t(), x @ self.w(p + "w3.weight").t()
        return (F.silu(gate) * up) @ self.w(p + "w2.weight").t()

    def n(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x, self.w(name))

    # -------------------------------------------------------------------------------------------- residual blocks
    def block_forward(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """One block of the plain residual families (``TransformerBlock`` and its subclasses in ``block.py``)."""
        name, p = self.block["name"], f"blocks.{i}."
        if name == "post_norm":
            h = self.n(p + "attention_norm.weight", x + self.attention(i, x))
            return self.n(p + "feed_forward_norm.weight", h + self.ffn(i, h))
        if name == "deepnorm":
            a = (2 * self.n_layers) ** 0.25
            h = self.n(p + "attention_norm.weight", a * x + self.attention(i, x))
            return self.n(p + "feed_forward_norm.weight", a * h + self.ffn(i, h))
        if name == "keel":
            return self.keel_block(i, x)
        scale, r = 1.0, 1.0
        if name == "default_scaled":
            scale = 1.0 / math.sqrt(i + 1)
        if name in ("depth_mup", "completep"):
            r = (self.n_layers / self.block["residual_scaling_base_depth"]) ** (-(0.5 if name == "depth_mup" else 1.0))
        attn = self.attention(i, self.n(p + "attention_norm.weight", x) * scale)
        if name == "peri_norm":
            attn = self.n(p + "post_attention_norm.weight", attn)
        h = x + r * attn
        mlp = self.ffn(i, self.n(p + "feed_forward_norm.weight", h) * scale)
        if name == "peri_norm":
            mlp = self.n(p + "post_feed_forward_norm.weight", mlp)
        return h + r * mlp

    def keel_block(self, i: int, x: torch.Tensor) -> torch.Tensor:
        p, alpha = f"blocks.{i}.", float(2 * self.n_layers)
        attn = self.attention(i, self.n(p + "attention_norm.weight", x))
        h = x + attn if i == 0 else self.n(p + "post_attention_norm.weight", alpha * x + attn)
        mlp = self.ffn(i, self.n(p + "feed_forward_norm.weight", h))
        return self.n(p + "post_feed_forward_norm.weight", (h if i == 0 else alpha * h) + mlp)

    # -------------------------------------------------------------------------------------------- the model
    def logits(self, ids: torch.Tensor, readout: str = "sum", base_width: int | None = None) -> torch.Tensor:
        """Logits of ``ids`` [B, T]. ``readout``: the HC / native-mHC "sum" collapse of the code revision (``sum``:
        sum the streams, then the head's norm, as the newest ``model.py``; ``sum_norm``: the head's norm per stream,
        then sum, as older revisions). ``base_width``: ``--base-width`` of a depth-width depth-muP / CompleteP run
        (its LM-head output is multiplied by base_width / d)."""
        x = self.w("embeddings.weight")[ids]
        name = self.block["name"]
        if "hyper_connections" in self.block or name in ("hc", "mhc"):
            h = self.head_input_hc(x, readout)
        elif name == "attnres" or self.block.get("attnres_block_size") is not None:
            h = self.attnres(x)
        elif name in ("moda", "post_norm_moda"):
            h = self.head_norm(self.moda(x), self.w("lm_head.norm.weight"))
        else:
            for i in range(self.n_layers):
                x = self.block_forward(i, x)
            h = self.head_norm(x, self.w("lm_head.norm.weight"))
        out = h @ self.w("lm_head.w_out.weight").t()
        if base_width is not None:
            out = out * (base_width / self.cfg["d_model"])
        return out

    # -------------------------------------------------------------------------------------------- HC / mHC
    def head_input_hc(self, x: torch.Tensor, readout: str) -> torch.Tensor:
        hc = self.block.get("hyper_connections") or {}
        kind = hc.get("kind", "hc" if self.block["name"] == "hc" else "mhc")
        n = hc.get("num_residual_streams", 4)
        streams = x[:, :, None, :].expand(-1, -1, n, -1)  # [B, T, n, d]: the embedding copied into every stream
        for i in range(self.n_layers):
            for j, (side, branch) in enumerate((("attention", self.attention), ("feed_forward", self.ffn))):
                p = f"blocks.{i}.{side}_hyper_connection."
                norm = f"blocks.{i}.{'attention' if j == 0 else 'feed_forward'}_norm.weight"

                def pre_norm_branch(u, i=i, branch=branch, norm=norm):
                    return branch(i, self.n(norm, u))

                connector = {"hc": self.hc_connector, "mhc": self.mhc_connector, "liger_mhc": self.liger_connector}
                streams = connector[kind](p, streams, pre_norm_branch, hc)
        collapse = hc.get("collapse", "auto")
        mode = ("mean" if kind == "liger_mhc" else "sum") if collapse == "auto" else collapse
        w = self.w("lm_head.norm.weight")
        if mode == "mean":
            return self.head_norm(streams.mean(-2), w)
        if readout == "sum":
            return self.head_norm(streams.sum(-2), w)
        return self.head_norm(streams, w).sum(-2)

    def hc_connector(self, p: str, h: torch.Tensor, branch, hc: dict) -> torch.Tensor:
        """``HyperConnection._forward_hc``: width mix A = A_static + c tanh(Ĥ W), depth weights β likewise."""
        act = torch.tanh if hc.get("tanh", True) is not False else (lambda t: t)
        normed = rms(h, None, 1e-8)
        alpha = self.w(p + "static_alpha") + self.w(p + "dynamic_alpha_scale") * act(
            normed @ self.w(p + "dynamic_alpha_proj"))
        mixed = torch.einsum("btsk,btsd->btkd", alpha, h)  # [B, T, n+1, d]
        y = branch(mixed[:, :, 0])
        beta = self.w(p + "static_beta") + self.w(p + "dynamic_beta_scale") * act(
            normed @ self.w(p + "dynamic_beta_proj"))
        return mixed[:, :, 1:] + beta[..., None] * y[:, :, None, :]

    def mhc_connector(self, p: str, h: torch.Tensor, branch, hc: dict) -> torch.Tensor:
        """``HyperConnection._forward_mhc`` (native): gates outside the bias, H_res applied as Σ_s H[s, t] H_s."""
        n = h.shape[-2]
        x = rms(h.reshape(*h.shape[:-2], -1), None, 1e-8)
        pre = self.w(p + "pre_gate") * (x @ self.w(p + "pre_dynamic_proj")) + self.w(p + "pre_bias")
        post = self.w(p + "post_gate") * (x @ self.w(p + "post_dynamic_proj")) + self.w(p + "post_bias")
        res = self.w(p + "residual_gate") * (x @ self.w(p + "residual_dynamic_proj")).unflatten(-1, (n, n))
        h_res = fork_sinkhorn(res + self.w(p + "residual_bias"), hc.get("sinkhorn_iters", 20),
                              hc.get("sinkhorn_tau", 1.0))
        y = branch(torch.einsum("bts,btsd->btd", torch.sigmoid(pre), h))
        return torch.einsum("btsr,btsd->btrd", h_res, h) + 2 * torch.sigmoid(post)[..., None] * y[:, :, None, :]

    def liger_connector(self, p: str, h: torch.Tensor, branch, hc: dict) -> torch.Tensor:
        """The Liger backend's PyTorch forward: gains on (x̂Φ + b), H_res applied as Σ_s H[t, s] H_s."""
        n = h.shape[-2]
        x = rms(h.reshape(*h.shape[:-2], -1), None, hc.get("liger_rms_eps", 1e-6))
        mix = x @ self.w(p + "phi") + self.w(p + "b")
        h_pre = torch.sigmoid(self.w(p + "alpha_pre") * mix[..., :n] + hc.get("liger_pre_eps", 0.0))
        h_post = hc.get("liger_post_mult", 2.0) * torch.sigmoid(self.w(p + "alpha_post") * mix[..., n:2 * n])
        h_res = fork_sinkhorn(self.w(p + "alpha_res") * mix[..., 2 * n:].unflatten(-1, (n, n)),
                              hc.get("sinkhorn_iters", 20), 1.0)
        y = branch(torch.einsum("bts,btsd->btd", h_pre, h))
        return torch.einsum("btrs,btsd->btrd", h_res, h) + h_post[..., None] * y[:, :, None, :]

    # -------------------------------------------------------------------------------------------- AttnRes
    def fused_attnres(self, query, sources, key_gain, out_gain) -> torch.Tensor:
        """``kernels/attnres.py``: softmax over sources of <q, g ⊙ v / rms(v)>, mix of the raw sources, RMSNorm."""
        v = torch.stack([up(s) for s in sources])  # [S, B, T, d]
        logits = (rms(v, None, OLMO_RMS_DEFAULT_EPS) * key_gain * query.reshape(-1)).sum(-1)
        mixed = (logits.softmax(0)[..., None] * v).sum(0)
        return rms(mixed, out_gain, OLMO_RMS_DEFAULT_EPS)

    def attnres(self, x: torch.Tensor) -> torch.Tensor:
        """``AttnResTransformerBlock`` (bank / partial recursion) and the final mix in ``Transformer.forward``."""
        size = self.block.get("attnres_block_size") or 1
        states, partial = None, x
        for i in range(self.n_layers):
            p = f"blocks.{i}."
            if states is None:
                inp, states, partial = self.n(p + "attention_norm.weight", x), [x], None
            else:
                sources = [*states, partial]
                if (2 * i) % size == 0:
                    states, partial = sources, None
                inp = self.fused_attnres(self.w(p + "attn_res_proj.weight"), sources,
                                         self.w(p + "attn_res_norm.weight"), self.w(p + "attention_norm.weight"))
            out = self.attention(i, inp)
            partial = out if partial is None else partial + out
            sources = [*states, partial]
            if (2 * i + 1) % size == 0:
                states, partial = sources, None
            inp = self.fused_attnres(self.w(p + "mlp_res_proj.weight"), sources, self.w(p + "mlp_res_norm.weight"),
                                     self.w(p + "feed_forward_norm.weight"))
            out = self.ffn(i, inp)
            partial = out if partial is None else partial + out
        return self.fused_attnres(self.w("res_proj.weight"), [*states, partial], self.w("res_norm.weight"),
                                  self.w("lm_head.norm.weight"))

    # -------------------------------------------------------------------------------------------- MoDA
    def moda_attention(self, i: int, u: torch.Tensor, depth: list) -> torch.Tensor:
        """``MoDAAttention``: block 0 causal; later blocks one softmax over the causal sequence keys (RoPE) and the
        same token's depth keys of slots 0..2i-1 (no RoPE), scale 1/sqrt(hd); slot 2i <- this block's (k, v)."""
        attn = f"blocks.{i}.attention.attention."
        q, k_raw, v = self.qkv(i, u, attn)
        q, k = rope(q, self.theta), rope(k_raw, self.theta)
        group, t = self.heads // self.kv_heads, u.shape[1]
        kq, vq = k.repeat_interleave(group, 2), v.repeat_interleave(group, 2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, kq) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        if depth:
            dk = torch.stack([d[0] for d in depth], 2).repeat_interleave(group, 3)  # [B, T, S, H, hd]
            dv = torch.stack([d[1] for d in depth], 2).repeat_interleave(group, 3)
            depth_scores = torch.einsum("bqhd,bqshd->bhqs", q, dk) / math.sqrt(q.shape[-1])
            p = torch.cat([scores, depth_scores], -1).softmax(-1)
            out = torch.einsum("bhqk,bkhd->bqhd", p[..., :t], vq) + torch.einsum("bhqs,bqshd->bqhd", p[..., t:], dv)
        else:
            out = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), vq)
        depth.append((k_raw, v))
        return out.reshape(u.shape[0], t, -1) @ self.w(f"{attn}w_out.weight").t()

    def moda(self, x: torch.Tensor) -> torch.Tensor:
        post = self.block["name"] == "post_norm_moda"
        depth: list = []
        self.prefix = "feed_forward."  # MoDAFeedForwardDepthCache wraps the feed-forward
        for i in range(self.n_layers):
            p = f"blocks.{i}."
            u = x if post else self.n(p + "attention_norm.weight", x)
            a = self.moda_attention(i, u, depth)
            h = self.n(p + "attention_norm.weight", x + a) if post else x + a
            m = h if post else self.n(p + "feed_forward_norm.weight", h)
            kv = self.S.get(p + "feed_forward.kv_proj.weight")
            if kv is not None and 2 * i + 1 < 2 * self.n_layers - 1:
                k2, v2 = (m @ kv.t()).view(*m.shape[:2], 2, self.kv_heads, -1).unbind(2)
                depth.append((k2, v2))
            f = self.ffn(i, m)
            x = self.n(p + "feed_forward_norm.weight", h + f) if post else h + f
        self.prefix = ""
        return x


def fork_sinkhorn(logits: torch.Tensor, iters: int, tau: float) -> torch.Tensor:
    """``sinkhorn_log`` of ``nn/hyper_connections.py``: log-domain, u (rows) then v (columns) each round, marginals
    1/n, times n: the columns sum to 1 exactly."""
    z = up(logits) / tau
    n = z.shape[-1]
    u = torch.zeros(z.shape[:-1], dtype=z.dtype)
    v = torch.zeros(*z.shape[:-2], n, dtype=z.dtype)
    for _ in range(iters):
        u = -math.log(n) - torch.logsumexp(z + v[..., None, :], dim=-1)
        v = -math.log(n) - torch.logsumexp(z + u[..., :, None], dim=-2)
    return torch.exp(z + u[..., :, None] + v[..., None, :]) * n


def fork_logits(state: dict, model_cfg: dict, ids: torch.Tensor, dtype: torch.dtype = torch.float32,
                **kwargs) -> torch.Tensor:
    """The fork's logits of ``ids`` (``kwargs``: :meth:`Fork.logits`), computed in ``dtype`` (the fork's fp32; fp64
    checks the semantics beyond rounding)."""
    with torch.no_grad():
        return Fork(state, model_cfg, dtype).logits(ids, **kwargs)


# ================================================================================================ fixtures
def fork_config(block_name: str, vocab: int, block: dict | None = None, model: dict | None = None,
                dataset: dict | None = None, n_layers: int = L) -> dict:
    """An experiment ``config.json`` as the fork's config saver writes it (``ExperimentConfig.as_config_dict()``:
    ``model`` = ``TransformerConfig``, ``dataset`` with its ``tokenizer`` and ``sequence_length``, ...)."""
    norm = {"name": "rms", "eps": 1e-6, "bias": False, "dtype": "float32",
            "_CLASS_": "olmo_core.nn.layer_norm.LayerNormConfig"}
    block_cfg = {
        "sequence_mixer": {"name": "default", "n_heads": HEADS, "bias": False, "dtype": "float32",
                           "rope": {"name": "default", "theta": 10000, "full_precision": True,
                                    "_CLASS_": "olmo_core.nn.rope.RoPEConfig"},
                           "_CLASS_": "olmo_core.nn.attention.AttentionConfig", "type": "attention"},
        "layer_norm": dict(norm),
        "feed_forward": {"hidden_size": FFN, "name": "default", "bias": False, "activation": "silu",
                         "_CLASS_": "olmo_core.nn.feed_forward.FeedForwardConfig"},
        "name": block_name, "_CLASS_": "olmo_core.nn.transformer.config.TransformerBlockConfig",
    }
    for key, value in (block or {}).items():
        block_cfg[key] = {**block_cfg[key], **value} if isinstance(block_cfg.get(key), dict) else value
    model_cfg = {"d_model": D, "vocab_size": vocab, "n_layers": n_layers, "block": block_cfg,
                 "lm_head": {"name": "default", "layer_norm": dict(norm), "bias": False, "dtype": "float32",
                             "_CLASS_": "olmo_core.nn.lm_head.LMHeadConfig"},
                 "name": "default", "dtype": "float32", "init_method": "normal", "init_seed": 0, "init_std": 0.02,
                 "_CLASS_": "olmo_core.nn.transformer.config.TransformerConfig", **(model or {})}
    tokenizer = {"vocab_size": vocab, "eos_token_id": 0, "pad_token_id": 1, "bos_token_id": None,
                 "identifier": "tokenizer", "_CLASS_": "olmo_core.data.tokenizer.TokenizerConfig"}
    data = {"sequence_length": 96, "tokenizer": tokenizer,
            "_CLASS_": "olmo_core.data.numpy_dataset.NumpyFSLDatasetConfig"}
    for key, value in (dataset or {}).items():
        data[key] = {**data[key], **value} if isinstance(data.get(key), dict) else value
    return {"run_name": "fixture", "model": model_cfg, "dataset": data,
            "train_module": {"max_sequence_length": data["sequence_length"], "optim": {"lr": 2e-3}},
            "trainer": {"save_folder": "workspace/fixture"}, "init_seed": 42}


def _rand(gen: torch.Generator):
    def rnd(*shape: int, scale: float = 0.3, center: float = 0.0) -> torch.Tensor:
        return center + scale * torch.randn(shape, generator=gen)

    return rnd


def _backbone(model_cfg: dict, rnd) -> dict:
    block = model_cfg["block"]
    mixer = block["sequence_mixer"]
    d, vocab = model_cfg["d_model"], model_cfg["vocab_size"]
    hd = d // mixer["n_heads"]
    kv = (mixer.get("n_kv_heads") or mixer["n_heads"]) * hd
    moda = block["name"] in ("moda", "post_norm_moda")
    attn, ff = ("attention.attention.", "feed_forward.feed_forward.") if moda else ("attention.", "feed_forward.")
    state = {"embeddings.weight": rnd(vocab, d, scale=0.05), "lm_head.norm.weight": rnd(d, scale=0.2, center=1.0),
             "lm_head.w_out.weight": rnd(vocab, d)}
    for i in range(model_cfg["n_layers"]):
        p = f"blocks.{i}."
        state.update({p + attn + "w_q.weight": rnd(d, d), p + attn + "w_k.weight": rnd(kv, d),
                      p + attn + "w_v.weight": rnd(kv, d), p + attn + "w_out.weight": rnd(d, d),
                      p + ff + "w1.weight": rnd(FFN, d), p + ff + "w3.weight": rnd(FFN, d),
                      p + ff + "w2.weight": rnd(d, FFN), p + "attention_norm.weight": rnd(d, scale=0.2, center=1.0),
                      p + "feed_forward_norm.weight": rnd(d, scale=0.2, center=1.0)})
    return state


def _hc_connector(rnd, d: int, n: int, index: int) -> dict:
    static_alpha = torch.cat([torch.zeros(n, 1), torch.eye(n)], 1)
    static_alpha[index % n, 0] = 1.0
    return {"static_alpha": static_alpha + rnd(n, n + 1, scale=0.1), "dynamic_alpha_proj": rnd(d, n + 1, scale=0.2),
            "dynamic_alpha_scale": rnd(scale=0.02, center=0.1), "static_beta": rnd(n, scale=0.1, center=1.0),
            "dynamic_beta_proj": rnd(d, scale=0.2), "dynamic_beta_scale": rnd(scale=0.02, center=0.1)}


def _mhc_connector(rnd, d: int, n: int, index: int) -> dict:
    pre = torch.full((n,), -2.0)
    pre[index % n] = 2.0
    return {"pre_bias": pre + rnd(n), "post_bias": rnd(n), "residual_bias": rnd(n, n, scale=3.0),
            "pre_dynamic_proj": rnd(n * d, n, scale=0.1), "post_dynamic_proj": rnd(n * d, n, scale=0.1),
            "residual_dynamic_proj": rnd(n * d, n * n, scale=0.1), "pre_gate": rnd(scale=0.1, center=0.5),
            "post_gate": rnd(scale=0.1, center=0.5), "residual_gate": rnd(scale=0.1, center=0.5)}


def _liger_connector(rnd, d: int, n: int, index: int) -> dict:
    m = n * n + 2 * n
    return {"phi": rnd(n * d, m, scale=0.1).to(torch.bfloat16), "b": rnd(m, scale=2.0),  # phi stored bf16
            "alpha_pre": rnd(scale=0.1, center=0.8), "alpha_post": rnd(scale=0.1, center=0.8),
            "alpha_res": rnd(scale=0.1, center=0.8)}


def _hyper_connections(state: dict, model_cfg: dict, rnd) -> None:
    block = model_cfg["block"]
    hc = block.get("hyper_connections") or {}
    kind = hc.get("kind", "hc" if block["name"] == "hc" else "mhc")
    n, d = hc.get("num_residual_streams", 4), model_cfg["d_model"]
    make = {"hc": _hc_connector, "mhc": _mhc_connector, "liger_mhc": _liger_connector}[kind]
    for i in range(model_cfg["n_layers"]):
        for j, side in enumerate(("attention", "feed_forward")):
            p = f"blocks.{i}.{side}_hyper_connection."
            state.update({p + k: v for k, v in make(rnd, d, n, 2 * i + j).items()})
    with_branch_aliases(state, model_cfg["n_layers"])


def with_branch_aliases(state: dict, n_layers: int) -> dict:
    """Each HC/mHC connector holds its pre-norm branch (``PreNormAttentionBranch`` / ``PreNormFeedForwardBranch``
    in ``block.py``), so the model's ``state_dict()`` lists the block's norm and sublayer a second time, under
    ``blocks.i.<side>_hyper_connection.branch.*``; adds those names (the same tensors) to ``state``."""
    for i in range(n_layers):
        for j, side in enumerate(("attention", "feed_forward")):
            p = f"blocks.{i}.{side}_hyper_connection."
            state[p + "branch.norm.weight"] = state[f"blocks.{i}.{side}_norm.weight"]
            for name in ([f"w_{x}" for x in ("q", "k", "v", "out")] if j == 0 else ["w1", "w2", "w3"]):
                state[f"{p}branch.{side}.{name}.weight"] = state[f"blocks.{i}.{side}.{name}.weight"]
    return state


def fork_state(model_cfg: dict, seed: int = 0) -> dict:
    """Random weights, off their init, under the fork's parameter names for the block type of ``model_cfg``."""
    rnd = _rand(torch.Generator().manual_seed(seed))
    block, d = model_cfg["block"], model_cfg["d_model"]
    state = _backbone(model_cfg, rnd)
    name = block["name"]
    for i in range(model_cfg["n_layers"]):
        p = f"blocks.{i}."
        if name == "peri_norm" or (name == "keel" and i > 0):
            state[p + "post_attention_norm.weight"] = rnd(d, scale=0.2, center=1.0)
        if name in ("peri_norm", "keel"):
            state[p + "post_feed_forward_norm.weight"] = rnd(d, scale=0.2, center=1.0)
        if block.get("attnres_block_size") is not None:
            if i > 0:
                state[p + "attn_res_proj.weight"], state[p + "attn_res_norm.weight"] = rnd(1, d), rnd(d, center=1.0)
            state[p + "mlp_res_proj.weight"], state[p + "mlp_res_norm.weight"] = rnd(1, d), rnd(d, center=1.0)
        skip = str(i) in (model_cfg.get("block_overrides") or {})
        if name in ("moda", "post_norm_moda") and not skip:
            kv = 2 * (block["sequence_mixer"].get("n_kv_heads") or HEADS) * (d // HEADS)
            state[p + "feed_forward.kv_proj.weight"] = rnd(kv, d)
    if block.get("attnres_block_size") is not None:
        state["res_proj.weight"], state["res_norm.weight"] = rnd(1, d), rnd(d, center=1.0)
    if "hyper_connections" in block or name in ("hc", "mhc"):
        _hyper_connections(state, model_cfg, rnd)
    return state


def keeps_fp32(name: str) -> bool:
    """Parameters the fork creates in fp32 whatever the model dtype: the Liger connector's bias and gains
    (``LigerHyperConnection``), the AttnRes queries and key norms (built without a dtype in ``block.py`` /
    ``model.py``)."""
    return any(part in name for part in ("_hyper_connection.b", "_hyper_connection.alpha_", "res_proj.", "res_norm."))


def write_release(root: Path, name: str, step: int, state: dict, config: dict, tokenizer=None,
                  dtype: torch.dtype | None = None) -> Path:
    """``root/name`` laid out as the fork's trainer saves a run: ``stepN/config.json``, ``stepN/model_and_optim/``
    (``torch.distributed.checkpoint``: model tensors and AdamW state) and ``tokenizer/``. ``dtype`` (the study's
    runs: bf16) applies to every fp32 tensor but those the fork keeps in fp32 (:func:`keeps_fp32`). Returns the
    step folder."""
    import torch.distributed.checkpoint as dcp

    step_dir = root / name / f"step{step}"
    step_dir.mkdir(parents=True, exist_ok=True)
    (step_dir / "config.json").write_text(json.dumps(config, indent=1))
    model = {k: (v.to(dtype) if dtype is not None and v.dtype == torch.float32 and not keeps_fp32(k) else v)
             for k, v in state.items()}
    model = {k: v.contiguous() for k, v in model.items()}
    optim = {f"state.{k}.exp_avg": torch.zeros_like(v) for k, v in model.items()}
    optim.update({f"state.{k}.step": torch.tensor(float(step)) for k in model})
    dcp.save({"model": model, "optim": optim}, storage_writer=dcp.FileSystemWriter(str(step_dir / "model_and_optim")),
             no_dist=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(root / name / "tokenizer"))
    return step_dir


def release_files(release: Path) -> dict[str, bytes]:
    """Every file of a release folder by its path in the repository (what the loopback Hub serves)."""
    return {str(p.relative_to(release)): p.read_bytes() for p in release.rglob("*") if p.is_file()}


def fork_init_state(model_cfg: dict, seed: int = 0) -> dict:
    """An HC / mHC model as the fork initialises it (step 0): normal weights of std ``init_std`` (the attention and
    FFN output matrices divided by sqrt(n)), unit norms, HC's static identity routing with zero dynamic projections
    and 0.01 gates, mHC's gap-8 biases with zero projections and 0.01 gates."""
    gen = torch.Generator().manual_seed(seed)
    std, d = model_cfg.get("init_std", 0.02), model_cfg["d_model"]
    hc = model_cfg["block"].get("hyper_connections") or {}
    n = hc.get("num_residual_streams", 4)
    state = {}
    for k, v in _backbone(model_cfg, _rand(gen)).items():
        scale = std / math.sqrt(n) if k.endswith(("attention.w_out.weight", "feed_forward.w2.weight")) else std
        state[k] = torch.ones_like(v) if "norm" in k else scale * torch.randn(v.shape, generator=gen)
    for i in range(model_cfg["n_layers"]):
        for j, side in enumerate(("attention", "feed_forward")):
            p, s = f"blocks.{i}.{side}_hyper_connection.", (2 * i + j) % n
            init = _hc_init(d, n, s) if hc.get("kind", "hc") == "hc" else _mhc_init(d, n, s)
            state.update({p + k: v for k, v in init.items()})
    return with_branch_aliases(state, model_cfg["n_layers"])


def _hc_init(d: int, n: int, s: int) -> dict:
    alpha = torch.cat([torch.zeros(n, 1), torch.eye(n)], 1)
    alpha[s, 0] = 1.0
    return {"static_alpha": alpha, "dynamic_alpha_proj": torch.zeros(d, n + 1), "static_beta": torch.ones(n),
            "dynamic_alpha_scale": torch.tensor(0.01), "dynamic_beta_proj": torch.zeros(d),
            "dynamic_beta_scale": torch.tensor(0.01)}


def _mhc_init(d: int, n: int, s: int) -> dict:
    pre = torch.full((n,), -8.0)
    pre[s] = 8.0
    gates = {g: torch.tensor(0.01) for g in ("pre_gate", "post_gate", "residual_gate")}
    return {"pre_bias": pre, "post_bias": torch.zeros(n), "residual_bias": torch.full((n, n), -8.0).fill_diagonal_(0.0),
            "pre_dynamic_proj": torch.zeros(n * d, n), "post_dynamic_proj": torch.zeros(n * d, n),
            "residual_dynamic_proj": torch.zeros(n * d, n * n), **gates}


def train_fork(state: dict, model_cfg: dict, ids: list[int], steps: int, readout: str, lr: float = 1e-2,
               window: int = 64, batch_rows: int | None = None, seed: int = 0) -> dict:
    """``steps`` AdamW steps of the fork's model (its forward above) on windows of ``ids`` under ``readout``
    (every window per step, or ``batch_rows`` of them drawn at random with ``seed``); returns the trained state,
    with the branch aliases of the trained tensors."""
    params = {k: v.clone().requires_grad_(True) for k, v in state.items() if ".branch." not in k}
    rows = torch.tensor([ids[i:i + window + 1] for i in range(0, len(ids) - window - 1, window)])
    optim = torch.optim.AdamW(params.values(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        batch = rows if batch_rows is None else rows[torch.randperm(len(rows), generator=gen)[:batch_rows]]
        logits = Fork(params, model_cfg).logits(batch[:, :-1], readout=readout)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        optim.zero_grad()
        loss.backward()
        optim.step()
    return with_branch_aliases({k: v.detach().clone() for k, v in params.items()}, model_cfg["n_layers"])
