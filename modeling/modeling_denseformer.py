"""DenseFormer: Pre-LN blocks followed by a depth-weighted average (DWA) of all earlier block outputs.

Ships to the Hugging Face Hub as remote code (imports only torch, transformers and sibling files).

The stream is a :class:`DenseFormerStream`: the current state ``Y`` the next block reads plus the history of block
outputs ``X_0 .. X_i`` the averages draw from. The DWA is a chain of fused multiply-adds accumulated in fp32 (no
stacked ``[i+1, B, T, d]`` copy is kept for backward), so identity-initialised weights reproduce Pre-LN exactly.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from .configuration_depthbench import DepthBenchConfig
from .depthbench_checkpointing import stream_checkpointing  # noqa: F401  (a direct import: see hf_compat.py)
from .fast_path import inference_fast_path  # noqa: F401  (a direct import: see hf_compat.py)
from .hf_compat import hf_init
from .modeling_depthbench import (
    Branch,
    DecoderLayer,
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


class DenseFormerConfig(DepthBenchConfig):
    r"""DenseFormer (Pagliardini, Mohtashami, Fleuret, Jaggi, "DenseFormer: Enhancing Information Flow in Transformers
    via Depth Weighted Averaging", NeurIPS 2024, arXiv 2402.02622).

    After each Pre-LN block, the state the next block reads is a learned weighted average of the outputs of all
    blocks so far, including the embedding::

        X_0 = e (embedding),   X_i = B_i(Y_{i-1})     (B_i: a Pre-LN block, i = 1 .. L)
        Y_i = sum_{j <= i, j = i (mod k)} alpha_{i,j} X_j     if p divides i,   else  Y_i = X_i
        logits = W_out N_final(Y_L)

    with dilation ``k`` and period ``p`` (a "k x p-DenseFormer"). The scalar weights start at the identity
    (``alpha_{i,i} = 1``, others 0), so at init the model is Pre-LN exactly. Extra parameters: one scalar per
    (i, j) pair kept by the masks, ``L (L + 3) / 2`` for ``k = p = 1``. The DWA weights get no weight decay.
    Paper: https://arxiv.org/abs/2402.02622

    Args:
        denseformer_dilation: Dilation k (>= 1): block i averages only outputs j with ``j = i (mod k)``.
        denseformer_period: Period p (>= 1): the average is applied only after blocks i with ``p | i``.
    """

    model_type = "depthbench_denseformer"
    upcycle_start = "exact"
    upcycle_reason = "the depth-weighted averages start at the identity weights, which is Pre-LN"

    def __init__(self, denseformer_dilation: int = 1, denseformer_period: int = 1, **kwargs):
        self.denseformer_dilation = denseformer_dilation
        self.denseformer_period = denseformer_period
        super().__init__(**kwargs)

    def validate(self) -> None:
        super().validate()
        for field in ("denseformer_dilation", "denseformer_period"):
            value = getattr(self, field)
            ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= self.num_hidden_layers
            self._check(ok, field, value, f"an integer in [1, num_hidden_layers={self.num_hidden_layers}]")

    def dwa_sources(self, i: int) -> list[int]:
        """Indices j (ascending) of the outputs ``X_j`` averaged after block ``i`` (1-based); ``[]`` for no DWA."""
        if i % self.denseformer_period != 0:
            return []
        return list(range(i % self.denseformer_dilation, i + 1, self.denseformer_dilation))

    def num_extra_parameters(self) -> int:
        return sum(len(self.dwa_sources(i)) for i in range(1, self.num_hidden_layers + 1))


class DenseFormerStream(NamedTuple):
    """What flows between sublayers: ``current`` is the state the next sublayer reads (``Y_{i}`` between blocks),
    ``history`` the block outputs ``X_0 .. X_i`` (``X_0`` = embedding)."""

    current: torch.Tensor
    history: tuple[torch.Tensor, ...]


def depth_weighted_average(weights: torch.Tensor, outputs: list[torch.Tensor]) -> torch.Tensor:
    """``sum_m weights[m] * outputs[m]``, accumulated in at least fp32 in the given order and cast back.

    With identity weights (``[0, ..., 0, 1]``) the result is ``outputs[-1]`` bit for bit (``0 + 1 * x = x``).
    """
    out = torch.zeros_like(outputs[-1], dtype=torch.promote_types(outputs[-1].dtype, torch.float32))
    for weight, output in zip(weights.to(out.dtype).unbind(), outputs):
        out = out.addcmul_(output, weight)
    return out.to(outputs[-1].dtype)


class DenseFormerResidual(Residual):
    """Identical to Pre-LN except that after the MLP sublayer of block l (block ``i = l + 1`` in DenseFormer's
    1-based numbering) the block output ``X_i`` is appended to the history and the next block reads the depth-weighted
    average ``Y_i`` of the selected history entries. The MLP-side module owns ``dwa_weights`` (one scalar per averaged
    ``X_j``, ascending j, identity-initialised) when block i applies a DWA; all other modules own nothing.
    """

    no_decay = ("dwa_weights",)

    def __init__(self, config: DenseFormerConfig, index: int):
        super().__init__(config, index)
        self.sources = [] if self.is_attention else config.dwa_sources(self.layer_idx + 1)
        if self.sources:
            self.dwa_weights = nn.Parameter(torch.zeros(len(self.sources)))
            self.reset_parameters(config)
        else:
            self.register_parameter("dwa_weights", None)

    def forward(self, stream: DenseFormerStream, norm: Norm, branch: Branch) -> DenseFormerStream:
        x = stream.current
        out = x + branch(norm(x))
        if self.is_attention:
            return stream._replace(current=out)
        history = stream.history + (out,)
        if self.dwa_weights is not None:
            out = depth_weighted_average(self.dwa_weights, [history[j] for j in self.sources])
        return DenseFormerStream(out, history)

    def reset_parameters(self, config: DepthBenchConfig) -> None:
        if self.dwa_weights is not None:
            identity = torch.zeros(len(self.sources), device=self.dwa_weights.device)
            identity[-1] = 1.0
            hf_init.copy_(self.dwa_weights, identity)

    def extra_repr(self) -> str:
        return f"index={self.index}, dwa_sources={self.sources}" if self.sources else f"index={self.index}"


class DenseFormerWiring(Wiring):
    """The embedding is ``X_0``; the final norm reads ``Y_L``; ``readout`` and ``depth_state`` are ``Y_i`` (the state
    the next block reads). ``skip_block(l)`` makes the whole block, its DWA included, the identity: ``X_i`` and
    ``Y_i`` are both its input ``Y_{i-1}`` (so later averages keep their indexing). ``swap_blocks`` exchanges the
    blocks' attention, MLP and norms but leaves the DWA weights at their depth positions."""

    residual_class = DenseFormerResidual
    family = "residual"

    def enter(self, embeddings: torch.Tensor) -> DenseFormerStream:
        return DenseFormerStream(embeddings, (embeddings,))

    def exit(self, stream: DenseFormerStream, final_norm: Norm) -> torch.Tensor:
        return final_norm(stream.current)

    def readout(self, stream: DenseFormerStream) -> torch.Tensor:
        return stream.current

    def depth_state(self, stream: DenseFormerStream, next_layer: DecoderLayer | None) -> torch.Tensor:
        return stream.current

    def skip_layer(self, layer: DecoderLayer, stream: DenseFormerStream) -> DenseFormerStream:
        return DenseFormerStream(stream.current, stream.history + (stream.current,))

    def swap_pairs(self, model: DepthBenchModel, i: int, j: int) -> list[tuple[nn.Module, nn.Module]]:
        layer_i, layer_j = model.layers[i], model.layers[j]
        return [
            (a, b)
            for (name, a), (_, b) in zip(layer_i.named_children(), layer_j.named_children())
            if name != "mlp_residual"
        ]


class DenseFormerModel(DepthBenchModel):
    config_class = DenseFormerConfig
    wiring_class = DenseFormerWiring


class DenseFormerForCausalLM(DepthBenchForCausalLM):
    config_class = DenseFormerConfig
    model_class = DenseFormerModel


class DenseFormerForSequenceClassification(DepthBenchForSequenceClassification):
    config_class = DenseFormerConfig
    model_class = DenseFormerModel


class DenseFormerForTokenClassification(DepthBenchForTokenClassification):
    config_class = DenseFormerConfig
    model_class = DenseFormerModel


class DenseFormerForQuestionAnswering(DepthBenchForQuestionAnswering):
    config_class = DenseFormerConfig
    model_class = DenseFormerModel
