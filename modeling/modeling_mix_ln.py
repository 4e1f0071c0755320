"""Mix-LN: Post-LN in the first floor(fraction * L) blocks, Pre-LN in the rest.

Ships to the Hugging Face Hub as remote code (imports only torch, transformers and sibling files).
"""

import math

import torch

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
from .numerics import upcast


class MixLNConfig(DepthBenchConfig):
    """Mix-LN (Li, Yin and Liu, "Mix-LN: Unleashing the Power of Deeper Layers by Combining Pre-LN and Post-LN",
    https://arxiv.org/abs/2412.13795).

    Post-LN keeps gradients of the deep blocks healthy and Pre-LN those of the shallow ones; Mix-LN uses Post-LN
    for the first k blocks and Pre-LN for the remaining ones. With f = ``mix_ln_fraction``::

        k = floor(f * L)                              (f = 0.25: L=12 -> 3, 24 -> 6, 32 -> 8)
        blocks l < k:   h = N_a(x + Attn(x)),      y = N_f(h + MLP(h))
        blocks l >= k:  h = x + Attn(N_a(x)),      y = h + MLP(N_f(h))
        logits = W_out N_final(x_L)

    f = 0 is Pre-LN and f = 1 is Post-LN. The default 0.25 is the paper's recommended value (its scripts use k = 3
    at 12 blocks and k = 6 at 24); the reference script's implicit ``POST_NUM=1`` default is not used. Mix-LN is not
    in the study's reference code. No extra parameters.

    Args:
        mix_ln_fraction: Fraction of the blocks (rounded down) that use Post-LN; in [0, 1].
        **kwargs: Backbone fields of :class:`DepthBenchConfig`.
    """

    model_type = "depthbench_mix_ln"
    upcycle_start = "changes"
    upcycle_reason = ("the first floor(mix_ln_fraction * L) blocks are Post-LN (their adds are renormalised, their "
                      "branches read the raw stream); only mix_ln_fraction = 0, which is Pre-LN, would be exact")

    def __init__(self, mix_ln_fraction: float = 0.25, **kwargs):
        self.mix_ln_fraction = mix_ln_fraction
        super().__init__(**kwargs)

    def validate(self) -> None:
        super().validate()
        value = self.mix_ln_fraction
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0
        self._check(ok, "mix_ln_fraction", value, "a number in [0, 1]")

    @property
    def num_post_ln_blocks(self) -> int:
        """k = floor(mix_ln_fraction * L) (a 1e-9 slack absorbs float error, e.g. 0.3 * 10)."""
        return min(self.num_hidden_layers, math.floor(self.mix_ln_fraction * self.num_hidden_layers + 1e-9))


class MixLNResidual(Residual):
    """Identical to Pre-LN except in the first k blocks, where the norm moves behind the add: ``x <- N(x + F(x))``
    (add and norm in at least fp32, cast back)."""

    def __init__(self, config: MixLNConfig, index: int):
        super().__init__(config, index)
        self.post_ln = self.layer_idx < config.num_post_ln_blocks

    def forward(self, stream: torch.Tensor, norm: Norm, branch: Branch) -> torch.Tensor:
        if self.post_ln:
            return norm(upcast(stream) + upcast(branch(stream))).to(stream.dtype)  # [B,T,d]
        return stream + branch(norm(stream))

    def extra_repr(self) -> str:
        return f"index={self.index}, {'post' if self.post_ln else 'pre'}_ln"


class MixLNWiring(Wiring):
    residual_class = MixLNResidual


class MixLNModel(DepthBenchModel):
    config_class = MixLNConfig
    wiring_class = MixLNWiring


class MixLNForCausalLM(DepthBenchForCausalLM):
    config_class = MixLNConfig
    model_class = MixLNModel


class MixLNForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = MixLNConfig
    model_class = MixLNModel


class MixLNForTokenClassification(DepthBenchForTokenClassification):
    config_class = MixLNConfig
    model_class = MixLNModel


class MixLNForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = MixLNConfig
    model_class = MixLNModel
