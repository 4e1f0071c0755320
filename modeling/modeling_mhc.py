"""mHC: manifold-constrained Hyper-Connections (stream mixing projected onto doubly stochastic matrices).

Ships to the Hugging Face Hub as remote code (imports only torch, transformers and sibling files). The stream
layout, readout and the batched width/depth update are shared with HC (``modeling_hc.py``); this file adds the
mHC coefficient generator (flattened-stream RMSNorm, one GEMM to n² + 2n logits, sigmoid / 2·sigmoid / Sinkhorn,
the last in ``mhc_sinkhorn.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_depthbench import DepthBenchConfig
from .depthbench_checkpointing import stream_checkpointing  # noqa: F401  (a direct import: see hf_compat.py)
from .fast_path import derived_weights, inference_fast_path
from .hc_stream_memory import stream_saver
from .hf_compat import hf_init
from .mhc_sinkhorn import sinkhorn_inference, sinkhorn_scaled
from .modeling_depthbench import (
    Branch,
    DepthBenchForCausalLM,
    DepthBenchForQuestionAnswering,
    DepthBenchForSequenceClassification,
    DepthBenchForTokenClassification,
    DepthBenchModel,
    Norm,
    Residual,
)
from .modeling_hc import READOUTS, HyperConnectionWiring, hyper_connection_update, is_number
from .norms import make_norm  # noqa: F401  (a direct import: see hf_compat.py)
from .numerics import as_dtype, full_precision, inv_rms, upcast

#: Which normalisation ends each Sinkhorn round (``mhc_sinkhorn_ends_on``).
SINKHORN_ENDS = ("rows", "columns")


class MHCConfig(DepthBenchConfig):
    r"""mHC, manifold-constrained Hyper-Connections (Xie et al., DeepSeek-AI, https://arxiv.org/abs/2512.24880).

    Hyper-Connections with n streams ``H ∈ R^{n×d}`` per token whose stream-mixing matrix is projected onto the
    doubly stochastic matrices (Sinkhorn-Knopp), so the composite map across depth stays non-expansive and
    mean-preserving. The coefficients come from the whole flattened token state through one projection::

        x̂      = vec(H) / rms(vec(H))                             (over all n·d values, no gain, fp32)
        m      = x̂ Φ,    Φ ∈ R^{nd × (n²+2n)}                      (one GEMM, split into pre | post | res)
        H_pre  = σ(α_pre · m_pre + b_pre)                          (n,   in (0, 1))
        H_post = 2 σ(α_post · m_post + b_post)                     (n,   in (0, 2))
        H_res  = Sinkhorn(α_res · m_res + b_res)                   (n×n, 20 iterations, log domain, fp32)
        H'_t   = Σ_s H_res[t, s] H_s + H_post[t] · F(N(Σ_s H_pre[s] H_s))
        logits = W_out N(mean_s H_s)                                (default readout)

    Convention (paper Eq. 3 and 8): ``H_res`` itself (not its transpose) multiplies the stream vector, row t
    holding the weights of output stream t, and Sinkhorn normalises columns then rows, ending with the rows; so
    every output stream is an exact convex combination of the input streams (row sums 1 to fp32 precision) and
    column sums are 1 only approximately. ``mhc_sinkhorn_ends_on="columns"`` runs each round as rows then columns
    instead (the reference's Liger backend: exact column sums, approximate row sums), the same matrix only where
    the iterations have converged. Init is the reference's final "gap-8" init (``mhc_init_gap = 8``):
    Φ = 0, gains α = 0.01, ``b_pre`` = −8 except +8 at stream ``k mod n`` (k = global sublayer index),
    ``b_post`` = 0 (H_post = 1), ``b_res`` = 0 on the diagonal and −8 off it (H_res ≈ 0.999 I); ``mhc_init_gap = 0``
    gives Megatron's all-zero bias init (H_pre = ½, H_res = J/n). Gains and biases get no weight decay (as the
    paper's Liger backend; decaying the 0.01 gates would only pull the maps towards static), Φ is decayed. The
    static ablation (``mhc_dynamic=False``) drops Φ and the gains: the three maps come from the learned logits
    ``b`` alone (n² + 2n parameters per sublayer). It keeps the dynamic variant's σ / 2σ maps rather than the
    reference's softmax pre/post (whose H_post sums to 1 and so shrinks every branch by n), so that the ablation
    changes only the input dependence; the reference's static config also used τ = 0.05 and 10 iterations
    (``mhc_sinkhorn_temperature`` / ``mhc_sinkhorn_iters``), the defaults here are the paper's τ = 1 and 20.

    The reference code has two mHC backends that disagree (in RMS eps, bias placement, readout and weight-decay groups);
    choices here: bias outside the gain (paper Eq. 7, reference native backend), RMS eps 1e-6 (paper backend and
    DeepSeek-V4), ``"mean"`` readout (paper backend; the final RMSNorm makes it equal to the sum, and the head reads
    what ``output_hidden_states`` reports) with ``"sum"`` / ``"sum_norm"`` available, and ``o_proj`` / ``down_proj``
    init std divided by sqrt(n) (``mhc_scale_output_init``: the reference's init for its hyper-connection models,
    which we read as covering mHC too). With Φ = 0 and α = 0 the maps are input-independent and, with zero biases
    and the mean readout, the model's logits equal Pre-LN's with the same shared weights.

    Args:
        mhc_num_streams: Number of residual streams n (4).
        mhc_readout: ``"mean"`` (default), ``"sum"`` or ``"sum_norm"`` (final norm per stream, then sum).
        mhc_dynamic: Input-dependent maps (paper); False = static ablation (logits only).
        mhc_sinkhorn_iters: Sinkhorn-Knopp iterations (20; each is a column then a row normalisation).
        mhc_sinkhorn_temperature: Temperature τ dividing the H_res logits before Sinkhorn (1.0).
        mhc_sinkhorn_ends_on: ``"rows"`` (default: each round normalises columns, then rows) or ``"columns"``
            (rows, then columns: the reference's Liger backend, which ``depthbench convert`` reproduces).
        mhc_gate_init: Initial value of the gains α_pre, α_post, α_res (0.01).
        mhc_init_gap: The bias gap g of the init (8.0; 0 gives all-zero biases).
        mhc_norm_eps: Epsilon of the flattened-stream RMS normalisation (1e-6).
        mhc_scale_output_init: Divide the init std of every ``o_proj`` and ``down_proj`` by sqrt(n).
        mhc_keep_stream_every: Training memory, as ``hc_keep_stream_every`` of HC (``stream_saver`` in
            ``hc_stream_memory.py``; no effect on the math or the parameters). 1 keeps every stream; default 8.
        mhc_readout_evidence: How ``mhc_readout`` was chosen when ``depthbench convert`` read a checkpoint whose
            config does not record it (the losses of both readouts on a text sample, or the user's choice);
            ``None`` otherwise. No effect on the math.
    """

    model_type = "depthbench_mhc"
    upcycle_start = "bounded"
    upcycle_knob = "mhc_init_gap"
    upcycle_reason = ("the n streams start equal and the row-ending Sinkhorn keeps them equal (H_post = 1, mean "
                      "readout); the branch input is c x with c = sigmoid(g) + (n-1) sigmoid(-g), which the norm "
                      "removes up to its eps (a larger mhc_init_gap g tightens it)")

    def upcycle_bound(self, norm_input_mean_square: list[float], rescaled_deviation: float | None = None) -> float:
        """Rounding allowance of the n-stream sums (n x 1e-5) plus, per sublayer, the first-order relative change
        of its normed branch input c x: |sqrt((m + eps) / (m + eps / c^2)) - 1| with m the Pre-LN stream's smallest
        per-token mean square."""
        import math

        n, g, eps = self.mhc_num_streams, float(self.mhc_init_gap), float(self.rms_norm_eps)
        c = 1 / (1 + math.exp(-g)) + (n - 1) / (1 + math.exp(g))
        total = sum(abs(((m + eps) / (m + eps / (c * c))) ** 0.5 - 1.0) for m in norm_input_mean_square[:-1])
        return n * 1e-5 + total

    def __init__(
        self,
        mhc_num_streams: int = 4,
        mhc_readout: str = "mean",
        mhc_dynamic: bool = True,
        mhc_sinkhorn_iters: int = 20,
        mhc_sinkhorn_temperature: float = 1.0,
        mhc_gate_init: float = 0.01,
        mhc_init_gap: float = 8.0,
        mhc_norm_eps: float = 1e-6,
        mhc_scale_output_init: bool = True,
        mhc_keep_stream_every: int = 8,
        mhc_sinkhorn_ends_on: str = "rows",
        mhc_readout_evidence: dict | None = None,
        **kwargs,
    ):
        self.mhc_num_streams = mhc_num_streams
        self.mhc_readout = mhc_readout
        self.mhc_dynamic = mhc_dynamic
        self.mhc_sinkhorn_iters = mhc_sinkhorn_iters
        self.mhc_sinkhorn_temperature = mhc_sinkhorn_temperature
        self.mhc_gate_init = mhc_gate_init
        self.mhc_init_gap = mhc_init_gap
        self.mhc_norm_eps = mhc_norm_eps
        self.mhc_scale_output_init = mhc_scale_output_init
        self.mhc_keep_stream_every = mhc_keep_stream_every
        self.mhc_sinkhorn_ends_on = mhc_sinkhorn_ends_on
        self.mhc_readout_evidence = mhc_readout_evidence
        super().__init__(**kwargs)

    def validate(self) -> None:
        super().validate()
        self._check_positive_int("mhc_num_streams")
        self._check_positive_int("mhc_sinkhorn_iters")
        self._check_positive_int("mhc_keep_stream_every")
        self._check(self.mhc_readout in READOUTS, "mhc_readout", self.mhc_readout, f"one of {list(READOUTS)}")
        self._check(self.mhc_sinkhorn_ends_on in SINKHORN_ENDS, "mhc_sinkhorn_ends_on", self.mhc_sinkhorn_ends_on,
                    f"one of {list(SINKHORN_ENDS)}")
        self._check(self.mhc_readout_evidence is None or isinstance(self.mhc_readout_evidence, dict),
                    "mhc_readout_evidence", self.mhc_readout_evidence, "None or a dict")
        for field in ("mhc_dynamic", "mhc_scale_output_init"):
            self._check(isinstance(getattr(self, field), bool), field, getattr(self, field), "True or False")
        for field in ("mhc_sinkhorn_temperature", "mhc_norm_eps"):
            value = getattr(self, field)
            self._check(is_number(value) and value > 0, field, value, "a positive number")
        for field in ("mhc_gate_init", "mhc_init_gap"):
            self._check(is_number(getattr(self, field)), field, getattr(self, field), "a number")

    def num_extra_parameters(self) -> int:
        """Per sublayer: dynamic ``nd(n²+2n) + (n²+2n) + 3`` (Φ, b, three gains); static ``n²+2n`` (b)."""
        n, d = self.mhc_num_streams, self.hidden_size
        k = n * n + 2 * n
        per_sublayer = n * d * k + k + 3 if self.mhc_dynamic else k
        return self.num_sublayers * per_sublayer


class MHCResidual(Residual):
    """Identical to Pre-LN except the stream is n streams [B, T, n, d], mixed by a manifold-constrained
    hyper-connection::

        H'_t = Σ_s H_res[t, s] H_s + H_post[t] · F(N(Σ_s H_pre[s] H_s))

    ``H_pre = σ(·)``, ``H_post = 2σ(·)``, ``H_res = Sinkhorn(·)`` (rows exact) of ``α · (x̂ Φ) + b``, with ``x̂`` the
    RMS-normalised flattened token state (computed as ``(vec(H) Φ) / rms(vec(H))``: one GEMM, no normalised copy of
    the stream). All coefficient math runs in fp32 whatever the model dtype; the maps are applied in the model's
    dtype. Parameters: ``phi`` [n²+2n, n·d] (= Φᵀ in ``nn.Linear`` layout, whose weight gradient is the fast GEMM
    on CPU; rows: pre | post | res, res row-major), ``bias`` [n²+2n],
    ``alpha_pre``, ``alpha_post``, ``alpha_res`` (scalars); the static variant has only ``bias``.
    Paper: https://arxiv.org/abs/2512.24880.
    """

    no_decay = ("bias", "alpha_pre", "alpha_post", "alpha_res")

    def __init__(self, config: MHCConfig, index: int):
        super().__init__(config, index)
        n, d = config.mhc_num_streams, config.hidden_size
        self.num_streams = n
        self.stream_index = index % n  # s*: the stream that alone feeds the branch at init
        self.dynamic = config.mhc_dynamic
        self.num_iters = config.mhc_sinkhorn_iters
        self.temperature = float(config.mhc_sinkhorn_temperature)
        self.ends_on_columns = config.mhc_sinkhorn_ends_on == "columns"
        self.eps = float(config.mhc_norm_eps)
        self.keep_stream_every = config.mhc_keep_stream_every
        k = n * n + 2 * n
        if self.dynamic:
            self.phi = nn.Parameter(torch.zeros(k, n * d))  # Φᵀ (nn.Linear layout)
            self.alpha_pre = nn.Parameter(torch.full((), float(config.mhc_gate_init)))
            self.alpha_post = nn.Parameter(torch.full((), float(config.mhc_gate_init)))
            self.alpha_res = nn.Parameter(torch.full((), float(config.mhc_gate_init)))
        self.bias = nn.Parameter(torch.zeros(k))
        self.reset_parameters(config)

    def initial_bias(self, gap: float) -> torch.Tensor:
        """The gap-g bias: pre −g except +g at s*, post 0, res 0 on the diagonal and −g off it."""
        n = self.num_streams
        pre = torch.full((n,), -gap)
        pre[self.stream_index] = gap
        res = torch.full((n, n), -gap).fill_diagonal_(0.0)
        return torch.cat([pre, torch.zeros(n), res.flatten()])

    def reset_parameters(self, config: MHCConfig) -> None:
        hf_init.copy_(self.bias, self.initial_bias(float(config.mhc_init_gap)).to(self.bias.device))
        if self.dynamic:
            hf_init.zeros_(self.phi)
            for gain in (self.alpha_pre, self.alpha_post, self.alpha_res):
                hf_init.constant_(gain, float(config.mhc_gate_init))

    def logit_parts(self, stream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The logits ``α · (x̂ Φ) + b`` in fp32, split into pre [..., n], post [..., n] and res [..., n²] (leading
        dims [B,T] for the dynamic variant, none for the static one). Call with autocast off."""
        n = self.num_streams
        sizes = [n, n, n * n]
        bias = upcast(self.bias)
        if not self.dynamic:
            return bias.split_with_sizes(sizes)
        x = upcast(stream.flatten(-2))  # [B,T,n*d]
        m = F.linear(x, upcast(self.phi)).mul(inv_rms(x, self.eps, keepdim=True))  # x̂ Φ = (x Φ) / rms(x): [B,T,n²+2n]
        # b + m · α per part (one fused op each; an fp32 m promotes a lower-precision α and b exactly)
        parts = zip(m.split_with_sizes(sizes, dim=-1), bias.split_with_sizes(sizes),
                    (self.alpha_pre, self.alpha_post, self.alpha_res))
        return tuple(torch.addcmul(b, part, alpha) for part, b, alpha in parts)

    def logits(self, stream: torch.Tensor) -> torch.Tensor:
        """Pre-activation logits ``α · (x̂ Φ) + b`` in fp32: [B,T,n²+2n] (dynamic) or [n²+2n] (static)."""
        with full_precision(stream):
            return torch.cat(self.logit_parts(stream), dim=-1)

    def mappings(self, stream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The fp32 maps ``H_pre`` [..., n], ``H_post`` [..., n] and ``H_res`` [..., n, n] for ``stream``
        [B,T,n,d]; leading dims are [B,T] (dynamic) or none (static)."""
        with full_precision(stream):
            return self._mappings(stream)

    def _mappings(self, stream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = self.num_streams
        z_pre, z_post, z_res = self.logit_parts(stream)
        h_pre = torch.sigmoid(z_pre)
        h_post = torch.sigmoid(z_post).mul(2.0)
        z_res = z_res.unflatten(-1, (n, n))
        if self.temperature != 1.0:
            z_res = z_res / self.temperature
        h_res = self._project_res(z_res, sinkhorn_scaled)
        return h_pre, h_post, h_res

    def _project_res(self, z_res: torch.Tensor, projection) -> torch.Tensor:
        """``projection`` (a row-ending Sinkhorn of ``mhc_sinkhorn.py``) of the logits [..., n, n]; ending on the
        columns is the same projection of the transposed logits, transposed back (a view: bmm reads either layout)."""
        if not self.ends_on_columns:
            return projection(z_res, self.num_iters).view(z_res.shape)
        z_t = z_res.transpose(-1, -2)
        return projection(z_t, self.num_iters).view(z_t.shape).transpose(-1, -2)

    def forward(self, stream: torch.Tensor, norm: Norm, branch: Branch) -> torch.Tensor:
        if inference_fast_path(self):
            return self._inference_forward(stream, norm, branch)
        with stream_saver(stream, self.index, self.keep_stream_every) as saver:
            h_pre, h_post, h_res = self.mappings(stream)
            width = torch.cat([h_pre.unsqueeze(-2), h_res], dim=-2)  # [..., n+1, n]: row 0 -> branch input
            return hyper_connection_update(stream, width, h_post, norm, branch, saver)

    # ------------------------------------------------------------------------------------ no-autograd fast path
    def _fast_weights(self) -> tuple:
        """fp32 weights of :meth:`_inference_forward`. Dynamic: ``Φ`` with the gains, 1/τ (res part) and the
        sqrt(nd) of ``1/rms`` folded in, [nd, n²+2n]; the bias with 1/τ folded in; ``nd·eps`` (0-dim). Static: the
        (input-independent) width map [n+1, n] and depth map [n] themselves."""
        n = self.num_streams
        scale = torch.ones(n * n + 2 * n, device=self.bias.device)
        scale[2 * n:] = 1.0 / self.temperature
        bias = upcast(self.bias) * scale
        if not self.dynamic:
            h_res = self._project_res(bias[2 * n:].view(1, n, n), sinkhorn_inference)[0]
            return torch.cat([bias[:n].sigmoid().unsqueeze(0), h_res]), bias[n:2 * n].sigmoid().mul(2.0)
        nd = self.phi.shape[1]
        gains = torch.cat([upcast(a).expand(k) for a, k in
                           ((self.alpha_pre, n), (self.alpha_post, n), (self.alpha_res, n * n))]) * scale
        phi = (upcast(self.phi) * (gains * nd ** 0.5).unsqueeze(-1)).t().contiguous()
        return phi, bias, bias.new_tensor(nd * self.eps)

    def _inference_forward(self, stream: torch.Tensor, norm: Norm, branch: Branch) -> torch.Tensor:
        """:meth:`forward` without autograd in few aten calls (``fast_path.py``): all logits from one GEMM and one
        fused multiply-add, one sigmoid for H_pre and H_post, Sinkhorn with an early exit
        (:func:`sinkhorn_inference`), one bmm each for the branch input and the carried streams and one addcmul for
        the depth connection. The static variant's maps are input-independent and cached. Equal to the
        differentiable path up to float rounding (``tests/modeling/test_fast_path.py``)."""
        if not self.dynamic:
            width, depth = derived_weights(self, "inference", self._fast_weights, self.bias)
            return hyper_connection_update(stream, width, depth, norm, branch)
        n, d = self.num_streams, stream.shape[-1]
        phi, bias, eps = derived_weights(self, "inference", self._fast_weights, self.phi, self.bias, self.alpha_pre,
                                         self.alpha_post, self.alpha_res)
        with full_precision(stream):
            x = upcast(stream.reshape(-1, n * d))  # [N, nd]
            length = torch.linalg.vector_norm(x, dim=-1, keepdim=True)  # |x| = sqrt(nd)·rms(x)
            z = torch.addcmul(bias, torch.mm(x, phi), torch.addcmul(eps, length, length).rsqrt_())  # [N, n²+2n]
            gates, z_res = z.split_with_sizes([2 * n, n * n], dim=-1)
            gates = as_dtype(gates.sigmoid(), stream.dtype)  # [N, 2n]: σ(pre) | σ(post)
            h_res = as_dtype(self._project_res(z_res.view(-1, n, n), sinkhorn_inference), stream.dtype)
        h = stream.reshape(-1, n, d)
        u = torch.bmm(gates.view(-1, 2, n), h)[:, 0]  # row 0: Σ_s H_pre[s] H_s (row 1 unused)
        out = as_dtype(branch(norm(u.view(stream.shape[:-2] + (d,)))), stream.dtype)
        post = gates.view(-1, 2 * n, 1)[:, n:]  # σ(post) [N, n, 1]; H_post = 2σ (the 2 is exact in any float)
        return torch.addcmul(torch.bmm(h_res, h), post, out.view(-1, 1, d), value=2.0).view(stream.shape)

    def extra_repr(self) -> str:
        return (f"index={self.index}, num_streams={self.num_streams}, stream_index={self.stream_index}, "
                f"dynamic={self.dynamic}, sinkhorn_iters={self.num_iters}"
                + (", sinkhorn_ends_on=columns" if self.ends_on_columns else ""))


class MHCWiring(HyperConnectionWiring):
    residual_class = MHCResidual

    def stream_maps(self, residual: MHCResidual, stream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h_pre, h_post, h_res = residual.mappings(stream)
        return torch.cat([h_pre.unsqueeze(-2), h_res], dim=-2), h_post

    def stream_settings(self, config: MHCConfig) -> tuple[int, str, bool]:
        return config.mhc_num_streams, config.mhc_readout, config.mhc_scale_output_init


class MHCModel(DepthBenchModel):
    config_class = MHCConfig
    wiring_class = MHCWiring


class MHCForCausalLM(DepthBenchForCausalLM):
    config_class = MHCConfig
    model_class = MHCModel


class MHCForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = MHCConfig
    model_class = MHCModel


class MHCForTokenClassification(DepthBenchForTokenClassification):
    config_class = MHCConfig
    model_class = MHCModel


class MHCForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = MHCConfig
    model_class = MHCModel
