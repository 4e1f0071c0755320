"""Post-LN: the original Transformer's norm placement (norm after each residual add).

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
from .norms import make_norm  # noqa: F401  (a direct import: see hf_compat.py)
from .numerics import upcast


class PostLNConfig(DepthBenchConfig):
    """Post-LN (Vaswani et al., "Attention Is All You Need", https://arxiv.org/abs/1706.03762).

    Each sublayer reads the raw residual stream, and the sum of the stream and the sublayer output is normalised;
    the first block therefore receives the un-normalised embedding::

        h = N_a(x + Attn(x))
        y = N_f(h + MLP(h))
        logits = W_out N_final(x_L)

    ``N_a`` / ``N_f`` are the block's ``input_layernorm`` / ``post_attention_layernorm`` (Llama names kept, only their
    position changes). The final model norm is still applied although the last block output is already normalised:
    this follows the study's reference code (and the LNS/Mix-LN code it descends from) so every architecture has
    the same head; it is harmless at gamma = 1. No extra parameters. In the study Post-LN is a code-only baseline;
    it needs warmup and its gradients vanish toward the early blocks (Xiong et al., arXiv 2002.04745).
    """

    model_type = "depthbench_post_ln"
    upcycle_start = "changes"
    upcycle_reason = ("the norm moves behind the add (x <- N(x + F(x))): the branches read the raw stream and every "
                      "block's output is renormalised, where the source's weights were trained on a growing, "
                      "un-normalised stream")


class PostLNResidual(Residual):
    """Identical to Pre-LN except that the norm moves behind the residual add: ``x <- N(x + F(x))``.

    The add and the norm run in at least fp32 (the norm upcasts anyway) and the result is cast back to the stream dtype.
    """

    def forward(self, stream: torch.Tensor, norm: Norm, branch: Branch) -> torch.Tensor:
        return norm(upcast(stream) + upcast(branch(stream))).to(stream.dtype)  # [B,T,d]


class PostLNWiring(Wiring):
    residual_class = PostLNResidual


class PostLNModel(DepthBenchModel):
    config_class = PostLNConfig
    wiring_class = PostLNWiring


class PostLNForCausalLM(DepthBenchForCausalLM):
    config_class = PostLNConfig
    model_class = PostLNModel


class PostLNForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = PostLNConfig
    model_class = PostLNModel


class PostLNForTokenClassification(DepthBenchForTokenClassification):
    config_class = PostLNConfig
    model_class = PostLNModel


class PostLNForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = PostLNConfig
    model_class = PostLNModel
