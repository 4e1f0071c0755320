"""LNS (LayerNorm Scaling): Pre-LN whose pre-norm outputs are scaled down by 1/sqrt(depth of the block).

Ships to the Hugging Face Hub as remote code (imports only torch, transformers and sibling files).
"""

import math

import torch

from .configuration_depthbench import DepthBenchConfig
from .depthbench_checkpointing import stream_checkpointing  # noqa: F401  (a direct import: see hf_compat.py)
from .fast_path import inference_fast_path  # noqa: F401  (a direct import: see hf_compat.py)
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
from .numerics import upcast  # noqa: F401  (a direct import: see hf_compat.py)

LNS_SCALE_MODES = ("layer", "depth")


class LNSConfig(DepthBenchConfig):
    """LayerNorm Scaling (Sun et al., "The Curse of Depth in Large Language Models",
    https://arxiv.org/abs/2502.05795).

    Pre-LN with the output of each pre-norm multiplied by a constant that shrinks with depth, which keeps the
    variance of deep blocks' branch outputs from growing and makes deep blocks useful again. With l = 1..L the
    1-based block index (the same factor for both sublayers of a block; the final norm is not scaled)::

        s_l = 1 / sqrt(l)                 (lns_scale_mode="layer", the paper and the study's "LNS")
        s_l = 1 / sqrt(L)                 (lns_scale_mode="depth", the reference's ``default_depth_scaled``)
        h = x + Attn(s_l * N_a(x))
        y = h + MLP(s_l * N_f(h))
        logits = W_out N_final(x_L)

    No extra parameters: s_l is a constant, not trained. It is held in a non-persistent fp32 buffer ``ln_scale``
    on each residual module (so the state dict stays Llama's) that is recomputed in ``reset_parameters`` -- the
    model's init, which also runs after ``from_pretrained``/meta-device loading (OLMo-core once lost this scale to
    ``to_empty``, allenai/OLMo-core#698) -- and that ``swap_blocks`` moves together with the block, as the reference
    does. The paper and the reference agree on the default (1-based index); the study trains LNS with a larger peak
    learning rate (1e-2 vs 2e-3 at 400M).

    Args:
        lns_scale_mode: ``"layer"`` (1/sqrt(l), default) or ``"depth"`` (the constant 1/sqrt(L) in every block).
        **kwargs: Backbone fields of :class:`DepthBenchConfig`.
    """

    model_type = "depthbench_lns"
    upcycle_start = "exact"
    upcycle_reason = ("the scale s_l multiplies the pre-norm output, so norm gains g / s_l cancel it (folded into "
                      "the source blocks' gains; up to fp32 rounding)")

    def upcycle_state(self, state: dict, new_blocks: set[int]) -> None:
        for layer in range(self.num_hidden_layers):
            if layer in new_blocks:
                continue
            for norm in ("input_layernorm", "post_attention_layernorm"):
                name = f"model.layers.{layer}.{norm}.weight"
                state[name] = state[name] / self.lns_scale(layer)

    def __init__(self, lns_scale_mode: str = "layer", **kwargs):
        self.lns_scale_mode = lns_scale_mode
        super().__init__(**kwargs)

    def validate(self) -> None:
        super().validate()
        self._check(self.lns_scale_mode in LNS_SCALE_MODES, "lns_scale_mode", self.lns_scale_mode,
                    f"one of {list(LNS_SCALE_MODES)}")

    def lns_scale(self, layer_idx: int) -> float:
        """The pre-norm output scale of block ``layer_idx`` (0-based): ``1/sqrt(layer_idx + 1)`` or ``1/sqrt(L)``."""
        depth = self.num_hidden_layers if self.lns_scale_mode == "depth" else layer_idx + 1
        return 1.0 / math.sqrt(depth)


class LNSResidual(Residual):
    """Identical to Pre-LN except that the pre-norm output is scaled by ``ln_scale`` (= s_l):
    ``x + F(s_l * N(x))``."""

    def __init__(self, config: LNSConfig, index: int):
        super().__init__(config, index)
        self.register_buffer("ln_scale", torch.tensor(config.lns_scale(self.layer_idx)), persistent=False)

    def forward(self, stream: torch.Tensor, norm: Norm, branch: Branch) -> torch.Tensor:
        branch_input = norm(stream)
        return stream + branch(branch_input * self.ln_scale.to(branch_input.dtype))  # [B,T,d]

    def reset_parameters(self, config: LNSConfig) -> None:
        hf_init.constant_(self.ln_scale, config.lns_scale(self.layer_idx))

    def extra_repr(self) -> str:
        return f"index={self.index}, ln_scale={_short_float(self.ln_scale)}"


def _short_float(tensor: torch.Tensor) -> str:
    """``tensor`` as a short float string, or ``"meta"`` while it has no data (meta-device construction)."""
    return "meta" if tensor.is_meta else f"{tensor.item():.6g}"


class LNSWiring(Wiring):
    residual_class = LNSResidual


class LNSModel(DepthBenchModel):
    config_class = LNSConfig
    wiring_class = LNSWiring


class LNSForCausalLM(DepthBenchForCausalLM):
    config_class = LNSConfig
    model_class = LNSModel


class LNSForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = LNSConfig
    model_class = LNSModel


class LNSForTokenClassification(DepthBenchForTokenClassification):
    config_class = LNSConfig
    model_class = LNSModel


class LNSForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = LNSConfig
    model_class = LNSModel
