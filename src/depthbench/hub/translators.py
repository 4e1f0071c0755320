"""What each architecture adds to the study's OLMo-core checkpoint format, one translator per architecture.

:mod:`depthbench.hub.convert` reads the study's released checkpoints (DepthBench, arXiv 2609.32534) with shared
code: the backbone's key mapping, shape, norms, heads, RoPE and the refusals common to every block. Everything one
architecture adds lives in its :class:`Translator` here, registered in :data:`TRANSLATORS` under its registry id:

* ``block_names``: the ``model.block.name`` values that mean the architecture (:data:`BLOCK_NAMES`);
* ``key_map``: its tensors beyond the backbone's, as ``(OLMo-core pattern, depthbench pattern, transform)``
  (``{i}`` is the block index; transform ``"T"`` transposes, ``"flat"`` flattens ``[1, d]`` to ``[d]``);
* :meth:`Translator.settings`: the config fields it reads from the experiment config, its refusals and
  approximations; three class attributes adjust the shared checks for it (``unnamed_norm_type``,
  ``head_eps_must_match``, ``residual_alpha_allowed``);
* the hooks that rename or compute tensors the key map cannot express (MoDA's wrapped modules, mHC's projections),
  in both directions;
* :data:`BLOCK_NAME_REFINEMENTS` / :data:`REFINEMENTS`: block settings that change the id the block name gave
  (HC/mHC on OLMo-core's default block, AttnRes's block size), each a static method of its family's translator.

A new architecture adds one line to :data:`TRANSLATORS` (``Translator(*block_names)`` when the format adds nothing
else, ``Translator()`` when the study has no such block); ``tests/hub/test_convert.py`` checks that every registered
architecture has one. Nothing here imports torch at module level.
"""

from __future__ import annotations

import math
import re
from typing import Any

# Aliases of shared modules that a state dict may list twice (the HC/mHC connectors hold their branch).
ALIAS_RE = re.compile(r"^blocks\.\d+\.(attention|feed_forward)_hyper_connection\.branch\.")
# Non-persistent constants some revisions store (recomputed by depthbench; checked, then dropped).
CONSTANT_RE = re.compile(r"^blocks\.(\d+)\.ln_scale$")

KeyMap = tuple[tuple[str, str, str], ...]


class ConversionError(ValueError):
    """The checkpoint holds a setting depthbench cannot represent (named in the message), or is malformed."""


def lookup(tree: dict, *keys, default=None):
    """``tree[keys[0]][keys[1]]...``, or ``default`` where a level is missing or not a dict."""
    for key in keys:
        if not isinstance(tree, dict) or key not in tree:
            return default
        tree = tree[key]
    return tree


# ================================================================================================ the default
class Translator:
    """An architecture whose checkpoint is the backbone alone (Pre-LN's names); the base of every translator."""

    block_names: tuple[str, ...] = ()
    key_map: KeyMap = ()
    unnamed_norm_type = "rmsnorm"  # norm_type when block.layer_norm has no name
    head_eps_must_match = True  # lm_head.layer_norm.eps must equal the block norms' eps
    residual_alpha_allowed = False  # block.*_residual_alpha other than 1 is representable

    def __init__(self, *block_names: str):
        if block_names:
            self.block_names = block_names

    def settings(self, block: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 approximations: list[str]) -> str | None:
        """Read the architecture's fields from ``block`` (the config's ``model.block``) into ``fields``; append
        unrepresentable settings to ``problems`` and inexact ones to ``approximations``. Returns the registry id
        when the settings change it (HC's ``kind``), else ``None``."""
        return None

    def map_options(self, block: dict, fields: dict[str, Any]) -> dict[str, Any]:
        """Keyword arguments of :func:`~depthbench.hub.convert.map_state` this checkpoint needs."""
        return {}

    def rename_from_olmo(self, source: dict, n_layers: int) -> dict:
        """``source`` with OLMo-core names the key maps do not use renamed to names they do."""
        return source

    def tensors_from_olmo(self, source: dict, n_layers: int, n_streams: int, liger: bool) -> dict:
        """depthbench tensors computed from ``source`` beyond the key maps (popping what they consume)."""
        return {}

    def tensors_to_olmo(self, state: dict, n_layers: int, n_streams: int) -> dict:
        """The inverse of :meth:`tensors_from_olmo` (popping from the depthbench ``state``)."""
        return {}

    def rename_to_olmo(self, out: dict) -> dict:
        """The inverse of :meth:`rename_from_olmo`."""
        return out


# ================================================================================================ the architectures
POST_NORM_KEYS: KeyMap = (
    ("blocks.{i}.post_attention_norm.weight", "model.layers.{i}.attn_residual.out_norm.weight", ""),
    ("blocks.{i}.post_feed_forward_norm.weight", "model.layers.{i}.mlp_residual.out_norm.weight", ""),
)


class PeriLN(Translator):
    """Peri-LN: the output norms of both sublayers."""

    key_map = POST_NORM_KEYS


class LNS(Translator):
    """LayerNorm Scaling: a stored ``ln_scale`` buffer must be depthbench's 1/sqrt(l+1) (it is recomputed)."""

    def settings(self, block: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 approximations: list[str]) -> str | None:
        for key, value in state.items():
            match = CONSTANT_RE.match(key)
            if match and abs(float(value) - 1 / math.sqrt(int(match[1]) + 1)) > 1e-6:
                problems.append(f"{key}={float(value)} (depthbench's LNS uses 1/sqrt(l+1))")
        return None


class DeepNorm(Translator):
    """DeepNorm: the study's DeepNorm entry point switches the block norm to LayerNorm when it names none."""

    unnamed_norm_type = "layernorm"


class Keel(PeriLN):
    """KEEL: Peri-LN's output norms, and ``keel_alpha`` when it is not the default 2L."""

    def settings(self, block: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 approximations: list[str]) -> str | None:
        if block.get("keel_alpha") not in (None, 2 * (fields["num_hidden_layers"] or 0)):
            fields["keel_alpha"] = block["keel_alpha"]
        return None


class DepthScaled(Translator):
    """depth-muP / CompleteP: their residual scaling (``block.*_residual_alpha``) is representable;
    ``residual_scaling_base_depth`` is read."""

    residual_alpha_allowed = True

    def settings(self, block: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 approximations: list[str]) -> str | None:
        if block.get("residual_scaling_base_depth") is not None:
            fields["depth_scaling_base_depth"] = block["residual_scaling_base_depth"]
        return None


HC_KEYS: KeyMap = tuple(
    (f"blocks.{{i}}.{side}_hyper_connection.{src}", f"model.layers.{{i}}.{dst_side}_residual.{dst}", t)
    for side, dst_side in (("attention", "attn"), ("feed_forward", "mlp"))
    for src, dst, t in (("static_alpha", "static_alpha", ""), ("static_beta", "static_beta", ""),
                        ("dynamic_alpha_proj", "dynamic_alpha_fn", "T"), ("dynamic_beta_proj", "dynamic_beta_fn", ""),
                        ("dynamic_alpha_scale", "dynamic_alpha_scale", ""),
                        ("dynamic_beta_scale", "dynamic_beta_scale", "")))


class HyperConnections(Translator):
    """HC: ``hyper_connections`` (shared with mHC, whose ``kind`` it may name instead); the connectors' tensors."""

    key_map = HC_KEYS
    default_kind = "hc"  # hyper_connections.kind when the config names none

    @staticmethod
    def refine_block_name(arch: str, block: dict) -> str:
        """OLMo-core's default block with ``hyper_connections`` is HC (kind ``hc``, the default) or mHC (any other
        kind; :meth:`settings` refuses the ones depthbench lacks)."""
        if block.get("hyper_connections") and arch == "pre_ln":
            kind = lookup(block, "hyper_connections", "kind", default="hc")
            return "hc" if kind == "hc" else "mhc"
        return arch

    def settings(self, block: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 approximations: list[str]) -> str | None:
        hc = block.get("hyper_connections") or {}
        kind = hc.get("kind", self.default_kind)
        n = hc.get("num_residual_streams", 4)
        reduce_mode = hc.get("reduce_mode", hc.get("collapse", "auto"))
        if kind == "hc":
            fields.update(hc_num_streams=n, hc_use_tanh=bool(hc.get("tanh", hc.get("use_tanh", True))),
                          hc_norm_eps=1e-8, hc_readout="mean" if reduce_mode == "mean" else "sum_norm")
            return "hc"
        if kind in ("mhc", "liger_mhc"):
            if hc.get("tanh", hc.get("use_tanh", False)):
                problems.append(f"hyper_connections.tanh=true with kind={kind} (depthbench's mHC maps are linear)")
            native = kind == "mhc"
            fields.update(mhc_num_streams=n, mhc_sinkhorn_iters=hc.get("sinkhorn_iters", 20),
                          mhc_sinkhorn_temperature=hc.get("sinkhorn_tau", 1.0),
                          mhc_norm_eps=1e-8 if native else 1e-6,
                          mhc_readout=("mean" if reduce_mode == "mean" else "sum_norm") if native else
                          ("sum_norm" if reduce_mode == "sum" else "mean"))
            if not native:
                approximations.append(
                    "mHC (Liger backend): the kernel's Sinkhorn ends on a column normalisation, depthbench's on a "
                    "row normalisation (and uses eps-free log-domain iterations); after the configured iterations "
                    "the mixing matrices agree only to the Sinkhorn tolerance")
            return "mhc"
        problems.append(f"hyper_connections.kind={kind!r} (the static ablation's softmax pre/post maps are not "
                        "depthbench's mHC maps)")
        return None


class ManifoldHyperConnections(HyperConnections):
    """mHC: HC's settings (default kind ``liger_mhc``); the connectors' projections, native or Liger backend.

    depthbench: ``phi`` [n²+2n, nd] (pre | post | res rows, res row-major as H_res[t, s]), ``bias`` [n²+2n], gains
    ``alpha_*``; z = α ⊙ (x̂ Φ) + b, H_res applied as Σ_s H_res[t, s] H_s.

    Native backend (``mhc``): separate projections, biases and gates; it applies Σ_s H_res[s, t] H_s with a
    Sinkhorn ending on columns, which equals depthbench's row-ending Sinkhorn on the transposed logits exactly, so
    the residual logits are transposed. Liger backend: one Φ [nd, n²+2n] and bias b inside the gains
    (α ⊙ (x̂Φ + b)), so depthbench's bias is α ⊙ b.
    """

    key_map = ()
    default_kind = "liger_mhc"

    def map_options(self, block: dict, fields: dict[str, Any]) -> dict[str, Any]:
        return {"n_streams": fields["mhc_num_streams"],
                "liger": lookup(block, "hyper_connections", "kind", default="liger_mhc") == "liger_mhc"}

    def tensors_from_olmo(self, source: dict, n_layers: int, n_streams: int, liger: bool) -> dict:
        import torch

        n = n_streams
        out = {}
        perm = torch.arange(n * n).reshape(n, n).t().reshape(-1)  # res index t*n+s <- s*n+t
        for i in range(n_layers):
            for side, dst in (("attention", "attn"), ("feed_forward", "mlp")):
                p = f"blocks.{i}.{side}_hyper_connection."
                q = f"model.layers.{i}.{dst}_residual."
                if liger:
                    phi, b = source.pop(p + "phi"), source.pop(p + "b").float()
                    a = {g: source.pop(p + f"alpha_{g}").float() for g in ("pre", "post", "res")}
                    out[q + "phi"] = phi.t().float().contiguous()
                    out[q + "bias"] = torch.cat([a["pre"] * b[:n], a["post"] * b[n:2 * n], a["res"] * b[2 * n:]])
                    for g in ("pre", "post", "res"):
                        out[q + f"alpha_{g}"] = a[g]
                else:
                    res_proj = source.pop(p + "residual_dynamic_proj")[:, perm]
                    out[q + "phi"] = torch.cat([source.pop(p + "pre_dynamic_proj"),
                                                source.pop(p + "post_dynamic_proj"), res_proj], dim=1).t().contiguous()
                    out[q + "bias"] = torch.cat([source.pop(p + "pre_bias"), source.pop(p + "post_bias"),
                                                 source.pop(p + "residual_bias").t().reshape(-1)])
                    for g, src in (("pre", "pre_gate"), ("post", "post_gate"), ("res", "residual_gate")):
                        out[q + f"alpha_{g}"] = source.pop(p + src)
        return out

    def tensors_to_olmo(self, state: dict, n_layers: int, n_streams: int) -> dict:
        """The native backend's names (the inverse of :meth:`tensors_from_olmo` with ``liger=False``)."""
        import torch

        n = n_streams
        out = {}
        perm = torch.arange(n * n).reshape(n, n).t().reshape(-1)
        for i in range(n_layers):
            for side, dst in (("attention", "attn"), ("feed_forward", "mlp")):
                p, q = f"blocks.{i}.{side}_hyper_connection.", f"model.layers.{i}.{dst}_residual."
                phi, bias = state.pop(q + "phi").t(), state.pop(q + "bias")
                out[p + "pre_dynamic_proj"], out[p + "post_dynamic_proj"] = phi[:, :n], phi[:, n:2 * n]
                out[p + "residual_dynamic_proj"] = phi[:, 2 * n:][:, perm]
                out[p + "pre_bias"], out[p + "post_bias"] = bias[:n], bias[n:2 * n]
                out[p + "residual_bias"] = bias[2 * n:].reshape(n, n).t()
                for g, src in (("pre", "pre_gate"), ("post", "post_gate"), ("res", "residual_gate")):
                    out[p + src] = state.pop(q + f"alpha_{g}")
        return out


ATTNRES_KEYS: KeyMap = (
    ("blocks.{i}.attn_res_proj.weight", "model.layers.{i}.attn_residual.query", "flat"),
    ("blocks.{i}.attn_res_norm.weight", "model.layers.{i}.attn_residual.key_gain", ""),
    ("blocks.{i}.mlp_res_proj.weight", "model.layers.{i}.mlp_residual.query", "flat"),
    ("blocks.{i}.mlp_res_norm.weight", "model.layers.{i}.mlp_residual.key_gain", ""),
    ("res_proj.weight", "model.wiring.query", "flat"),
    ("res_norm.weight", "model.wiring.key_gain", ""),
)


class AttnRes(Translator):
    """Full AttnRes: the depth queries and key gains; the ablations are refused; one eps for every norm."""

    key_map = ATTNRES_KEYS
    head_eps_must_match = False  # settings() sets the one eps depthbench uses

    @staticmethod
    def refine(arch: str, block: dict, name_settings: dict) -> str:
        """Full (block size 1) or Block AttnRes, for the AttnRes architectures and any block with
        ``attnres_block_size``."""
        if arch in ("attnres", "block_attnres") or block.get("attnres_block_size") is not None:
            size = block.get("attnres_block_size") or 1
            if name_settings.get("arch") == "block_attnres" and size == 1 and "attnres_block_size" not in block:
                raise ConversionError("attnres_block_size: a Block AttnRes checkpoint must record its block size "
                                      "(the study passed it on the command line); pass --set attnres_block_size=N")
            return "attnres" if size == 1 else "block_attnres"
        return arch

    def settings(self, block: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 approximations: list[str]) -> str | None:
        for key in ("attnres_use_bias", "attnres_learn_logit_scale", "attnres_topk_fraction"):
            if block.get(key):
                problems.append(f"block.{key}={block[key]!r} (AttnRes ablation depthbench does not implement)")
        mix_eps = 1e-5  # the reference's depth-mix norms use the RMS norm config's default eps
        if fields["rms_norm_eps"] != mix_eps:
            approximations.append(
                f"AttnRes: the reference's depth mixes normalise with eps {mix_eps} and its first attention norm "
                f"with the model's eps {fields['rms_norm_eps']}; depthbench uses one eps ({mix_eps}) for both")
            fields["rms_norm_eps"] = mix_eps
        return None


class BlockAttnRes(AttnRes):
    """Block AttnRes: Full AttnRes's format, and ``attnres_block_size``."""

    def settings(self, block: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 approximations: list[str]) -> str | None:
        fields["attnres_block_size"] = block.get("attnres_block_size")
        return super().settings(block, state, fields, problems, approximations)


MODA_KEYS: KeyMap = (
    ("blocks.{i}.feed_forward.kv_proj.weight", "model.layers.{i}.mlp_residual.kv_proj.weight", ""),
)
# MoDA wraps the attention and the feed-forward:
# blocks.{i}.attention.attention.w_q, blocks.{i}.feed_forward.feed_forward.w1
MODA_WRAPPED = (("blocks.{i}.attention.attention.", "blocks.{i}.attention."),
                ("blocks.{i}.feed_forward.feed_forward.", "blocks.{i}.feed_forward."))


class MoDA(Translator):
    """MoDA: the FFN's depth key/value projection, the wrapped sublayers, ``moda`` settings, the post-norm block."""

    key_map = MODA_KEYS

    def settings(self, block: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 approximations: list[str]) -> str | None:
        moda = block.get("moda") or {}
        fields["moda_post_norm"] = block.get("name") == "post_norm_moda"
        if moda.get("extra_attn_kv_proj"):
            problems.append("moda.extra_attn_kv_proj=true")
        if moda.get("extra_ffn_kv_proj") is False:
            problems.append("moda.extra_ffn_kv_proj=false (depthbench's MoDA always has the FFN depth key/value)")
        if moda.get("cache_post_norm_k") is False:
            problems.append("moda.cache_post_norm_k=false")
        return None

    def rename_from_olmo(self, source: dict, n_layers: int) -> dict:
        renamed = {}
        for key, value in source.items():
            for i in range(n_layers):
                for wrapped, plain in MODA_WRAPPED:
                    if key.startswith(wrapped.format(i=i)):
                        key = plain.format(i=i) + key[len(wrapped.format(i=i)):]
            renamed[key] = value
        return renamed

    def rename_to_olmo(self, out: dict) -> dict:
        return {_moda_wrap(k): v for k, v in out.items()}


def _moda_wrap(key: str) -> str:
    match = re.match(r"^blocks\.(\d+)\.(attention|feed_forward)\.(w_q|w_k|w_v|w_out|w1|w2|w3)\.(.*)$", key)
    return f"blocks.{match[1]}.{match[2]}.{match[2]}.{match[3]}.{match[4]}" if match else key


# ================================================================================================ the table
DEFAULT = Translator()

# Registry id -> translator, in the registry's order, with the architecture's ``model.block.name`` values.
TRANSLATORS: dict[str, Translator] = {
    "pre_ln": Translator("default"),
    "post_ln": Translator("post_norm"),
    "peri_ln": PeriLN("peri_norm"),
    "lns": LNS("default_scaled"),
    "deepnorm": DeepNorm("deepnorm"),
    "keel": Keel("keel"),
    "mix_ln": DEFAULT,
    "depth_mup": DepthScaled("depth_mup"),
    "completep": DepthScaled("completep"),
    "hc": HyperConnections("hc"),
    "mhc": ManifoldHyperConnections("mhc"),
    "attnres": AttnRes("attnres"),
    "block_attnres": BlockAttnRes(),
    "moda": MoDA("moda", "post_norm_moda"),
    "denseformer": DEFAULT,
}

# OLMo-core block names (``model.block.name``) -> registry id (before the refinements below).
BLOCK_NAMES: dict[str, str] = {name: arch for arch, t in TRANSLATORS.items() for name in t.block_names}

# Block settings that refine the architecture, in order: after the block name gave it (OLMo-core's default block
# with ``hyper_connections``), then whatever gave it (``attnres_block_size``, on any block).
BLOCK_NAME_REFINEMENTS = (HyperConnections.refine_block_name,)
REFINEMENTS = (AttnRes.refine,)


def translator_for(arch: str) -> Translator:
    """The translator of registry id ``arch`` (:data:`DEFAULT` for an id the table lacks)."""
    return TRANSLATORS.get(arch, DEFAULT)
