"""What each architecture adds to the study's OLMo-core checkpoint format, one translator per architecture.

:mod:`depthbench.hub.convert` reads the study's released checkpoints (DepthBench, arXiv 2609.32534) with shared
code: the backbone's key mapping, shape, norms, heads, RoPE and the refusals common to every block
(:mod:`depthbench.hub.settings`). Everything one architecture adds lives in its :class:`Translator` here,
registered in :data:`TRANSLATORS` under its registry id:

* ``block_names``: the ``model.block.name`` values that mean the architecture (:data:`BLOCK_NAMES`);
* ``key_map``: its tensors beyond the backbone's, as ``(OLMo-core pattern, depthbench pattern, transform)``
  (``{i}`` is the block index; transform ``"T"`` transposes, ``"flat"`` flattens ``[1, d]`` to ``[d]``);
* :meth:`Translator.settings`: the config fields it reads from the experiment config, its refusals and the notes
  the model card records; class attributes adjust the shared checks for it (``unnamed_norm_type``,
  ``head_eps_must_match``, ``residual_alpha_allowed``, ``final_norm_field``) and name the readout a checkpoint's
  config may leave undecided (``readout_field``, ``readout_choices``: decided by :mod:`depthbench.hub.readout`);
* the hooks that rename or compute tensors the key map cannot express (MoDA's wrapped modules, mHC's projections),
  in both directions;
* :data:`BLOCK_NAME_REFINEMENTS` / :data:`REFINEMENTS`: block settings that change the id the block name gave
  (HC/mHC on OLMo-core's default block, AttnRes's block size), each a static method of its family's translator.

The fork's code these translators follow is the study's repository ``keyu-wang-2002/DepthBench``, under
``pretrain/OLMo-core/src/olmo_core/`` (``nn/transformer/{block,model,config}.py``, ``nn/hyper_connections.py``,
``nn/moda.py``, ``kernels/attnres.py``), its entry scripts under ``examples/`` and the PyTorch forward of its
Triton kernels in ``analysis/analysis_utils.py``.

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
#: The eps of an RMSNorm built from OLMo-core's ``LayerNormConfig`` without one (its ``LayerNorm`` default).
OLMO_DEFAULT_NORM_EPS = 1e-5

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


def block_of(model_cfg: dict) -> dict:
    """The ``block`` section of a model config (empty when absent)."""
    return model_cfg.get("block") or {}


# ================================================================================================ the default
class Translator:
    """An architecture whose checkpoint is the backbone alone (Pre-LN's names); the base of every translator."""

    block_names: tuple[str, ...] = ()
    key_map: KeyMap = ()
    unnamed_norm_type = "rmsnorm"  # norm_type when block.layer_norm has no name
    head_eps_must_match = True  # lm_head.layer_norm.eps must equal the block norms' eps
    residual_alpha_allowed = False  # block.*_residual_alpha other than 1 is representable
    final_norm_field: str | None = None  # config field taking a final-norm type other than the block norms'
    readout_field: str | None = None  # config field of a readout the checkpoint's config may leave undecided
    readout_choices: tuple[str, ...] = ()  # its candidates, as the fork's revisions compute them

    def __init__(self, *block_names: str):
        if block_names:
            self.block_names = block_names

    def settings(self, model_cfg: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 notes: list[str]) -> str | None:
        """Read the architecture's fields from ``model_cfg`` (the config's ``model`` section) into ``fields``;
        append unrepresentable settings to ``problems`` and what the model card should say to ``notes``. Set
        ``fields[readout_field] = None`` when the config leaves the readout undecided. Returns the registry id when
        the settings change it (HC's ``kind``), else ``None``."""
        return None

    def block_overrides_problem(self, model_cfg: dict) -> str | None:
        """Why ``model.block_overrides`` cannot be represented (``None``: there are none, or this translator
        accounts for them)."""
        if model_cfg.get("block_overrides"):
            return "model.block_overrides (per-block settings)"
        return None

    def map_options(self, block: dict, fields: dict[str, Any]) -> dict[str, Any]:
        """Keyword arguments of :func:`~depthbench.hub.convert.map_state` this checkpoint needs."""
        return {}

    def rename_from_olmo(self, source: dict, n_layers: int) -> dict:
        """``source`` with OLMo-core names the key maps do not use renamed to names they do."""
        return source

    def tensors_from_olmo(self, source: dict, n_layers: int, n_streams: int, liger: bool,
                          pre_eps: float = 0.0) -> dict:
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

    def settings(self, model_cfg: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 notes: list[str]) -> str | None:
        for key, value in state.items():
            match = CONSTANT_RE.match(key)
            if match and abs(float(value) - 1 / math.sqrt(int(match[1]) + 1)) > 1e-6:
                problems.append(f"{key}={float(value)} (depthbench's LNS uses 1/sqrt(l+1))")
        return None


class DeepNorm(Translator):
    """DeepNorm: the study's entry script (``examples/pretrain_deepnorm.py``) switches the block norms to LayerNorm
    (``block.layer_norm.name = "default"``) and leaves the LM head's norm RMSNorm, which
    ``deepnorm_final_norm_type`` represents; an unnamed block norm is LayerNorm."""

    unnamed_norm_type = "layernorm"
    final_norm_field = "deepnorm_final_norm_type"


class Keel(PeriLN):
    """KEEL: Peri-LN's output norms, and ``keel_alpha`` when it is not the default 2L."""

    def settings(self, model_cfg: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 notes: list[str]) -> str | None:
        block = block_of(model_cfg)
        if block.get("keel_alpha") not in (None, 2 * (fields["num_hidden_layers"] or 0)):
            fields["keel_alpha"] = block["keel_alpha"]
        return None


class DepthScaled(Translator):
    """depth-muP / CompleteP: the residual scale (L / L_base)^-a from ``block.residual_scaling_base_depth`` (the
    fork's ``DepthScaledTransformerBlock`` ignores ``block.*_residual_alpha``), and the scaling axis.

    The depth-width axis of ``examples/pretrain_preln_mup.py`` records itself in the model config only through the
    init: it sets ``embedding_init_std`` to the base std and ``init_std`` to base * (d / d_base)^(-1/2), and it
    multiplies the logits by d_base / d at run time (a patched LM-head forward the config does not record). So
    ``embedding_init_std`` set means depth-width with d_base = d (init_std / embedding_init_std)^2, carried as
    ``depth_scaling_axis="depth-width"`` and ``depth_scaling_base_width`` (the logits' multiplier d_base / d);
    a d_base that is not a whole number cannot come from that script and is refused by name."""

    residual_alpha_allowed = True

    def settings(self, model_cfg: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 notes: list[str]) -> str | None:
        base_depth = block_of(model_cfg).get("residual_scaling_base_depth")
        if base_depth is None:
            problems.append("block.residual_scaling_base_depth is missing (the study's depth-muP/CompleteP blocks "
                            "require it)")
        else:
            fields["depth_scaling_base_depth"] = base_depth
        init_std, embedding_std = model_cfg.get("init_std", 0.02), model_cfg.get("embedding_init_std")
        if embedding_std is None:
            return None
        d = fields["hidden_size"]
        base_width = d * (init_std / embedding_std) ** 2 if init_std and embedding_std else float("nan")
        if not (math.isfinite(base_width) and base_width >= 1 and abs(base_width - round(base_width)) < 1e-6 * d):
            problems.append(f"model.init_std={init_std} with model.embedding_init_std={embedding_std} (the "
                            f"depth-width axis would need a base width of {base_width:.6g}, not a whole number)")
            return None
        fields.update(depth_scaling_axis="depth-width", depth_scaling_base_width=int(round(base_width)),
                      initializer_range=embedding_std)
        notes.append(f"depth-width axis (read from init_std / embedding_init_std): base width "
                     f"{int(round(base_width))}, logits multiplied by {round(base_width) / d:.6g} (d_base / d)")
        return None


HC_KEYS: KeyMap = tuple(
    (f"blocks.{{i}}.{side}_hyper_connection.{src}", f"model.layers.{{i}}.{dst_side}_residual.{dst}", t)
    for side, dst_side in (("attention", "attn"), ("feed_forward", "mlp"))
    for src, dst, t in (("static_alpha", "static_alpha", ""), ("static_beta", "static_beta", ""),
                        ("dynamic_alpha_proj", "dynamic_alpha_fn", "T"), ("dynamic_beta_proj", "dynamic_beta_fn", ""),
                        ("dynamic_alpha_scale", "dynamic_alpha_scale", ""),
                        ("dynamic_beta_scale", "dynamic_beta_scale", "")))
#: The two readouts of the fork's "sum" collapse: older ``model.py`` revisions (5152cab0, 2d162257) apply the LM
#: head's norm to each stream and sum the normalised streams (``sum_norm``); the newest (8cc2fd74) sums the streams
#: and then applies the head's norm (``sum``). ``config.json`` says ``collapse: "auto"`` in both.
SUM_READOUTS = ("sum", "sum_norm")


def reduce_mode(hc: dict, kind: str) -> str:
    """The fork's stream collapse (``HyperConnectionsConfig.reduce_mode``): ``collapse``, where ``"auto"`` means
    ``"mean"`` for the Liger backend and ``"sum"`` otherwise."""
    collapse = hc.get("collapse", "auto")
    if collapse == "auto":
        return "mean" if kind == "liger_mhc" else "sum"
    return collapse


class HyperConnections(Translator):
    """HC: ``hyper_connections`` (shared with mHC, whose ``kind`` it may name instead); the connectors' tensors.

    The readout is ``mean`` when the collapse is ``mean``; a ``sum`` collapse leaves it undecided between
    :data:`SUM_READOUTS` (decided from evidence, or by ``--readout``)."""

    key_map = HC_KEYS
    default_kind = "hc"  # hyper_connections.kind of the fork's HC block when the config has no hyper_connections
    readout_field = "hc_readout"
    readout_choices = SUM_READOUTS

    @staticmethod
    def refine_block_name(arch: str, block: dict) -> str:
        """OLMo-core's default block with ``hyper_connections`` is HC (kind ``hc``, the default) or mHC (any other
        kind; :meth:`settings` refuses the ones depthbench lacks), as the fork's ``TransformerBlockConfig``
        reads old checkpoints."""
        if block.get("hyper_connections") and arch == "pre_ln":
            kind = lookup(block, "hyper_connections", "kind", default="hc")
            return "hc" if kind == "hc" else "mhc"
        return arch

    def settings(self, model_cfg: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 notes: list[str]) -> str | None:
        hc = block_of(model_cfg).get("hyper_connections") or {}
        kind = hc.get("kind", self.default_kind)
        if kind == "hc":
            mode = reduce_mode(hc, kind)
            tanh = hc.get("tanh")
            fields.update(hc_num_streams=hc.get("num_residual_streams", 4), hc_use_tanh=True if tanh is None else
                          bool(tanh), hc_norm_eps=1e-8, hc_readout="mean" if mode == "mean" else None,
                          hc_scale_output_init=bool(hc.get("scale_output_init_by_sqrt_n", True)),
                          hc_gate_init=hc.get("gating_factor_init", 0.01))
            return "hc"
        if kind in ("mhc", "liger_mhc"):
            _mhc_settings(hc, kind, fields, problems, notes)
            return "mhc"
        problems.append(f"hyper_connections.kind={kind!r} (the static ablation's softmax pre/post maps are not "
                        "depthbench's mHC maps)")
        return None


def _mhc_settings(hc: dict, kind: str, fields: dict[str, Any], problems: list[str], notes: list[str]) -> None:
    """mHC's fields: native (``mhc``) or Liger (``liger_mhc``) backend, as ``nn/hyper_connections.py`` and the
    Liger PyTorch forward in ``analysis/analysis_utils.py`` compute them."""
    if hc.get("tanh"):
        problems.append(f"hyper_connections.tanh=true with kind={kind} (depthbench's mHC maps are linear)")
    native = kind == "mhc"
    mode = reduce_mode(hc, kind)
    fields.update(mhc_num_streams=hc.get("num_residual_streams", 4), mhc_sinkhorn_iters=hc.get("sinkhorn_iters", 20),
                  mhc_readout="mean" if mode == "mean" else None, mhc_gate_init=hc.get("gating_factor_init", 0.01),
                  mhc_scale_output_init=bool(hc.get("scale_output_init_by_sqrt_n", True)))
    if native:
        fields.update(mhc_norm_eps=1e-8, mhc_sinkhorn_temperature=hc.get("sinkhorn_tau", 1.0))
        return
    # Liger: RMS eps liger_rms_eps, H_post = liger_post_mult * sigmoid, Sinkhorn at tau 1 ending on the columns
    fields.update(mhc_norm_eps=hc.get("liger_rms_eps", 1e-6), mhc_sinkhorn_temperature=1.0,
                  mhc_sinkhorn_ends_on="columns")
    if hc.get("liger_post_mult", 2.0) != 2.0:
        problems.append(f"hyper_connections.liger_post_mult={hc['liger_post_mult']} (depthbench's H_post is "
                        "2 sigmoid)")
    if hc.get("sinkhorn_tau", 1.0) != 1.0:
        notes.append(f"hyper_connections.sinkhorn_tau={hc['sinkhorn_tau']} is not used by the Liger backend "
                     "(its Sinkhorn runs at temperature 1)")


class ManifoldHyperConnections(HyperConnections):
    """mHC: HC's settings (the fork's mHC block defaults to kind ``mhc``); the connectors' projections, native or
    Liger backend.

    depthbench: ``phi`` [n²+2n, nd] (pre | post | res rows, res row-major as H_res[t, s]), ``bias`` [n²+2n], gains
    ``alpha_*``; z = α ⊙ (x̂ Φ) + b, H_res applied as Σ_s H_res[t, s] H_s.

    Native backend (``mhc``): separate projections, biases and gates; it applies Σ_s H_res[s, t] H_s with a
    Sinkhorn ending on columns, which equals depthbench's row-ending Sinkhorn on the transposed logits exactly, so
    the residual logits are transposed. Liger backend: one Φ [nd, n²+2n] and bias b inside the gains
    (α ⊙ (x̂Φ + b), plus ``liger_pre_eps`` on the pre logits), so depthbench's bias is α ⊙ b (+ pre_eps); it applies
    Σ_s H_res[t, s] H_s with the same column-ending Sinkhorn, which ``mhc_sinkhorn_ends_on="columns"`` computes.
    """

    key_map = ()
    default_kind = "mhc"
    readout_field = "mhc_readout"

    def map_options(self, block: dict, fields: dict[str, Any]) -> dict[str, Any]:
        hc = block.get("hyper_connections") or {}
        liger = hc.get("kind", self.default_kind) == "liger_mhc"
        return {"n_streams": fields["mhc_num_streams"], "liger": liger,
                "pre_eps": float(hc.get("liger_pre_eps", 0.0)) if liger else 0.0}

    def tensors_from_olmo(self, source: dict, n_layers: int, n_streams: int, liger: bool,
                          pre_eps: float = 0.0) -> dict:
        out = {}
        for i in range(n_layers):
            for side, dst in (("attention", "attn"), ("feed_forward", "mlp")):
                p, q = f"blocks.{i}.{side}_hyper_connection.", f"model.layers.{i}.{dst}_residual."
                out.update(_liger_connector(source, p, q, n_streams, pre_eps) if liger
                           else _native_connector(source, p, q, n_streams))
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


def _liger_connector(source: dict, p: str, q: str, n: int, pre_eps: float) -> dict:
    """One Liger connector: Φ transposed (fp32), bias α ⊙ b (+ pre_eps on the pre part), the gains."""
    import torch

    phi, b = source.pop(p + "phi"), source.pop(p + "b").float()
    a = {g: source.pop(p + f"alpha_{g}").float() for g in ("pre", "post", "res")}
    out = {q + "phi": phi.t().float().contiguous(),
           q + "bias": torch.cat([a["pre"] * b[:n] + pre_eps, a["post"] * b[n:2 * n], a["res"] * b[2 * n:]])}
    out.update({q + f"alpha_{g}": a[g] for g in ("pre", "post", "res")})
    return out


def _native_connector(source: dict, p: str, q: str, n: int) -> dict:
    """One native connector: the three projections stacked (res columns transposed), the biases, the gates."""
    import torch

    perm = torch.arange(n * n).reshape(n, n).t().reshape(-1)  # res index t*n+s <- s*n+t
    res_proj = source.pop(p + "residual_dynamic_proj")[:, perm]
    out = {q + "phi": torch.cat([source.pop(p + "pre_dynamic_proj"), source.pop(p + "post_dynamic_proj"), res_proj],
                                dim=1).t().contiguous(),
           q + "bias": torch.cat([source.pop(p + "pre_bias"), source.pop(p + "post_bias"),
                                  source.pop(p + "residual_bias").t().reshape(-1)])}
    for g, src in (("pre", "pre_gate"), ("post", "post_gate"), ("res", "residual_gate")):
        out[q + f"alpha_{g}"] = source.pop(p + src)
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
    """Full AttnRes: the depth queries and key gains; the ablations are refused.

    The fork's depth mixes (``fused_attnres`` in ``kernels/attnres.py``) normalise keys and outputs with the eps of
    the ``attn_res_norm`` / ``mlp_res_norm`` / ``res_norm`` modules, RMSNorms built without an eps (OLMo-core's
    default 1e-5), and borrow the block's ``attention_norm`` / ``feed_forward_norm`` gains and the LM head's norm
    gain (whose own eps is then unused); only block 0's attention norm (on the raw embedding) runs as a module, with
    the model's eps. ``attnres_mix_eps`` reproduces that placement."""

    key_map = ATTNRES_KEYS
    head_eps_must_match = False  # the LM head's norm runs inside the final mix, with the mix eps

    @staticmethod
    def refine(arch: str, block: dict, name_settings: dict) -> str:
        """Full (block size 1) or Block AttnRes, for the AttnRes architectures and any block with
        ``attnres_block_size``."""
        if arch in ("attnres", "block_attnres") or block.get("attnres_block_size") is not None:
            size = block.get("attnres_block_size") or 1
            if name_settings.get("arch") == "block_attnres" and size == 1 and "attnres_block_size" not in block:
                raise ConversionError("attnres_block_size: a Block AttnRes checkpoint must record its block size (the "
                                      "study passed it on the command line): add model.block.attnres_block_size=N "
                                      "to its config.json, or pass --config with a config.json that has it")
            return "attnres" if size == 1 else "block_attnres"
        return arch

    def settings(self, model_cfg: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 notes: list[str]) -> str | None:
        block = block_of(model_cfg)
        for key in ("attnres_use_bias", "attnres_learn_logit_scale", "attnres_topk_fraction"):
            if block.get(key):
                problems.append(f"block.{key}={block[key]!r} (AttnRes ablation depthbench does not implement)")
        if fields.get("norm_type") != "rmsnorm":
            problems.append("a LayerNorm block norm with AttnRes (the fork's depth mixes always apply an RMSNorm)")
        fields["attnres_mix_eps"] = OLMO_DEFAULT_NORM_EPS
        return None


class BlockAttnRes(AttnRes):
    """Block AttnRes: Full AttnRes's format, and ``attnres_block_size``."""

    def settings(self, model_cfg: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 notes: list[str]) -> str | None:
        fields["attnres_block_size"] = block_of(model_cfg).get("attnres_block_size")
        return super().settings(model_cfg, state, fields, problems, notes)


MODA_KEYS: KeyMap = (
    ("blocks.{i}.feed_forward.kv_proj.weight", "model.layers.{i}.mlp_residual.kv_proj.weight", ""),
)
# MoDA wraps the attention and the feed-forward:
# blocks.{i}.attention.attention.w_q, blocks.{i}.feed_forward.feed_forward.w1
MODA_WRAPPED = (("blocks.{i}.attention.attention.", "blocks.{i}.attention."),
                ("blocks.{i}.feed_forward.feed_forward.", "blocks.{i}.feed_forward."))


class MoDA(Translator):
    """MoDA: the FFN's depth key/value projection, the wrapped sublayers, ``moda`` settings, the post-norm block.

    The study's entry script (``examples/moda_common.py``) overrides the last block with ``moda_skip_ffn_kv=True``
    (``model.block_overrides``): its ``kv_proj`` would write a slot nothing reads. A checkpoint without that
    override has a last-block ``kv_proj`` that the fork's forward never uses (``MoDAFeedForwardDepthCache`` skips
    the last slot); it is dropped, and the card says so."""

    key_map = MODA_KEYS

    def settings(self, model_cfg: dict, state: dict, fields: dict[str, Any], problems: list[str],
                 notes: list[str]) -> str | None:
        block = block_of(model_cfg)
        moda = block.get("moda") or {}
        fields["moda_post_norm"] = block.get("name") == "post_norm_moda"
        if moda.get("extra_attn_kv_proj"):
            problems.append("moda.extra_attn_kv_proj=true")
        if moda.get("extra_ffn_kv_proj") is False:
            problems.append("moda.extra_ffn_kv_proj=false (depthbench's MoDA always has the FFN depth key/value)")
        if moda.get("cache_post_norm_k") is False:
            problems.append("moda.cache_post_norm_k=false")
        if moda.get("attention_scale") is not None:
            problems.append(f"moda.attention_scale={moda['attention_scale']} (depthbench uses 1/sqrt(head_dim))")
        last = f"blocks.{(fields['num_hidden_layers'] or 1) - 1}."
        if any(k.startswith(last) and k.endswith("kv_proj.weight") for k in state):
            notes.append(f"{last}feed_forward.kv_proj is not converted: the fork's forward never reads the last "
                         "block's depth slot")
        return None

    def block_overrides_problem(self, model_cfg: dict) -> str | None:
        overrides = model_cfg.get("block_overrides") or {}
        last = str(model_cfg.get("n_layers", -1) - 1)
        base = {k: v for k, v in block_of(model_cfg).items() if k != "moda_skip_ffn_kv"}
        for key, override in overrides.items():
            same = isinstance(override, dict) and {k: v for k, v in override.items() if k != "moda_skip_ffn_kv"} == base
            if str(key) != last or not same:
                return f"model.block_overrides[{key}] (only the last block's moda_skip_ffn_kv is representable)"
        return None

    def rename_from_olmo(self, source: dict, n_layers: int) -> dict:
        renamed = {}
        for key, value in source.items():
            for i in range(n_layers):
                for wrapped, plain in MODA_WRAPPED:
                    if key.startswith(wrapped.format(i=i)):
                        key = plain.format(i=i) + key[len(wrapped.format(i=i)):]
            renamed[key] = value
        renamed.pop(f"blocks.{n_layers - 1}.feed_forward.kv_proj.weight", None)  # never read (class docstring)
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
