"""depth-muP and CompleteP: Pre-LN with depth-scaled residual branches (and their optimizer rules).

Ships to the Hugging Face Hub as remote code (imports only torch, transformers and sibling files).

Both architectures share one wiring; they differ only in the exponent a of the branch multiplier
``r = (L / L_base)^(-a)`` (a = 1/2 for depth-muP, a = 1 for CompleteP). Each config also describes the learning-rate,
weight-decay and Adam-epsilon multipliers of its parametrization through :meth:`DepthScaledConfig.optimizer_rules`,
plain data that ``depthbench.training.optim.param_groups`` turns into optimizer parameter groups.
"""


import torch
from torch import nn

from .configuration_depthbench import DepthBenchConfig
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
from .norms import make_norm  # noqa: F401  (a direct import: see hf_compat.py)
from .numerics import upcast  # noqa: F401  (a direct import: see hf_compat.py)

DEPTH_SCALING_AXES = ("depth-only", "depth-width")

# Full parameter names (with or without the "model." prefix) the rules below match.
_BLOCK_PARAM = r"(^|\.)layers\.\d+\."
_HIDDEN_MATRIX = _BLOCK_PARAM + r"(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight$"
_EMBEDDING_OR_HEAD = r"(^|\.)(embed_tokens|lm_head)\.weight$"


class DepthScaledConfig(DepthBenchConfig):
    """Shared configuration of the depth-scaled Pre-LN parametrizations (see :class:`DepthMuPConfig`).

    Args:
        depth_scaling_base_depth: L_base, the depth at which the multiplier is 1 (the reference's
            ``residual_scaling_base_depth``, default 24).
        depth_scaling_base_width: d_base, the width the ``depth-width`` rules are relative to (default 1024).
        depth_scaling_axis: ``"depth-only"`` (default) or ``"depth-width"`` (also muP width rules: hidden init std
            times m_N^(-1/2), LM-head init times m_N^(1/2) and its output times m_N^(-1), width-scaled optimizer
            rules).
        **kwargs: Backbone fields of :class:`DepthBenchConfig`.
    """

    #: Exponent a of the branch multiplier r = (L / L_base)^(-a); set by each architecture's config class.
    residual_exponent: float = 0.5

    def __init__(
        self,
        depth_scaling_base_depth: int = 24,
        depth_scaling_base_width: int = 1024,
        depth_scaling_axis: str = "depth-only",
        **kwargs,
    ):
        self.depth_scaling_base_depth = depth_scaling_base_depth
        self.depth_scaling_base_width = depth_scaling_base_width
        self.depth_scaling_axis = depth_scaling_axis
        super().__init__(**kwargs)

    def validate(self) -> None:
        super().validate()
        self._check_positive_int("depth_scaling_base_depth")
        self._check_positive_int("depth_scaling_base_width")
        self._check(self.depth_scaling_axis in DEPTH_SCALING_AXES, "depth_scaling_axis", self.depth_scaling_axis,
                    f"one of {list(DEPTH_SCALING_AXES)}")

    @property
    def depth_multiplier(self) -> float:
        """m_L = L / L_base."""
        return self.num_hidden_layers / self.depth_scaling_base_depth

    @property
    def width_multiplier(self) -> float:
        """m_N = d / d_base (1 on the ``depth-only`` axis, where width rules are off)."""
        if self.depth_scaling_axis != "depth-width":
            return 1.0
        return self.hidden_size / self.depth_scaling_base_width

    @property
    def residual_multiplier(self) -> float:
        """r = m_L^(-a), the factor on every residual branch."""
        return self.depth_multiplier ** (-self.residual_exponent)

    def optimizer_rules(self) -> list[dict]:
        """Per-parameter optimizer multipliers of this parametrization (the reference's ``pretrain_preln_mup.py``).

        Returns:
            Ordered rules ``{"name", "pattern", "lr", "weight_decay", "eps"}``: ``pattern`` is a regular expression
            searched in the full parameter name, the numbers multiply the base learning rate, weight decay and
            Adam epsilon. The first matching rule applies; unmatched parameters keep multiplier 1. With
            a = ``residual_exponent``, m_L = L / L_base and m_N = d / d_base:

            * ``depth-only``: every block parameter: lr x m_L^(a-1), eps x m_L^(-a).
            * ``depth-width``: hidden matrices (q, k, v, o, gate, up, down): lr x m_N^(-1) m_L^(a-1),
              weight decay x m_N, eps x m_N^(-1) m_L^(-a); other block parameters (norms): lr x m_L^(a-1),
              eps x m_N^(-1) m_L^(-a); embedding and LM head: eps x m_N^(-1).
        """
        a, m_l = self.residual_exponent, self.depth_multiplier
        if self.depth_scaling_axis == "depth-only":
            return [{"name": "blocks", "pattern": _BLOCK_PARAM, "lr": m_l ** (a - 1), "weight_decay": 1.0,
                     "eps": m_l ** (-a)}]
        m_n = self.width_multiplier
        return [
            {"name": "hidden_matrices", "pattern": _HIDDEN_MATRIX, "lr": m_l ** (a - 1) / m_n, "weight_decay": m_n,
             "eps": m_l ** (-a) / m_n},
            {"name": "blocks", "pattern": _BLOCK_PARAM, "lr": m_l ** (a - 1), "weight_decay": 1.0,
             "eps": m_l ** (-a) / m_n},
            {"name": "embeddings", "pattern": _EMBEDDING_OR_HEAD, "lr": 1.0, "weight_decay": 1.0, "eps": 1.0 / m_n},
        ]


class DepthMuPConfig(DepthScaledConfig):
    """depth-muP (Yang, Yu, Zhu and Hayou, "Tensor Programs VI: Feature Learning in Infinite-Depth Neural
    Networks", https://arxiv.org/abs/2310.02244).

    Pre-LN whose residual branches are scaled by ``r = (L / L_base)^(-1/2)``, so hyper-parameters tuned at depth
    L_base transfer to depth L (block-wise learning rates and Adam epsilon follow the parametrization too)::

        r = (L / L_base)^(-1/2)                   (L=16, L_base=4: r = 0.5)
        h = x + r * Attn(N_a(x))
        y = h + r * MLP(N_f(h))
        logits = W_out N_final(x_L)
        block params: lr x m_L^(-1/2), Adam eps x m_L^(-1/2)   (m_L = L / L_base; depth-only rule)

    No extra parameters. The branch multiplier and the ``depth-only`` optimizer rule follow the study's reference
    (``DepthScaledTransformerBlock`` and ``pretrain_preln_mup.py``, default L_base = 24); the optimizer rules are
    exposed by ``optimizer_rules()`` and applied by ``depthbench.training.optim.param_groups``. ``depth-width`` adds the
    reference's muP width rules relative to d_base = 1024. Code-only in the study (not in the paper's main table).
    """

    model_type = "depthbench_depth_mup"
    upcycle_start = "exact"
    upcycle_reason = "with depth_scaling_base_depth = the upcycled depth the branch multiplier m_L^-a is 1 (Pre-LN)"

    @classmethod
    def upcycle_fields(cls, num_hidden_layers: int) -> dict:
        return {"depth_scaling_base_depth": num_hidden_layers}
    residual_exponent = 0.5


class CompletePConfig(DepthScaledConfig):
    """CompleteP (Dey et al., "Don't be lazy: CompleteP enables compute-efficient deep transformers",
    https://arxiv.org/abs/2505.01618).

    Pre-LN whose residual branches are scaled by ``r = (L / L_base)^(-1)`` (the depth-muP family with exponent
    a = 1, which keeps every block learning non-lazily as depth grows)::

        r = (L / L_base)^(-1)                     (L=16, L_base=4: r = 0.25)
        h = x + r * Attn(N_a(x))
        y = h + r * MLP(N_f(h))
        logits = W_out N_final(x_L)
        block params: lr x m_L^0 = unchanged, Adam eps x m_L^(-1)   (m_L = L / L_base; depth-only rule)

    No extra parameters. Multiplier and optimizer rules as in the study's reference (``pretrain_preln_mup.py``,
    default L_base = 24), exposed by ``optimizer_rules()`` and applied by ``depthbench.training.optim.param_groups``;
    ``depth-width`` adds the muP width rules relative to d_base = 1024. Code-only in the study.
    """

    model_type = "depthbench_completep"
    upcycle_start = "exact"
    upcycle_reason = "with depth_scaling_base_depth = the upcycled depth the branch multiplier m_L^-a is 1 (Pre-LN)"

    @classmethod
    def upcycle_fields(cls, num_hidden_layers: int) -> dict:
        return {"depth_scaling_base_depth": num_hidden_layers}
    residual_exponent = 1.0


class DepthScaledResidual(Residual):
    """Identical to Pre-LN except that the branch output is multiplied by ``r = (L / L_base)^(-a)``:
    ``x + r * F(N(x))``."""

    def __init__(self, config: DepthScaledConfig, index: int):
        super().__init__(config, index)
        self.multiplier = config.residual_multiplier

    def forward(self, stream: torch.Tensor, norm: Norm, branch: Branch) -> torch.Tensor:
        return torch.add(stream, branch(norm(stream)), alpha=self.multiplier)  # x + m F(N(x)), one fused kernel

    def extra_repr(self) -> str:
        return f"index={self.index}, multiplier={self.multiplier:.6g}"


class DepthScaledWiring(Wiring):
    """Pre-LN wiring with depth-scaled residuals; on the ``depth-width`` axis it also sets the muP hidden init std
    (x m_N^(-1/2)) and multiplies the final hidden state (hence the logits) by m_N^(-1)."""

    residual_class = DepthScaledResidual

    def configure_init(self, model: DepthBenchModel) -> None:
        config: DepthScaledConfig = model.config
        if config.depth_scaling_axis != "depth-width":
            return
        std = config.initializer_range * config.width_multiplier**-0.5
        for layer in model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            for linear in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj,
                           mlp.down_proj):
                linear.init_std = std

    def exit(self, stream: torch.Tensor, final_norm: Norm) -> torch.Tensor:
        hidden = final_norm(stream)
        if self.config.depth_scaling_axis == "depth-width":
            hidden = hidden / self.config.width_multiplier  # muP output multiplier m_N^(-1), folded before lm_head
        return hidden


class _DepthScaledForCausalLM(DepthBenchForCausalLM):
    """Causal LM whose LM head is initialised with std x m_N^(1/2) on the ``depth-width`` axis."""

    def _init_weights(self, module: nn.Module) -> None:
        if module is getattr(self, "lm_head", None) and self.config.depth_scaling_axis == "depth-width":
            module.init_std = self.config.initializer_range * self.config.width_multiplier**0.5
        super()._init_weights(module)


class DepthMuPModel(DepthBenchModel):
    config_class = DepthMuPConfig
    wiring_class = DepthScaledWiring


class DepthMuPForCausalLM(_DepthScaledForCausalLM):
    config_class = DepthMuPConfig
    model_class = DepthMuPModel


class CompletePModel(DepthBenchModel):
    config_class = CompletePConfig
    wiring_class = DepthScaledWiring


class CompletePForCausalLM(_DepthScaledForCausalLM):
    config_class = CompletePConfig
    model_class = CompletePModel


class DepthMuPForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = DepthMuPConfig
    model_class = DepthMuPModel


class DepthMuPForTokenClassification(DepthBenchForTokenClassification):
    config_class = DepthMuPConfig
    model_class = DepthMuPModel


class DepthMuPForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = DepthMuPConfig
    model_class = DepthMuPModel


class CompletePForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = CompletePConfig
    model_class = CompletePModel


class CompletePForTokenClassification(DepthBenchForTokenClassification):
    config_class = CompletePConfig
    model_class = CompletePModel


class CompletePForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = CompletePConfig
    model_class = CompletePModel
