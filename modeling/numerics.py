"""Precision helpers of the modeling files: delicate math (norms, softmaxes, residual adds and mixing) runs in at
least fp32, and casts are skipped where the dtype already fits.

Ships to the Hugging Face Hub as remote code with every checkpoint (imports only torch).
"""

from __future__ import annotations

import contextlib

import torch

_WIDE_FLOATS = (torch.float32, torch.float64)


def upcast(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in fp32, or in its own dtype if that is wider (fp64 stays fp64): the precision of delicate math
    (norms, softmaxes, residual adds and mixing). Returns ``tensor`` itself when it is already that wide: no aten
    call at all (decoding is dispatch-bound, see ``fast_path.py``)."""
    if tensor.dtype in _WIDE_FLOATS:
        return tensor
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))


def as_dtype(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``tensor.to(dtype)``, skipping the (no-op but dispatched) call when the dtype already matches."""
    return tensor if tensor.dtype == dtype else tensor.to(dtype)


def inv_rms(tensor: torch.Tensor, eps: float, keepdim: bool = False) -> torch.Tensor:
    """``1 / sqrt(mean(x^2) + eps)`` over the last dim, in at least fp32 (``[..., d] -> [...]``, or ``[..., 1]`` with
    ``keepdim``). ``mean(x^2)`` is taken as ``|x|^2 / d`` from one norm: a single pass over ``x`` forward and one
    backward, where squaring first writes and re-reads an ``x``-sized temporary both ways (memory-bound on CPU).
    Used where a norm without gain reads a residual stream (AttnRes keys, HC gates)."""
    wide = torch.promote_types(tensor.dtype, torch.float32)
    sq_norm = torch.linalg.vector_norm(tensor, dim=-1, keepdim=keepdim, dtype=wide).square()
    return torch.rsqrt(sq_norm / tensor.shape[-1] + eps)


def fast_inv_rms(source: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """:func:`inv_rms` without autograd in three aten calls (norm, fused ``eps + |v|^2 / d``, rsqrt); ``eps`` is a
    0-dim fp32 tensor on the source's device (AttnRes caches it: ``_MixerMixin._mix_constants``)."""
    norm = torch.linalg.vector_norm(source, dim=-1) if source.dtype in _WIDE_FLOATS else torch.linalg.vector_norm(
        source, dim=-1, dtype=torch.float32)
    return torch.rsqrt(torch.addcmul(eps, norm, norm, value=1.0 / source.shape[-1]))


_NO_AUTOCAST = contextlib.nullcontext()


def full_precision(tensor: torch.Tensor) -> contextlib.AbstractContextManager:
    """Context that switches autocast off on ``tensor``'s device, so upcast mixing math is not run in bf16 again
    when the model is trained under ``torch.autocast``. Outside autocast it is a shared no-op context (entering a
    ``torch.autocast`` costs ~20 Python calls, which a decode step would pay twice per sublayer)."""
    if not torch.is_autocast_enabled(tensor.device.type):
        return _NO_AUTOCAST
    return torch.autocast(device_type=tensor.device.type, enabled=False)
