"""DeepNorm: Post-LN with an up-weighted residual (alpha) and down-scaled init of the value/output/FFN weights (beta).

Ships to the Hugging Face Hub as remote code (imports only torch, transformers and sibling files).
"""

import math

import torch

from .configuration_depthbench import NORM_TYPES, DepthBenchConfig
from .depthbench_checkpointing import stream_checkpointing  # noqa: F401  (a direct import: see hf_compat.py)
from .fast_path import inference_fast_path  # noqa: F401  (a direct import: see hf_compat.py)
from .hf_compat import MIN_TRANSFORMERS  # noqa: F401  (a direct import: see hf_compat.py)
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
from .norms import NORM_CLASSES, make_norm  # noqa: F401  (make_norm: a direct import, see hf_compat.py)
from .numerics import upcast

DEEPNORM_BASE_INITS = ("normal", "xavier")


class DeepNormConfig(DepthBenchConfig):
    """DeepNorm (Wang et al., "DeepNet: Scaling Transformers to 1,000 Layers", https://arxiv.org/abs/2203.00555).

    Post-LN whose skip path is up-weighted by alpha, with no pre-norm; at init the value, output and FFN
    matrices are shrunk by beta so the model update per step is bounded. With N = ``num_hidden_layers`` (blocks,
    not sublayers) and the decoder-only constants of the paper::

        alpha = (2N)^(1/4),   beta = (8N)^(-1/4)          (N=24: alpha=2.6321, beta=0.2686)
        h = LN_a(alpha * x + Attn(x))
        y = LN_f(alpha * h + MLP(h))
        logits = W_out LN_final(x_L)
        W_v, W_o, W_gate, W_up, W_down ~ beta * base init;  W_q, W_k, embedding, LM head ~ base init

    No extra parameters. Choices where the reference code and the paper differ:

    * ``norm_type`` defaults to ``"layernorm"`` (mean-centred, gain only, no bias) because the study's DeepNorm
      runs switch RMSNorm to LayerNorm (a confound against the other architectures; set ``norm_type="rmsnorm"``
      to remove it). The final norm follows ``norm_type`` unless ``deepnorm_final_norm_type`` names another type:
      the study's entry script switches only the block norms, so its checkpoints keep an RMSNorm LM-head norm
      (``depthbench convert`` sets ``deepnorm_final_norm_type="rmsnorm"`` for them).
    * ``deepnorm_base_init`` defaults to ``"normal"``: truncated normal with std ``initializer_range`` (0.02) as in
      the study's reference, so only the beta factor differs from the other architectures. The paper (and
      torchscale) use Xavier-normal, available as ``"xavier"`` (std ``sqrt(2 / (fan_in + fan_out))``, times beta
      for the scaled matrices).
    * alpha and beta follow the paper's formulas (the study's reference does too); the LNS/Mix-LN code's
      hard-coded alpha = (2*32)^(1/4) and inverted beta are not reproduced. ``deepnorm_alpha`` /
      ``deepnorm_beta`` override them (``deepnorm_alpha=1, deepnorm_beta=1`` is plain Post-LN).

    Args:
        norm_type: Norm of every block and of the final norm; ``"layernorm"`` by default here.
        deepnorm_alpha: Residual weight; ``None`` (default) means ``(2N)^(1/4)``. Must be positive.
        deepnorm_beta: Init gain of W_v, W_o and the FFN; ``None`` (default) means ``(8N)^(-1/4)``, ``1.0`` turns
            the beta-init off. Must be positive.
        deepnorm_base_init: ``"normal"`` (reference, default) or ``"xavier"`` (paper).
        deepnorm_final_norm_type: Type of the final norm (``"rmsnorm"`` or ``"layernorm"``); ``None`` (default)
            means ``norm_type``. Its eps is ``rms_norm_eps``.
        **kwargs: Backbone fields of :class:`DepthBenchConfig`.
    """

    model_type = "depthbench_deepnorm"
    upcycle_start = "changes"
    upcycle_reason = ("Post-LN with the skip path weighted by alpha = (2N)^(1/4) and no pre-norm: the branches read "
                      "the raw stream and every add is renormalised, with the stream counted alpha times")

    def __init__(
        self,
        norm_type: str = "layernorm",
        deepnorm_alpha: float | None = None,
        deepnorm_beta: float | None = None,
        deepnorm_base_init: str = "normal",
        deepnorm_final_norm_type: str | None = None,
        **kwargs,
    ):
        self.deepnorm_alpha = deepnorm_alpha
        self.deepnorm_beta = deepnorm_beta
        self.deepnorm_base_init = deepnorm_base_init
        self.deepnorm_final_norm_type = deepnorm_final_norm_type
        super().__init__(norm_type=norm_type, **kwargs)

    def validate(self) -> None:
        super().validate()
        for field in ("deepnorm_alpha", "deepnorm_beta"):
            value = getattr(self, field)
            ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0)
            self._check(ok, field, value, "None (the paper's formula) or a positive number")
        self._check(self.deepnorm_base_init in DEEPNORM_BASE_INITS, "deepnorm_base_init", self.deepnorm_base_init,
                    f"one of {list(DEEPNORM_BASE_INITS)}")
        final = self.deepnorm_final_norm_type
        self._check(final is None or final in NORM_TYPES, "deepnorm_final_norm_type", final,
                    f"None (norm_type) or one of {list(NORM_TYPES)}")

    @property
    def resolved_final_norm_type(self) -> str:
        """The final norm's type: ``deepnorm_final_norm_type`` or ``norm_type``."""
        return self.deepnorm_final_norm_type or self.norm_type

    @property
    def resolved_alpha(self) -> float:
        """The residual weight in use: ``deepnorm_alpha`` or ``(2 * num_hidden_layers)^(1/4)``."""
        return float(self.deepnorm_alpha) if self.deepnorm_alpha is not None else (2 * self.num_hidden_layers) ** 0.25

    @property
    def resolved_beta(self) -> float:
        """The init gain in use: ``deepnorm_beta`` or ``(8 * num_hidden_layers)^(-1/4)``."""
        return float(self.deepnorm_beta) if self.deepnorm_beta is not None else (8 * self.num_hidden_layers) ** -0.25


class DeepNormResidual(Residual):
    """Identical to Pre-LN except that there is no pre-norm and the norm follows an alpha-weighted add:
    ``x <- N(alpha * x + F(x))``.

    The add and the norm run in at least fp32 (alpha * x would swamp a small F(x) in bf16) and are cast back.
    """

    def __init__(self, config: DeepNormConfig, index: int):
        super().__init__(config, index)
        self.alpha = config.resolved_alpha

    def forward(self, stream: torch.Tensor, norm: Norm, branch: Branch) -> torch.Tensor:
        return norm(self.alpha * upcast(stream) + upcast(branch(stream))).to(stream.dtype)  # [B,T,d]

    def extra_repr(self) -> str:
        return f"index={self.index}, alpha={self.alpha:.6g}"


class DeepNormWiring(Wiring):
    """Post-norm wiring with DeepNorm residuals; sets the beta-scaled init std of each block's matrices."""

    residual_class = DeepNormResidual

    def configure_init(self, model: DepthBenchModel) -> None:
        config: DeepNormConfig = model.config
        beta = config.resolved_beta
        for layer in model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            scaled = (attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
            for linear in (attn.q_proj, attn.k_proj, *scaled):
                if config.deepnorm_base_init == "xavier":
                    std = math.sqrt(2.0 / (linear.in_features + linear.out_features))
                else:
                    std = config.initializer_range
                linear.init_std = std * beta if any(linear is m for m in scaled) else std


class DeepNormModel(DepthBenchModel):
    config_class = DeepNormConfig
    wiring_class = DeepNormWiring

    def __init__(self, config: DeepNormConfig):
        super().__init__(config)
        if config.resolved_final_norm_type != config.norm_type:  # a fresh norm: gain one, like the one it replaces
            self.norm = NORM_CLASSES[config.resolved_final_norm_type](config.hidden_size, eps=config.rms_norm_eps)


class DeepNormForCausalLM(DepthBenchForCausalLM):
    config_class = DeepNormConfig
    model_class = DeepNormModel


class DeepNormForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = DeepNormConfig
    model_class = DeepNormModel


class DeepNormForTokenClassification(DepthBenchForTokenClassification):
    config_class = DeepNormConfig
    model_class = DeepNormModel


class DeepNormForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = DeepNormConfig
    model_class = DeepNormModel
