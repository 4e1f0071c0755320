"""Attention Residuals: Full AttnRes (``attnres``) and Block AttnRes (``block_attnres``).

Ships to the Hugging Face Hub as remote code (imports only torch, transformers and sibling files).

Instead of adding every sublayer output into one residual stream, each sublayer reads a softmax-weighted mixture
*over depth* of the token embedding and of earlier sublayer outputs (Kimi Team, "Attention Residuals",
arXiv 2603.15031). Block AttnRes groups the sources into blocks of ``S`` sublayers; Full AttnRes is the special
case ``S = 1``, and both share one implementation here (``S = 1`` gives the same computation, bit for bit).

The stream between sublayers is an :class:`AttnResStream`: the *bank* of committed sources (the embedding, then one
entry per completed block: the sum of that block's branch outputs) and the running *partial* sum of the current
block. Per-source fp32 inverse RMS values (the key normalisation, ``[B, T]`` each) are computed once per source and
carried along, so keys are never re-normalised and never materialised.

Memory vs time. The depth mix never stacks the sources: a stacked ``[S, B, T, d]`` copy would be saved by autograd at
every sublayer (O(L^2) activations for Full AttnRes). The logits are per-source matrix-vector products, the
softmax runs once over the stacked ``[S, B, T]`` logits, and the weighted sum is a chain of fused multiply-adds; all
that autograd keeps is the sources themselves (alive anyway) plus ``[S, B, T]`` fp32 scalars per sublayer. The
training and decoding implementations of the mix are in ``attnres_depth_mix.py``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from .attnres_depth_mix import STACKED_MIX_MAX_TOKENS, DepthMix, stacked_depth_mix
from .configuration_depthbench import DepthBenchConfig
from .depthbench_checkpointing import stream_checkpointing  # noqa: F401  (a direct import: see hf_compat.py)
from .fast_path import derived_weights, inference_fast_path
from .hf_compat import hf_init
from .modeling_depthbench import (
    Branch,
    DecoderLayer,
    DepthBenchForCausalLM,
    DepthBenchForQuestionAnswering,
    DepthBenchForSequenceClassification,
    DepthBenchForTokenClassification,
    DepthBenchModel,
    Norm,
    Residual,
    Wiring,
)
from .norms import make_norm  # noqa: F401  (a direct import: see hf_compat.py)
from .numerics import as_dtype, fast_inv_rms, inv_rms, upcast


# ================================================================================================ configs
class AttnResConfig(DepthBenchConfig):
    r"""Full Attention Residuals (Kimi Team, "Attention Residuals", arXiv 2603.15031; DepthBench's "Full AttnRes").

    Every sublayer (attention and MLP count separately, j = 0 .. 2L-1) reads, instead of a residual stream, a
    softmax mixture over depth of the token embedding and of *every* earlier sublayer output. The mixing weights come
    from a learned, input-independent pseudo-query per sublayer against RMS-normalised keys (keys = values), and
    the sublayer's own pre-norm is applied to the mixture. The LM head reads a final mixture over all sources::

        v_0 = e (embedding),  v_{i+1} = y_i = F_i(N_i(h_i))          (sublayer outputs, not residual states)
        a_{i->j} = softmax_i( <w_j, g_j * v_i / RMS(v_i)> )           (fp32, over the depth axis, no 1/sqrt(d))
        h_j = sum_{i<=j} a_{i->j} v_i
        logits = W_out N_final( sum_{i<=2L} a_{i->final} v_i )        (own final query and key gain)

    The pseudo-queries ``w`` start at zero (uniform averaging: with zero queries the logits equal Pre-LN's, because
    each mixture is the Pre-LN residual divided by the number of sources and the norm removes the factor), key gains
    ``g`` at one. Parameters added: ``query`` and ``key_gain`` (d each) on every sublayer but the first (block 0's
    attention has a single source, so its weight is always 1) plus the final pair: ``4 d L`` in all.
    Paper: https://arxiv.org/abs/2603.15031

    Where the DepthBench reference code and this port differ: the reference fuses an output RMSNorm into the mix
    that borrows the block's pre-norm gain; here the mix goes through the sublayer's own norm (``input_layernorm`` /
    ``post_attention_layernorm``, and ``model.norm`` for the final mix), the same function, which keeps Llama's
    parameter names. The reference's key norms, fused output norms and final mix use OLMo-core's RMSNorm default
    eps 1e-5 while its first attention norm (on the raw embedding) uses the model's eps: ``attnres_mix_eps=1e-5``
    reproduces that placement exactly (``depthbench convert`` sets it); the default (``None``) uses
    ``rms_norm_eps`` everywhere. Queries and key gains get no weight decay (the reference decays them, pulling the
    mixing towards uniform). The optional reference ablations (per-source bias, learnable logit scale, top-k) are
    not implemented.

    Args:
        attnres_mix_eps: Epsilon of every norm that reads a depth mixture: the key norms, the sublayer norms of
            every sublayer but the first (block 0's attention reads the raw embedding and keeps ``rms_norm_eps``)
            and the final norm. ``None`` (default) means ``rms_norm_eps``.
        **kwargs: Backbone fields of :class:`DepthBenchConfig`.
    """

    model_type = "depthbench_attnres"
    upcycle_start = "bounded"
    upcycle_knob = "attnres_mix_eps"
    upcycle_reason = ("with zero queries each mix is the Pre-LN stream over its n sources, so every norm's output is "
                      "Pre-LN's times sqrt((m + eps) / (m + n^2 eps')) exactly (m: the token's mean square); the "
                      "bound is the source's deviation with those factors applied, plus 1e-5 rounding")

    def upcycle_source_counts(self) -> list[int]:
        """Sources each mixing norm reads (sublayers 1 .. 2L-1, then the final mix) under the bank/partial recursion
        of :class:`AttnResResidual`: the committed blocks plus a non-empty partial."""
        size, counts = self.attnres_sublayers_per_block, []
        for j in range(1, self.num_sublayers + 1):
            counts.append(1 + j // size + (1 if j % size else 0))
        return counts

    def upcycle_norm_factor(self, index: int, mean_square):
        """With zero queries the mix read by norm ``index`` is the Pre-LN stream x over its n sources (every source
        weighs exactly 1/n), so the norm computes g x / sqrt(m + n^2 eps') where Pre-LN computes g x / sqrt(m + eps)
        (m: the token's mean square of x; eps': the mix eps): Pre-LN's output times sqrt((m + eps) / (m + n^2 eps')),
        exactly. Block 0's attention norm reads the raw embedding with Pre-LN's eps: unchanged (``None``)."""
        if index == 0:
            return None
        n = self.upcycle_source_counts()[index - 1]
        eps, mix_eps = float(self.rms_norm_eps), self.resolved_mix_eps
        return ((mean_square + eps) / (mean_square + n * n * mix_eps)).sqrt()

    def upcycle_bound(self, norm_input_mean_square: list[float], rescaled_deviation: float | None = None) -> float:
        """The deviation of the source run with every norm rescaled by :meth:`upcycle_norm_factor` (the start's
        function, computed by transformers' own modules) plus 1e-5, the fp32 rounding an exact start may show (the
        two compute the same function in a different order: the mix sums the sources with weights 1/n). A rigorous
        statement given that identity: |dev - rescaled| <= |logits - rescaled logits| / max |source logits|,
        which is rounding only. The knob: a smaller ``attnres_mix_eps`` takes n^2 eps' from far above Pre-LN's eps
        (n up to 2L + 1) to below it, so every factor moves towards 1 and the bound with it."""
        if rescaled_deviation is None:
            raise ValueError("the AttnRes bound needs the deviation of the source run with the rescaled norms")
        return 1e-5 + float(rescaled_deviation)

    def __init__(self, attnres_mix_eps: float | None = None, **kwargs):
        self.attnres_mix_eps = attnres_mix_eps
        super().__init__(**kwargs)

    @property
    def resolved_mix_eps(self) -> float:
        """The eps of the norms that read a depth mixture (``attnres_mix_eps`` or ``rms_norm_eps``)."""
        return float(self.attnres_mix_eps) if self.attnres_mix_eps is not None else float(self.rms_norm_eps)

    def validate(self) -> None:
        super().validate()
        eps = self.attnres_mix_eps
        ok = eps is None or (isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps > 0)
        self._check(ok, "attnres_mix_eps", eps, "None (rms_norm_eps) or a positive number")

    @property
    def attnres_sublayers_per_block(self) -> int:
        """Sublayers per source block S (Full AttnRes: every sublayer output is its own source)."""
        return 1

    def num_extra_parameters(self) -> int:
        # query + key gain (2d) on sublayers 1 .. 2L-1, plus the final mixer (2d): 2d * 2L.
        return 4 * self.hidden_size * self.num_hidden_layers


class BlockAttnResConfig(AttnResConfig):
    r"""Block Attention Residuals (Kimi Team, "Attention Residuals", arXiv 2603.15031; DepthBench's "Block AttnRes").

    Identical to Full AttnRes except that the depth sources are grouped into blocks of ``S`` consecutive sublayers:
    a completed block is represented by the *sum* of its branch outputs, and the current block's partial sum is
    always the newest source. With ``b_0 = e``, ``b_n = sum_{j in block n} y_j`` and ``b_n^i`` the sum of the first
    ``i`` outputs of block n, the i-th sublayer of block n reads::

        h = sum_k a_k s_k  over  s = [b_0, ..., b_{n-1}, b_n^i]      (b_n^i left out when empty, i.e. i = 0)
        a = softmax_k( <w, g * s_k / RMS(s_k)> ),  then  y = F(N(h))

    and the final mixture reads all completed blocks plus the last partial. ``S = 1`` is Full AttnRes (bit for bit);
    groups need not align with transformer blocks (any ``1 <= S <= 2L``; the last group may be shorter). Same
    parameters as Full AttnRes (``4 d L``). Paper: https://arxiv.org/abs/2603.15031

    Args:
        attnres_block_size: Sublayers per block S (attention and MLP count separately). ``None`` (default) resolves
            it from ``attnres_num_blocks`` as ``2 * ceil(L / attnres_num_blocks)``: whole transformer blocks, at most
            ``attnres_num_blocks`` groups, and always valid (2 <= S <= 2L) for any depth. The DepthBench reference
            passes S on the command line and does not record the paper's value; the AttnRes README reports that
            "~8 blocks" recover most of Full AttnRes's gains, hence the default target of 8.
        attnres_num_blocks: Target number of blocks used only when ``attnres_block_size`` is ``None``.
    """

    model_type = "depthbench_block_attnres"

    def __init__(self, attnres_block_size: int | None = None, attnres_num_blocks: int = 8, **kwargs):
        self.attnres_block_size = attnres_block_size
        self.attnres_num_blocks = attnres_num_blocks
        super().__init__(**kwargs)

    @property
    def attnres_sublayers_per_block(self) -> int:
        """Resolved block size S in sublayers (``attnres_block_size`` or ``2 * ceil(L / attnres_num_blocks)``)."""
        if self.attnres_block_size is not None:
            return self.attnres_block_size
        return min(2 * math.ceil(self.num_hidden_layers / self.attnres_num_blocks), self.num_sublayers)

    def validate(self) -> None:
        super().validate()
        self._check_positive_int("attnres_num_blocks")
        size = self.attnres_block_size
        ok = size is None or (isinstance(size, int) and not isinstance(size, bool) and 1 <= size <= self.num_sublayers)
        self._check(ok, "attnres_block_size", size,
                    f"None or an integer in [1, {self.num_sublayers}] (sublayers; 2 * num_hidden_layers = "
                    f"{self.num_sublayers})")


# ================================================================================================ depth mixing
class AttnResStream(NamedTuple):
    """What flows between sublayers of an AttnRes model.

    Attributes:
        bank: Committed sources, oldest first: the embedding, then one entry per completed block (the sum of its
            branch outputs). Full AttnRes commits every sublayer output.
        bank_inv_rms: fp32 ``1 / RMS`` of each bank entry per token (``[B, T]``), the key normalisation.
        partial: Sum of the current block's branch outputs so far, ``None`` while the block is empty.
        next_index: Global index of the next sublayer to run (``2 * l`` in front of block l, ``2 L`` at the end).
        skip_pending: The previous block was skipped (``skip_block``): the next boundary mix (or the final mix)
            returns the newest source instead of mixing (the "next-output" rule).
    """

    bank: tuple[torch.Tensor, ...]
    bank_inv_rms: tuple[torch.Tensor, ...]
    partial: torch.Tensor | None
    next_index: int
    skip_pending: bool = False

    def newest(self) -> torch.Tensor:
        """The newest source: the partial if non-empty, else the last committed entry."""
        return self.partial if self.partial is not None else self.bank[-1]


def depth_weights(
    query: torch.Tensor, key_gain: torch.Tensor, sources: list[torch.Tensor], inv_rms_values: list[torch.Tensor]
) -> torch.Tensor:
    """Softmax-over-depth weights ``[S, B, T]`` (at least fp32) of ``S`` sources ``[B, T, d]``.

    ``a_i = softmax_i( <w, g * v_i> / RMS(v_i) )``: the key ``g * v_i / RMS(v_i)`` is never materialised; each logit
    is one matrix-vector product with ``u = w * g`` scaled by the cached per-token inverse RMS. The dot products
    run in the sources' dtype (fp32 accumulation inside the matmul); scaling and softmax run in at least fp32.
    """
    u = (upcast(query) * upcast(key_gain)).to(sources[0].dtype)
    logits = upcast(torch.stack([v @ u for v in sources])) * torch.stack(inv_rms_values)
    return torch.softmax(logits, dim=0)


def depth_mix(
    query: torch.Tensor | None,
    key_gain: torch.Tensor | None,
    sources: list[torch.Tensor],
    inv_rms_values: list[torch.Tensor],
    u: torch.Tensor | None = None,
) -> torch.Tensor:
    """``sum_i a_i v_i`` over depth (weights from :func:`depth_weights`), accumulated in fp32, cast back.

    A single source is returned as is (its weight is exactly 1). Sources are not stacked, so autograd saves only
    the sources themselves and the ``[S, B, T]`` weights. ``u`` optionally passes ``query * key_gain`` already
    folded (in the sources' dtype), as the no-autograd fast path caches it (:meth:`_MixerMixin._mix_constants`).
    """
    if len(sources) == 1:
        return sources[0]
    if u is None:
        u = as_dtype(upcast(query) * upcast(key_gain), sources[0].dtype)
    if not torch.is_grad_enabled() and sources[0].shape[:-1].numel() <= STACKED_MIX_MAX_TOKENS:
        return stacked_depth_mix(query, key_gain, sources, inv_rms_values, u)
    return DepthMix.apply(u, len(sources), *inv_rms_values, *sources)


# ================================================================================================ residual wiring
class _MixerMixin:
    """What the depth mixers (each sublayer's residual and the final mixer on the wiring) share: the key norm of a
    source and the mix itself, each with a no-autograd fast path (:func:`inference_fast_path`: ``generate()``,
    evaluation) that computes the same function in fewer aten calls, reading ``u = query * key_gain`` and the
    ``eps`` constant from the :func:`derived_weights` cache instead of rebuilding them at every call."""

    def _mix_constants(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(u = query * key_gain in dtype, eps as a 0-dim fp32 tensor)`` for the fast path, cached."""

        def build():
            u = as_dtype(upcast(self.query) * upcast(self.key_gain), dtype)
            return u, torch.full((), self.eps, dtype=torch.float32, device=u.device)

        return derived_weights(self, f"mix:{dtype}", build, self.query, self.key_gain)

    def source_inv_rms(self, source: torch.Tensor) -> torch.Tensor:
        """:func:`inv_rms` of a new source (computed once per source, then carried in the stream)."""
        if self.query is not None and inference_fast_path(self):
            return fast_inv_rms(source, self._mix_constants(source.dtype)[1])
        return inv_rms(source, self.eps)

    def mix(self, sources: list[torch.Tensor], inv: list[torch.Tensor]) -> torch.Tensor:
        """:func:`depth_mix` with this module's query and key gain."""
        if len(sources) > 1 and inference_fast_path(self):
            return depth_mix(self.query, self.key_gain, sources, inv, u=self._mix_constants(sources[0].dtype)[0])
        return depth_mix(self.query, self.key_gain, sources, inv)


class AttnResResidual(_MixerMixin, Residual):
    """Identical to Pre-LN except that the sublayer reads a softmax-over-depth mixture of the embedding and earlier
    (block sums of) sublayer outputs instead of a residual stream, and its output is added to the current block's
    partial sum instead of to a stream.

    Bank/partial recursion (as in the DepthBench reference code) at sublayer ``j`` with block size ``S``: if
    ``j % S == 0`` (a boundary) and the partial is non-empty, commit it to the bank; mix ``bank + [partial]``; apply
    the sublayer's norm and branch; add the output to the partial. Owns ``query`` (zero-init) and ``key_gain``
    (one-init), except at ``j = 0`` whose only source is the embedding.
    """

    no_decay = ("query", "key_gain")

    def __init__(self, config: AttnResConfig, index: int):
        super().__init__(config, index)
        self.block_size = config.attnres_sublayers_per_block
        self.eps = config.resolved_mix_eps
        if index > 0:
            self.query = nn.Parameter(torch.zeros(config.hidden_size))
            self.key_gain = nn.Parameter(torch.ones(config.hidden_size))
        else:  # one source (the embedding): its weight is 1 whatever the parameters
            self.register_parameter("query", None)
            self.register_parameter("key_gain", None)

    @property
    def is_boundary(self) -> bool:
        """This sublayer starts a new block (the partial is committed before mixing)."""
        return self.index % self.block_size == 0

    def read(self, stream: AttnResStream) -> tuple[torch.Tensor, AttnResStream]:
        """The raw (pre-norm) mixture this sublayer consumes, and the stream after the boundary commit."""
        bank, bank_inv_rms, partial = stream.bank, stream.bank_inv_rms, stream.partial
        if self.is_boundary and partial is not None:
            bank, bank_inv_rms, partial = bank + (partial,), bank_inv_rms + (self.source_inv_rms(partial),), None
        stream = stream._replace(bank=bank, bank_inv_rms=bank_inv_rms, partial=partial)
        if stream.skip_pending and self.is_attention and self.is_boundary:
            return stream.newest(), stream  # "next-output" rule after a skipped block
        sources, inv = list(bank), list(bank_inv_rms)
        if partial is not None:
            sources.append(partial)
            inv.append(self.source_inv_rms(partial))
        return self.mix(sources, inv), stream

    def forward(self, stream: AttnResStream, norm: Norm | None = None, branch: Branch | None = None):
        """Run the sublayer and return the updated stream; without ``norm``/``branch``, return only the raw mix
        this sublayer would consume (:meth:`read` through ``nn.Module.__call__``, so the analysis readouts get
        the same module hooks: see ``Wiring.forward``)."""
        mixed, stream = self.read(stream)
        if branch is None:
            return mixed
        out = branch(norm(mixed))
        partial = out if stream.partial is None else stream.partial + out
        return stream._replace(partial=partial, next_index=self.index + 1, skip_pending=False)

    def reset_parameters(self, config: DepthBenchConfig) -> None:
        if self.query is not None:
            hf_init.zeros_(self.query)
            hf_init.ones_(self.key_gain)

    def extra_repr(self) -> str:
        return f"index={self.index}, block_size={self.block_size}"


class AttnResWiring(_MixerMixin, Wiring):
    """Model-level AttnRes wiring: the embedding enters the bank, the final mixer (``query``, ``key_gain``, as
    ``model.wiring.*``) feeds ``model.norm``, and the analysis hooks read the raw depth mixes (the state each
    consumer actually reads), not per-block partial sums.

    * ``readout`` (``output_hidden_states``): in front of block l >= 1 the raw mix block l's attention consumes; in
      front of block 0 the embedding.
    * ``depth_state``: at every true boundary (block l >= 1 whose attention starts a source block, and after the last
      block) the raw mix consumed there (the final mix at the end); elsewhere the plain block output (the partial).
    * ``skip_block(l)``: the block adds nothing to the bank or partial; the next boundary mix (or the final mix)
      returns the newest source.
    * ``swap_blocks(i, j)``: everything of the two blocks except their own attention-side input mixer is exchanged,
      and so are the mixers producing their right boundaries (block l+1's attention mixer, or the final mixer).
    """

    residual_class = AttnResResidual
    family = "attnres"
    no_decay = ("query", "key_gain")

    def __init__(self, config: AttnResConfig):
        super().__init__(config)
        self.eps = config.resolved_mix_eps
        self.num_sublayers = config.num_sublayers
        self.query = nn.Parameter(torch.zeros(config.hidden_size))
        self.key_gain = nn.Parameter(torch.ones(config.hidden_size))
        # Block l's attention-side residual, by l (plain references, not submodules: the layers own them).
        self.__dict__["_consumers"] = {}

    def make_residual(self, config: DepthBenchConfig, index: int) -> nn.Module:
        residual = super().make_residual(config, index)
        if residual.is_attention:
            self._consumers[residual.layer_idx] = residual
        return residual

    def reset_parameters(self, config: DepthBenchConfig) -> None:
        hf_init.zeros_(self.query)
        hf_init.ones_(self.key_gain)

    # -------------------------------------------------------------------------------------------- stream hooks
    def enter(self, embeddings: torch.Tensor) -> AttnResStream:
        # plain inv_rms: enter() is called directly, not through the module (no offload hook loads parameters)
        return AttnResStream((embeddings,), (inv_rms(embeddings, self.eps),), None, 0)

    def final_mix(self, stream: AttnResStream) -> torch.Tensor:
        """The raw (pre-norm) final mixture over every source (the newest source after a skipped last block)."""
        if stream.skip_pending:
            return stream.newest()
        sources, inv = list(stream.bank), list(stream.bank_inv_rms)
        if stream.partial is not None:
            sources.append(stream.partial)
            inv.append(self.source_inv_rms(stream.partial))
        return self.mix(sources, inv)

    def forward(self, stream: AttnResStream, final_norm: Norm | None = None) -> torch.Tensor:
        """:meth:`exit` (or, without ``final_norm``, the raw :meth:`final_mix`) through ``nn.Module.__call__``
        (readouts too, so module hooks apply: see ``Wiring.forward``)."""
        return self.final_mix(stream) if final_norm is None else self.exit(stream, final_norm)

    def exit(self, stream: AttnResStream, final_norm: Norm) -> torch.Tensor:
        return final_norm(self.final_mix(stream))

    def readout(self, stream: AttnResStream) -> torch.Tensor:
        if stream.next_index >= self.num_sublayers:
            return self(stream)
        return self._consumers[stream.next_index // 2](stream)

    def lens_hidden(self, stream: AttnResStream, final_norm: nn.Module) -> torch.Tensor:
        """The next consumer's raw mix through the final norm (the final mix after the last block: the output)."""
        return final_norm(self.readout(stream))

    def mixing_weights(self, consumer: nn.Module, stream: AttnResStream) -> torch.Tensor:
        """Depth-mixing weights ``[S, B, T]`` (fp32, sources oldest first) that ``consumer`` applies to ``stream``:
        a sublayer's residual module (the stream as it enters that sublayer) or the wiring itself (the final mix).
        For analysis (the study's depth-mixing figures); the forward pass never calls it."""
        bank, bank_inv, partial = stream.bank, stream.bank_inv_rms, stream.partial
        if consumer is not self and consumer.is_boundary and partial is not None:
            bank, bank_inv, partial = bank + (partial,), bank_inv + (inv_rms(partial, self.eps),), None
        sources, inv = list(bank), list(bank_inv)
        if partial is not None:
            sources.append(partial)
            inv.append(inv_rms(partial, self.eps))
        if len(sources) == 1:
            return torch.ones(1, *sources[0].shape[:2], device=sources[0].device)
        return depth_weights(consumer.query, consumer.key_gain, sources, inv)

    def depth_state(self, stream: AttnResStream, next_layer: DecoderLayer | None) -> torch.Tensor:
        if next_layer is None:
            return self(stream)
        consumer = next_layer.attn_residual
        if next_layer.layer_idx >= 1 and consumer.is_boundary:
            return consumer(stream)
        return stream.newest()  # the embedding in front of block 0, else the block's partial

    def skip_layer(self, layer: DecoderLayer, stream: AttnResStream) -> AttnResStream:
        return stream._replace(next_index=stream.next_index + 2, skip_pending=True)

    def swap_pairs(self, model: DepthBenchModel, i: int, j: int) -> list[tuple[nn.Module, nn.Module]]:
        layer_i, layer_j = model.layers[i], model.layers[j]
        pairs = [
            (a, b)
            for (name, a), (_, b) in zip(layer_i.named_children(), layer_j.named_children())
            if name != "attn_residual"
        ]
        return pairs + [(self._right_boundary_mixer(model, i), self._right_boundary_mixer(model, j))]

    def _right_boundary_mixer(self, model: DepthBenchModel, index: int) -> nn.Module:
        """The module whose ``query``/``key_gain`` mix block ``index``'s output for the next consumer."""
        return model.layers[index + 1].attn_residual if index + 1 < len(model.layers) else self


# ================================================================================================ HF models
class _MixNormEps:
    """Decoder mixin: every norm that reads a depth mixture uses ``attnres_mix_eps`` (see :class:`AttnResConfig`):
    the sublayer norms of all sublayers but block 0's attention (whose only source is the raw embedding) and the
    final norm. The norms stay the backbone's own modules (Llama's names); only their eps changes."""

    def __init__(self, config: AttnResConfig):
        super().__init__(config)
        eps = config.resolved_mix_eps
        mixture_norms = [layer.post_attention_layernorm for layer in self.layers]
        mixture_norms += [layer.input_layernorm for layer in self.layers[1:]] + [self.norm]
        for norm in mixture_norms:
            norm.variance_epsilon = eps


class AttnResModel(_MixNormEps, DepthBenchModel):
    config_class = AttnResConfig
    wiring_class = AttnResWiring


class AttnResForCausalLM(DepthBenchForCausalLM):
    config_class = AttnResConfig
    model_class = AttnResModel


class BlockAttnResModel(_MixNormEps, DepthBenchModel):
    config_class = BlockAttnResConfig
    wiring_class = AttnResWiring


class BlockAttnResForCausalLM(DepthBenchForCausalLM):
    config_class = BlockAttnResConfig
    model_class = BlockAttnResModel


class AttnResForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = AttnResConfig
    model_class = AttnResModel


class AttnResForTokenClassification(DepthBenchForTokenClassification):
    config_class = AttnResConfig
    model_class = AttnResModel


class AttnResForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = AttnResConfig
    model_class = AttnResModel


class BlockAttnResForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = BlockAttnResConfig
    model_class = BlockAttnResModel


class BlockAttnResForTokenClassification(DepthBenchForTokenClassification):
    config_class = BlockAttnResConfig
    model_class = BlockAttnResModel


class BlockAttnResForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = BlockAttnResConfig
    model_class = BlockAttnResModel
