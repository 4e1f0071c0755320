"""The norms of the backbone: RMSNorm and LayerNorm (computed in at least fp32), and the memory-lean RMSNorm that
Peri-LN and KEEL put on sublayer outputs.

Ships to the Hugging Face Hub as remote code with every checkpoint (imports only torch and sibling files).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_depthbench import DepthBenchConfig
from .fast_path import derived_weights, inference_fast_path
from .numerics import as_dtype, upcast


class RMSNorm(nn.Module):
    """RMSNorm with a learnable gain (init 1), computed in at least fp32 and cast back (as Llama and OLMo-core)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        x = upcast(hidden_states)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


class LayerNorm(nn.Module):
    """Mean-centred LayerNorm with a learnable gain and no bias (DeepNorm's norm in the study), computed in at least
    fp32."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        x = F.layer_norm(upcast(hidden_states), (hidden_states.shape[-1],), eps=self.variance_epsilon)
        return self.weight * x.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


NORM_CLASSES = {"rmsnorm": RMSNorm, "layernorm": LayerNorm}


def make_norm(config: DepthBenchConfig, hidden_size: int | None = None) -> nn.Module:
    """The norm named by ``config.norm_type`` over ``hidden_size`` (default ``config.hidden_size``)."""
    return NORM_CLASSES[config.norm_type](hidden_size or config.hidden_size, eps=config.rms_norm_eps)


# ======================================================================================== memory-lean output norm
class _RMSNormFunction(torch.autograd.Function):
    """``weight * (x * rsqrt(mean(x²) + eps)).to(x.dtype)`` (:class:`RMSNorm`'s math) saving only ``x``, the
    per-token ``rsqrt`` and the weight for the backward pass: the normalised tensor, which autograd would also keep,
    is recomputed there (one elementwise product)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        xf = upcast(x)
        inv_rms = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, inv_rms, weight)
        return weight * (xf * inv_rms).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, inv_rms, weight = ctx.saved_tensors
        normed = upcast(x) * inv_rms  # x̂ = x / rms(x)
        grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = (grad * normed.to(x.dtype)).flatten(0, -2).sum(0).to(weight.dtype)
        grad_normed = upcast(grad * weight)
        # d x̂ / d x applied to grad_normed: (g - x̂ · mean(g · x̂)) / rms(x)
        grad_x = (grad_normed - normed * (grad_normed * normed).mean(-1, keepdim=True)) * inv_rms
        return grad_x.to(x.dtype), grad_weight, None


class OutputRMSNorm(RMSNorm):
    """An :class:`RMSNorm` (same parameter ``weight``, same math) for a norm whose input nothing else keeps, such as
    the output norms of Peri-LN and KEEL: its training forward saves only its input and the per-token scale for the
    backward pass. A plain RMSNorm there would keep two extra [B, T, d] tensors per sublayer (input and normalised
    copy); this keeps one. (Pre-LN's norms read the stream, which is saved anyway, so they stay plain.)"""

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """The norm of ``hidden_states``; with ``residual``, ``residual + norm(hidden_states)`` (Peri-LN's add),
        fused without autograd (:func:`inference_fast_path`) into five aten calls instead of seven: ``|x|`` from
        one vector norm, then ``eps + |x|^2 / d`` and the add of ``x̂ * weight`` as one fused call each, the same
        math in the same precision (``eps`` is cached as a 0-dim fp32 tensor by :func:`derived_weights`). A
        keyword of ``forward``, not a method of its own, so module hooks still apply (see ``Wiring.forward``)."""
        if residual is not None:
            if inference_fast_path(self):
                return self._add_normed(residual, hidden_states)
            return residual + self.forward(hidden_states)
        if torch.is_grad_enabled():
            return _RMSNormFunction.apply(hidden_states, self.weight, self.variance_epsilon)
        return super().forward(hidden_states)

    def _add_normed(self, residual: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        x = upcast(hidden_states)
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        eps = derived_weights(self, "eps", lambda: torch.full((), self.variance_epsilon, dtype=torch.float32,
                                                              device=self.weight.device), self.weight)
        normed = as_dtype(x * torch.rsqrt(torch.addcmul(eps, norm, norm, value=1.0 / x.shape[-1])),
                          hidden_states.dtype)
        return torch.addcmul(residual, normed, self.weight)


def make_output_norm(config: DepthBenchConfig) -> nn.Module:
    """:class:`OutputRMSNorm` for RMSNorm models, the configured norm (:func:`make_norm`) otherwise."""
    if config.norm_type == "rmsnorm":
        return OutputRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
    return make_norm(config)
