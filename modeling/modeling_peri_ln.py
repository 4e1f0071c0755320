"""Peri-LN (Sandwich-LN): a norm on the input and on the output of every sublayer, inside the residual branch.

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
from .norms import OutputRMSNorm, make_norm, make_output_norm
from .numerics import upcast  # noqa: F401  (a direct import: see hf_compat.py)


class PeriLNConfig(DepthBenchConfig):
    """Peri-LN / Sandwich-LN (Kim et al., "Peri-LN: Revisiting Normalization Layer in the Transformer
    Architecture", https://arxiv.org/abs/2502.02732).

    Pre-LN plus a learnable output norm on every sublayer's result before it is added to the stream, so each
    sublayer adds a vector of RMS gamma_out whatever the scale of its weights::

        x_0 = E[tokens]                   (x_0 = N_emb(E[tokens]) with peri_ln_embedding_norm=True)
        h = x + N_a^out(Attn(N_a(x)))
        y = h + N_f^out(MLP(N_f(h)))
        logits = W_out N_final(x_L)

    Extra parameters: the two output-norm gains per block (2 d L, initialised to 1 and trained), plus d for the
    optional embedding norm. The paper normalises the embedding output; the study's reference code
    (``PeriNormTransformerBlock``) does not, and the study's Sandwich-LN numbers come from that code, so the default
    is ``peri_ln_embedding_norm=False`` (set it to True for the paper's variant). In the study Sandwich-LN is
    roughly flat in depth at a fixed parameter budget.

    Args:
        peri_ln_embedding_norm: Normalise the token embedding before block 0 (``model.wiring.embedding_norm``).
        **kwargs: Backbone fields of :class:`DepthBenchConfig`.
    """

    model_type = "depthbench_peri_ln"
    upcycle_start = "changes"
    upcycle_reason = ("Pre-LN plus a norm on every sublayer output: each branch adds a vector of RMS gamma_out = 1 "
                      "instead of the size the source trained it to add")

    def __init__(self, peri_ln_embedding_norm: bool = False, **kwargs):
        self.peri_ln_embedding_norm = peri_ln_embedding_norm
        super().__init__(**kwargs)

    def validate(self) -> None:
        super().validate()
        self._check(isinstance(self.peri_ln_embedding_norm, bool), "peri_ln_embedding_norm",
                    self.peri_ln_embedding_norm, "True or False")

    def num_extra_parameters(self) -> int:
        d = self.hidden_size
        return 2 * d * self.num_hidden_layers + (d if self.peri_ln_embedding_norm else 0)


class PeriLNResidual(Residual):
    """Identical to Pre-LN except that the sublayer output is normalised before the add: ``x + N_out(F(N_in(x)))``.

    ``out_norm`` (parameter ``model.layers.N.{attn,mlp}_residual.out_norm.weight``) is an extra norm of the
    config's ``norm_type``; its gain starts at 1 (the model's ``_init_weights`` sets every norm gain to 1, also when
    a ``pre_ln`` checkpoint without these keys is loaded).
    """

    def __init__(self, config: DepthBenchConfig, index: int):
        super().__init__(config, index)
        self.out_norm = make_output_norm(config)  # saves only its input and per-token scale for backward

    def forward(self, stream: torch.Tensor, norm: Norm, branch: Branch) -> torch.Tensor:
        if isinstance(self.out_norm, OutputRMSNorm):  # the same sum; fused by the norm where it may (decoding)
            return self.out_norm(branch(norm(stream)), residual=stream)
        return stream + self.out_norm(branch(norm(stream)))  # [B,T,d]


class PeriLNWiring(Wiring):
    """Pre-LN wiring with Peri-LN residuals and, when configured, a norm on the embedding output."""

    residual_class = PeriLNResidual

    def __init__(self, config: PeriLNConfig):
        super().__init__(config)
        self.embedding_norm = make_norm(config) if config.peri_ln_embedding_norm else None

    def enter(self, embeddings: torch.Tensor) -> torch.Tensor:
        return embeddings if self.embedding_norm is None else self.embedding_norm(embeddings)


class PeriLNModel(DepthBenchModel):
    config_class = PeriLNConfig
    wiring_class = PeriLNWiring


class PeriLNForCausalLM(DepthBenchForCausalLM):
    config_class = PeriLNConfig
    model_class = PeriLNModel


class PeriLNForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = PeriLNConfig
    model_class = PeriLNModel


class PeriLNForTokenClassification(DepthBenchForTokenClassification):
    config_class = PeriLNConfig
    model_class = PeriLNModel


class PeriLNForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = PeriLNConfig
    model_class = PeriLNModel
