"""KEEL: Post-LN with a pre-normed branch input and a large residual weight alpha (default 2L).

Ships to the Hugging Face Hub as remote code (imports only torch, transformers and sibling files).
"""

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
from .norms import make_output_norm
from .numerics import upcast


class KeelConfig(DepthBenchConfig):
    """KEEL (Chen and Wei, "Post-LayerNorm Is Back: Stable, ExpressivE, and Deep", https://arxiv.org/abs/2601.19895).

    A Post-LN whose skip path is a Highway-style scaled identity and whose branch reads a normalised input, so
    every sublayer carries two norms. With alpha = ``keel_alpha`` (default 2L, the number of residual sublayers;
    alpha = 48 at L = 24) and blocks l = 0..L-1::

        block 0:   h = x + Attn(N_a(x))                          (plain Pre-LN, no output norm)
                   y = N_f^out(h + MLP(N_f(h)))                  (Post-LN without alpha)
        block l>0: h = N_a^out(alpha * x + Attn(N_a(x)))
                   y = N_f^out(alpha * h + MLP(N_f(h)))
        logits = W_out N_final(x_L)

    Block 0 is special-cased exactly as in the study's reference code (``KeelTransformerBlock``); the paper does
    not say whether the first sublayer is treated differently. alpha defaults to 2L as in the reference (it counts
    attention and MLP as separate sublayers; summaries of the paper are ambiguous between sublayers and blocks,
    so it is configurable). Extra parameters: the output-norm gains, one in block 0 and two in every other block,
    ``d (2L - 1)``, initialised to 1. Standard init (the paper needs no special init). The residual add runs in
    at least fp32 because alpha * x would swamp the branch output in bf16.

    Args:
        keel_alpha: Residual weight of blocks 1..L-1; ``None`` (default) means ``2 * num_hidden_layers``.
            Must be positive.
        **kwargs: Backbone fields of :class:`DepthBenchConfig`.
    """

    model_type = "depthbench_keel"
    upcycle_start = "changes"
    upcycle_reason = ("Post-LN with a Highway skip alpha = 2L after block 0: each add alpha x + F(N(x)) is "
                      "renormalised, so the branches the source trained at weight 1 count about 1/alpha")

    def __init__(self, keel_alpha: float | None = None, **kwargs):
        self.keel_alpha = keel_alpha
        super().__init__(**kwargs)

    def validate(self) -> None:
        super().validate()
        value = self.keel_alpha
        ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0)
        self._check(ok, "keel_alpha", value, "None (2 * num_hidden_layers) or a positive number")

    @property
    def resolved_alpha(self) -> float:
        """The residual weight in use: ``keel_alpha`` or ``2 * num_hidden_layers``."""
        return float(self.keel_alpha) if self.keel_alpha is not None else float(2 * self.num_hidden_layers)

    def num_extra_parameters(self) -> int:
        return self.hidden_size * (2 * self.num_hidden_layers - 1)


class KeelResidual(Residual):
    """Identical to Pre-LN except that the add is alpha-weighted and followed by an output norm:
    ``x <- N_out(alpha * x + F(N_in(x)))``.

    Block 0 follows the reference: its attention sublayer (index 0) is plain Pre-LN with no ``out_norm``, its MLP
    sublayer (index 1) uses alpha = 1. ``out_norm`` is ``model.layers.N.{attn,mlp}_residual.out_norm.weight``.
    """

    def __init__(self, config: KeelConfig, index: int):
        super().__init__(config, index)
        self.alpha = 1.0 if self.layer_idx == 0 else config.resolved_alpha
        self.out_norm = None if index == 0 else make_output_norm(config)

    def forward(self, stream: torch.Tensor, norm: Norm, branch: Branch) -> torch.Tensor:
        if self.out_norm is None:  # block 0, attention: plain Pre-LN
            return stream + branch(norm(stream))
        return self.out_norm(self.alpha * upcast(stream) + upcast(branch(norm(stream)))).to(stream.dtype)  # [B,T,d]

    def extra_repr(self) -> str:
        return f"index={self.index}, alpha={self.alpha:.6g}"


class KeelWiring(Wiring):
    residual_class = KeelResidual


class KeelModel(DepthBenchModel):
    config_class = KeelConfig
    wiring_class = KeelWiring


class KeelForCausalLM(DepthBenchForCausalLM):
    config_class = KeelConfig
    model_class = KeelModel


class KeelForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = KeelConfig
    model_class = KeelModel


class KeelForTokenClassification(DepthBenchForTokenClassification):
    config_class = KeelConfig
    model_class = KeelModel


class KeelForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = KeelConfig
    model_class = KeelModel
