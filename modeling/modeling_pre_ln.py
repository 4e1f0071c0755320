"""Pre-LN: the Llama-style baseline of the study (``x <- x + F(N(x))``).

Ships to the Hugging Face Hub as remote code (imports only torch, transformers and sibling files).
"""

from .configuration_depthbench import DepthBenchConfig
from .depthbench_checkpointing import stream_checkpointing  # noqa: F401  (a direct import: see hf_compat.py)
from .fast_path import inference_fast_path  # noqa: F401  (a direct import: see hf_compat.py)
from .hf_compat import MIN_TRANSFORMERS  # noqa: F401  (a direct import: see hf_compat.py)
from .modeling_depthbench import (
    DepthBenchForCausalLM,
    DepthBenchForQuestionAnswering,
    DepthBenchForSequenceClassification,
    DepthBenchForTokenClassification,
    DepthBenchModel,
    Wiring,
)
from .norms import make_norm  # noqa: F401  (a direct import: see hf_compat.py)
from .numerics import upcast  # noqa: F401  (a direct import: see hf_compat.py)


class PreLNConfig(DepthBenchConfig):
    """Pre-LN (Xiong et al., "On Layer Normalization in the Transformer Architecture", arXiv 2002.04745).

    Each sublayer reads a normalised copy of the residual stream and adds its output back::

        h = x + Attn(RMSNorm(x))
        y = h + MLP(RMSNorm(h))
        logits = W_out RMSNorm(x_L)

    No extra parameters: a ``pre_ln`` checkpoint is a valid ``LlamaForCausalLM`` checkpoint. In the study, extra
    depth barely helps this architecture at a fixed parameter budget.
    """

    model_type = "depthbench_pre_ln"
    upcycle_start = "exact"
    upcycle_reason = "Pre-LN is the source's own wiring: the same tensors compute the same function"


class PreLNModel(DepthBenchModel):
    config_class = PreLNConfig
    wiring_class = Wiring


class PreLNForCausalLM(DepthBenchForCausalLM):
    config_class = PreLNConfig
    model_class = PreLNModel


class PreLNForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = PreLNConfig
    model_class = PreLNModel


class PreLNForTokenClassification(DepthBenchForTokenClassification):
    config_class = PreLNConfig
    model_class = PreLNModel


class PreLNForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = PreLNConfig
    model_class = PreLNModel
