"""Hyper-Connections (HC): n residual streams mixed by dynamic, tanh-gated width and depth connections.

Ships to the Hugging Face Hub as remote code (imports only torch, transformers and sibling files). The multi-stream
pieces shared with manifold-constrained HC (``modeling_mhc.py``) live here: :class:`HyperConnectionWiring` (stream
layout, readout, analysis states, the 1/sqrt(n) output init) and :func:`hyper_connection_update` (one sublayer's
width mix + branch + depth connection as a single batched matmul). Their training memory (autograd keeps one
sublayer input stream in k) is ``stream_saver`` in ``hc_stream_memory.py``.

Einsum legend: b batch, t token, s/r streams (n of them), j mixed outputs (n + 1: branch input, then the n carried
streams), d hidden size.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_depthbench import DepthBenchConfig
from .depthbench_checkpointing import stream_checkpointing  # noqa: F401  (a direct import: see hf_compat.py)
from .fast_path import derived_weights, inference_fast_path
from .hc_stream_memory import StreamSaver, stream_saver
from .hf_compat import hf_init
from .modeling_depthbench import (
    Branch,
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
from .numerics import as_dtype, full_precision, inv_rms, upcast

READOUTS = ("mean", "sum", "sum_norm")


class HCConfig(DepthBenchConfig):
    r"""Hyper-Connections (Zhu et al., "Hyper-Connections", ICLR 2025, https://arxiv.org/abs/2409.19606).

    The residual stream is widened into n streams ``H ∈ R^{n×d}`` per token (the embedding is copied into all n).
    Every sublayer (attention or MLP, with its own Pre-LN norm) reads a learned mix of the streams and writes its
    output back into every stream with a learned weight, while the streams are re-mixed among themselves. The
    mixing weights are dynamic: a static part plus a small tanh-gated, input-dependent correction::

        Ĥ_s   = H_s / rms(H_s)                                    (per stream, no gain, eps hc_norm_eps)
        A     = A_static + c_α · tanh(Ĥ W_α)                      (n × (n+1); W_α ∈ R^{d×(n+1)})
        β     = β_static + c_β · tanh(Ĥ w_β)                      (n;         w_β ∈ R^d)
        [u; R] = Aᵀ H                                              (u: branch input, R: n carried streams)
        H'_t  = R_t + β_t · F(N(u))                                (t = 1..n)
        logits = W_out N(mean_s H_s)                               (default readout, see below)

    Init (Pre-LN-equivalent): column 0 of ``A_static`` is one-hot at stream ``k mod n`` (k = global sublayer
    index), columns 1..n are the identity, ``β_static = 1``, ``W = 0``, ``c_α = c_β = 0.01``; attention ``o_proj``
    and MLP ``down_proj`` are initialised with std ``initializer_range / sqrt(n)`` (``hc_scale_output_init``,
    on as in the reference code). At this init all streams stay identical and the model computes Pre-LN exactly
    (its logits equal those of ``pre_ln`` with the same shared weights, for any n). The static ``A_static`` and
    ``β_static`` get no weight decay; the dynamic projections and gates are decayed (as the reference).

    Readout (``hc_readout``): the reference code applies the final RMSNorm to each stream and sums the n normalised
    streams (``"sum_norm"``), which makes the output n times larger than Pre-LN's at init and makes the logit lens
    decode a state the model never outputs. The default here is ``"mean"`` (collapse, then the usual final norm and
    LM head; the HC paper sums, which the final RMSNorm makes identical up to eps): the head then reads exactly what
    ``output_hidden_states`` / the logit lens see, and the model equals Pre-LN at init. ``"sum"`` and ``"sum_norm"``
    are available for reproducing the paper / the reference checkpoints. Other points where the paper and the
    reference code differ follow the reference: the gates read a parameter-free per-stream RMS norm (the paper uses
    a LayerNorm), and the 1/sqrt(n) output init is the reference's addition (switch it off to get the paper's init).

    Args:
        hc_num_streams: Number of residual streams n (paper default 4; n = 1 is Pre-LN with a scalar gate).
        hc_readout: ``"mean"`` (default), ``"sum"`` (collapse then final norm) or ``"sum_norm"`` (reference:
            final norm per stream, then sum).
        hc_scale_output_init: Divide the init std of every ``o_proj`` and ``down_proj`` by sqrt(n) (reference).
        hc_gate_init: Initial value of the scalar gates c_α and c_β (0.01).
        hc_use_tanh: Squash the dynamic terms with tanh (on in the paper and the reference).
        hc_norm_eps: Epsilon of the parameter-free per-stream RMS normalisation (reference 1e-8).
        hc_keep_stream_every: Training memory (no effect on the math or the parameters): autograd keeps the n-stream
            input [B, T, n, d] of every k-th sublayer only and recomputes the others in the backward pass from the
            last kept one (``stream_saver`` in ``hc_stream_memory.py``; gradients bitwise equal). 1 keeps every stream;
            default 8, the measured best (rebuilt streams live only once the logits are freed, early in the backward
            pass; see docs/benchmarks.md).
        hc_readout_evidence: How ``hc_readout`` was chosen when ``depthbench convert`` read a checkpoint whose
            config does not record it (the losses of both readouts on a text sample, or the user's choice);
            ``None`` otherwise. No effect on the math.
    """

    model_type = "depthbench_hc"
    upcycle_start = "exact"
    upcycle_reason = ("the static init (A_m = e_k, A_r = I, B = 1, dynamic parts 0) with the mean readout computes "
                      "Pre-LN on n equal streams")

    def __init__(
        self,
        hc_num_streams: int = 4,
        hc_readout: str = "mean",
        hc_scale_output_init: bool = True,
        hc_gate_init: float = 0.01,
        hc_use_tanh: bool = True,
        hc_norm_eps: float = 1e-8,
        hc_keep_stream_every: int = 8,
        hc_readout_evidence: dict | None = None,
        **kwargs,
    ):
        self.hc_num_streams = hc_num_streams
        self.hc_readout = hc_readout
        self.hc_scale_output_init = hc_scale_output_init
        self.hc_gate_init = hc_gate_init
        self.hc_use_tanh = hc_use_tanh
        self.hc_norm_eps = hc_norm_eps
        self.hc_keep_stream_every = hc_keep_stream_every
        self.hc_readout_evidence = hc_readout_evidence
        super().__init__(**kwargs)

    def validate(self) -> None:
        super().validate()
        self._check_positive_int("hc_num_streams")
        self._check_positive_int("hc_keep_stream_every")
        self._check(self.hc_readout in READOUTS, "hc_readout", self.hc_readout, f"one of {list(READOUTS)}")
        self._check(self.hc_readout_evidence is None or isinstance(self.hc_readout_evidence, dict),
                    "hc_readout_evidence", self.hc_readout_evidence, "None or a dict")
        for field in ("hc_scale_output_init", "hc_use_tanh"):
            self._check(isinstance(getattr(self, field), bool), field, getattr(self, field), "True or False")
        self._check(is_number(self.hc_gate_init), "hc_gate_init", self.hc_gate_init, "a number")
        self._check(is_number(self.hc_norm_eps) and self.hc_norm_eps > 0, "hc_norm_eps", self.hc_norm_eps,
                    "a positive number")

    def num_extra_parameters(self) -> int:
        """Per connector ``n(n+1) + d(n+1) + 1 + n + d + 1`` (A_static, W_α, c_α, β_static, w_β, c_β); two
        connectors per block."""
        n, d = self.hc_num_streams, self.hidden_size
        return self.num_sublayers * (n * (n + 1) + d * (n + 1) + 1 + n + d + 1)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# ================================================================================================ shared HC pieces
def hyper_connection_update(
    stream: torch.Tensor,
    width: torch.Tensor,
    depth: torch.Tensor,
    norm: Norm,
    branch: Branch,
    saver: StreamSaver | None = None,
) -> torch.Tensor:
    """One hyper-connected sublayer: ``[u; R] = width @ H``, ``H'_t = R_t + depth_t · F(N(u))``.

    Args:
        stream: The n streams ``H``, [B, T, n, d].
        width: Width-connection matrix, [..., n+1, n] (row 0 builds the branch input ``u``, rows 1..n the carried
            streams ``R``); any leading dims broadcasting against [B, T] (per-token or static).
        depth: Depth-connection weights, [..., n] (how much of the branch output each stream receives).
        norm: The sublayer's own pre-norm.
        branch: Attention or MLP.
        saver: The sublayer's ``stream_saver`` (None: plain saving), told how the new stream was made.

    Returns:
        The updated streams, [B, T, n, d], in the stream's dtype (``width``/``depth`` are cast to it: the mixing
        coefficients are computed in fp32 by the caller and applied in the model's dtype, like the residual add).
    """
    *lead, n, d = stream.shape
    h = stream.reshape(-1, n, d)  # [N,n,d], N = B*T tokens
    # Per-token maps become [N,n+1,n] by a view (a transposed map stays transposed: bmm reads either layout, so no
    # copy); a static map [n+1,n] is broadcast over the tokens without materialising it.
    w = as_dtype(width, stream.dtype)
    w = w.expand(h.shape[0], n + 1, n) if w.dim() == 2 else w.reshape(-1, n + 1, n)
    # One batched product for all n+1 rows: [N,n+1,d], row 0 = u = Σ_s w[0,s] H_s, rows 1..n = R_t = Σ_s w[1+t,s] H_s
    # (one bmm instead of two on row slices, plus a fused multiply-add for the depth term: faster than
    # bmm + bmm + baddbmm, see docs/benchmarks.md). `split`, not indexing: its backward concatenates the two
    # gradients instead of zero-filling and accumulating two full-size buffers.
    u, carried = torch.bmm(w, h).split_with_sizes([1, n], dim=1)
    # The branch input gets its own storage: the norm saves its input for backward, and a view would keep the whole
    # [N,n+1,d] product alive (n+1 times the memory) although only `carried`'s forward use needs the rest of it.
    out = branch(norm(u.reshape(*lead, d).contiguous()))  # [B,T,d]
    depth = as_dtype(depth, stream.dtype)
    depth = depth.view(1, n, 1) if depth.dim() == 1 else depth.reshape(-1, n, 1)  # [N or 1, n, 1]
    out = as_dtype(out, stream.dtype).view(-1, 1, d)
    new = torch.addcmul(carried, depth, out).view(stream.shape)
    if saver is not None:
        saver.record(new, w, depth, out)
    return new


class HyperConnectionWiring(Wiring):
    """Model-level wiring shared by HC and mHC: the residual state is a tensor of n streams [B, T, n, d].

    * :meth:`enter` copies the embedding into the n streams;
    * :meth:`exit` is the readout (``mean`` / ``sum`` collapse then the final norm, or ``sum_norm``);
    * :meth:`readout` (``output_hidden_states``, logit lens) is the collapse before the final norm: the mean for
      ``mean``, the sum for ``sum`` and ``sum_norm`` (for ``sum_norm`` the head does not read exactly this state);
    * :meth:`depth_state` concatenates a token's n streams into one n·d vector (the depth state the
      analysis metrics compare across blocks);
    * skipped blocks return their streams unchanged, and ``swap_blocks`` exchanges the connector parameters with
      the rest of the block (the base behaviour).

    Subclasses say where their settings live via :meth:`stream_settings`.
    """

    family = "hyper_connections"

    def __init__(self, config: DepthBenchConfig):
        super().__init__(config)
        self.num_streams, self.readout_mode, self.scale_output_init = self.stream_settings(config)

    def stream_settings(self, config: DepthBenchConfig) -> tuple[int, str, bool]:
        """(number of streams, readout mode, divide the o_proj/down_proj init std by sqrt(n))."""
        return config.hc_num_streams, config.hc_readout, config.hc_scale_output_init

    def configure_init(self, model: DepthBenchModel) -> None:
        if self.scale_output_init and self.num_streams > 1:
            std = model.config.initializer_range / math.sqrt(self.num_streams)
            for layer in model.layers:
                layer.self_attn.o_proj.init_std = std
                layer.mlp.down_proj.init_std = std

    def enter(self, embeddings: torch.Tensor) -> torch.Tensor:
        """[B,T,d] -> n identical streams [B,T,n,d] (a real copy: later in-place ops must not alias)."""
        return embeddings.unsqueeze(-2).repeat_interleave(self.num_streams, dim=-2)

    def readout(self, stream: torch.Tensor) -> torch.Tensor:
        return stream.mean(dim=-2) if self.readout_mode == "mean" else stream.sum(dim=-2)

    def entry_readout(self, embeddings: torch.Tensor, stream: torch.Tensor) -> torch.Tensor:
        """The mean of the n identical entering streams is the embedding output: report that tensor itself (the one
        gradients flow through, as Llama's first hidden state). The sum readouts report n times it, computed."""
        return embeddings if self.readout_mode == "mean" else self.readout(stream)

    def exit(self, stream: torch.Tensor, final_norm: Norm) -> torch.Tensor:
        if self.readout_mode == "sum_norm":
            return final_norm(stream).sum(dim=-2)
        return final_norm(self.readout(stream))

    def depth_state(self, stream: torch.Tensor, next_layer=None) -> torch.Tensor:
        return stream.flatten(-2)  # [B,T,n*d]

    def stream_maps(self, residual: Residual, stream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The maps ``residual`` applies to ``stream`` [B,T,n,d], as :func:`hyper_connection_update` takes them:
        width [..., n+1, n] (row 0 reads the branch input, rows 1..n the residual transport) and depth [..., n].
        For analysis (the study's residual-transport figures); subclasses say how their residual computes them."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"num_streams={self.num_streams}, readout={self.readout_mode!r}"


# ================================================================================================ HC
class HCResidual(Residual):
    """Identical to Pre-LN except the stream is n streams [B, T, n, d], mixed by a dynamic hyper-connection::

        A = A_static + c_α tanh(Ĥ W_α),  β = β_static + c_β tanh(Ĥ w_β),  [u; R] = Aᵀ H,  H'_t = R_t + β_t F(N(u))

    with ``Ĥ`` the per-stream RMS-normalised streams (no gain). The gates are computed in fp32 (``Ĥ W`` as
    ``(H W) / rms(H)``, one small GEMM for all n+2 outputs) and applied in the model's dtype. Parameters:
    ``static_alpha`` [n, n+1], ``static_beta`` [n], ``dynamic_alpha_fn`` [n+1, d] (= W_αᵀ, stored in
    ``nn.Linear`` layout, whose weight gradient is the fast GEMM on CPU), ``dynamic_beta_fn`` [d],
    ``dynamic_alpha_scale`` and ``dynamic_beta_scale`` (scalars). Paper: https://arxiv.org/abs/2409.19606.
    """

    no_decay = ("static_alpha", "static_beta")

    def __init__(self, config: HCConfig, index: int):
        super().__init__(config, index)
        n, d = config.hc_num_streams, config.hidden_size
        self.num_streams = n
        self.stream_index = index % n  # s*: the stream that alone feeds the branch at init
        self.use_tanh = config.hc_use_tanh
        self.eps = config.hc_norm_eps
        self.keep_stream_every = config.hc_keep_stream_every
        self.static_alpha = nn.Parameter(torch.zeros(n, n + 1))
        self.static_beta = nn.Parameter(torch.ones(n))
        self.dynamic_alpha_fn = nn.Parameter(torch.zeros(n + 1, d))  # W_αᵀ
        self.dynamic_beta_fn = nn.Parameter(torch.zeros(d))
        self.dynamic_alpha_scale = nn.Parameter(torch.full((), float(config.hc_gate_init)))
        self.dynamic_beta_scale = nn.Parameter(torch.full((), float(config.hc_gate_init)))
        self.reset_parameters(config)

    def reset_parameters(self, config: HCConfig) -> None:
        n = self.num_streams
        static = torch.zeros(n, n + 1, device=self.static_alpha.device)
        static[self.stream_index, 0] = 1.0  # A_m = e_{k mod n}
        static[:, 1:] = torch.eye(n, device=static.device)  # A_r = I
        hf_init.copy_(self.static_alpha, static)
        hf_init.ones_(self.static_beta)
        hf_init.zeros_(self.dynamic_alpha_fn)
        hf_init.zeros_(self.dynamic_beta_fn)
        hf_init.constant_(self.dynamic_alpha_scale, float(config.hc_gate_init))
        hf_init.constant_(self.dynamic_beta_scale, float(config.hc_gate_init))

    def connections(self, stream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The fp32 connection weights of this sublayer for ``stream`` [B,T,n,d]: ``A`` [B,T,n,n+1] (row s = what
        stream s contributes to the branch input and to each carried stream) and ``β`` [B,T,n]."""
        with full_precision(stream):
            return self._connections(upcast(stream))

    def _connections(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Written for few aten calls and little Python (decoding is dispatch-bound, see fast_path.py): one fused
        # multiply-add per map, parameters cast only when their dtype differs.
        params = (self.dynamic_alpha_fn, self.dynamic_beta_fn, self.static_alpha, self.static_beta,
                  self.dynamic_alpha_scale, self.dynamic_beta_scale)
        if params[0].dtype != h.dtype:
            params = tuple(p.to(h.dtype) for p in params)
        w_alpha, w_beta, static_alpha, static_beta, scale_alpha, scale_beta = params
        scale = inv_rms(h, self.eps, keepdim=True)  # 1 / rms per stream: [B,T,n,1]
        dyn = F.linear(h, torch.cat([w_alpha, w_beta.unsqueeze(0)])) * scale  # Ĥ W = (H W) / rms(H): [B,T,n,n+2]
        if self.use_tanh:
            dyn = dyn.tanh()
        alpha_dyn, beta_dyn = dyn.split_with_sizes([self.num_streams + 1, 1], dim=-1)
        return torch.addcmul(static_alpha, scale_alpha, alpha_dyn), torch.addcmul(static_beta, scale_beta,
                                                                                  beta_dyn.squeeze(-1))

    def forward(self, stream: torch.Tensor, norm: Norm, branch: Branch) -> torch.Tensor:
        if inference_fast_path(self):
            return self._inference_forward(stream, norm, branch)
        with stream_saver(stream, self.index, self.keep_stream_every) as saver:
            alpha, beta = self.connections(stream)
            return hyper_connection_update(stream, alpha.transpose(-1, -2), beta, norm, branch, saver)

    # ------------------------------------------------------------------------------------ no-autograd fast path
    def _fast_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """fp32 weights of :meth:`_inference_forward`: the projection ``[W_α | w_β]·sqrt(d)`` [d, n+2] (the sqrt(d)
        of ``1/rms`` folded in), the static maps ``[A_static | β_static]`` [n, n+2], the gates ``[c_α]*(n+1) + [c_β]``
        [n+2] and ``sqrt(d·eps)`` (0-dim)."""
        d = self.dynamic_beta_fn.shape[0]
        proj = torch.cat([upcast(self.dynamic_alpha_fn), upcast(self.dynamic_beta_fn).unsqueeze(0)])
        static = torch.cat([upcast(self.static_alpha), upcast(self.static_beta).unsqueeze(-1)], dim=-1)
        gates = torch.cat([upcast(self.dynamic_alpha_scale).expand(self.num_streams + 1),
                           upcast(self.dynamic_beta_scale).reshape(1)])
        return (proj.t() * math.sqrt(d)).contiguous(), static, gates, proj.new_tensor(math.sqrt(d * self.eps))

    def _inference_forward(self, stream: torch.Tensor, norm: Norm, branch: Branch) -> torch.Tensor:
        """:meth:`forward` without autograd in few aten calls (``fast_path.py``): the gates of all n+1 rows and β
        from one GEMM, ``[A | β] = static + c · tanh((H W) / rms(H))`` in one fused multiply-add, then
        ``[u; R; ·] = [A | β]ᵀ H`` in one batched matmul (its last row is unused) and ``H' = R + β · F(N(u))`` in one
        addcmul. Equal to the differentiable path up to float rounding
        (``tests/modeling/test_fast_path.py``).
        """
        n, d = self.num_streams, stream.shape[-1]
        proj, static, gates, eps = derived_weights(
            self, "inference", self._fast_weights, self.dynamic_alpha_fn, self.dynamic_beta_fn, self.static_alpha,
            self.static_beta, self.dynamic_alpha_scale, self.dynamic_beta_scale)
        with full_precision(stream):
            h = upcast(stream.reshape(-1, d))  # [N·n, d]: every stream of every token
            # Ĥ W = (H W)·sqrt(d) / sqrt(|H_s|² + d·eps), the sqrt(d) folded into W: [N·n, n+2]
            dyn = torch.mm(h, proj).div_(torch.hypot(torch.linalg.vector_norm(h, dim=-1, keepdim=True), eps))
            if self.use_tanh:
                dyn.tanh_()
            coef = as_dtype(torch.addcmul(static, gates, dyn.view(-1, n, n + 2)), stream.dtype)  # [N,n,n+2] = [A | β]
        # 2-D/3-D views and mm/bmm rather than matmul on [B,T,...] (each reshape inside matmul is one more call)
        mixed = torch.bmm(coef.transpose(1, 2), stream.reshape(-1, n, d))  # [N,n+2,d] = [u; R; unused]
        out = branch(norm(mixed[:, 0].view(stream.shape[:-2] + (d,))))  # [B,T,d]
        return torch.addcmul(mixed[:, 1:n + 1], coef[:, :, n + 1:], as_dtype(out, stream.dtype).view(-1, 1, d)
                             ).view(stream.shape)

    def extra_repr(self) -> str:
        return f"index={self.index}, num_streams={self.num_streams}, stream_index={self.stream_index}"


class HCWiring(HyperConnectionWiring):
    residual_class = HCResidual

    def stream_maps(self, residual: HCResidual, stream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        alpha, beta = residual.connections(stream)
        return alpha.transpose(-1, -2), beta


class HCModel(DepthBenchModel):
    config_class = HCConfig
    wiring_class = HCWiring


class HCForCausalLM(DepthBenchForCausalLM):
    config_class = HCConfig
    model_class = HCModel


class HCForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = HCConfig
    model_class = HCModel


class HCForTokenClassification(DepthBenchForTokenClassification):
    config_class = HCConfig
    model_class = HCModel


class HCForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = HCConfig
    model_class = HCModel
