"""No-autograd fast paths: when a module may take one, and the cache of weights they derive from parameters.

Ships to the Hugging Face Hub as remote code with every checkpoint (imports only torch).

Why fast paths exist: a decode step runs each sublayer on one token, so it is dispatch-bound (every aten call costs
microseconds of dispatch whatever its size). Where :func:`inference_fast_path` holds, a module may compute the
same function in fewer aten calls, reading weights it derives from its parameters (normalised, concatenated, with
constants folded in) from the :func:`derived_weights` cache instead of rebuilding them at every call. Elsewhere in
the modeling files "few aten calls" refers to this.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def inference_fast_path(module: nn.Module) -> bool:
    """True where ``module`` may take a no-autograd fast path instead of its differentiable one: it is in eval mode,
    autograd is off (``torch.no_grad()`` / ``torch.inference_mode()``: ``generate()`` and evaluation of a loaded
    model) and nothing is being traced by ``torch.compile`` (compiled graphs keep the plain, fusable math). Fast
    paths compute the same function, equal to the differentiable path within float rounding, not bitwise: a
    training-mode module never takes them, so the forward that reentrant activation checkpointing runs without
    autograd is bitwise the one it recomputes in the backward pass."""
    return not torch.is_grad_enabled() and not module.training and not torch.compiler.is_compiling()


def derived_weights(module: nn.Module, key: str, build: Callable[[], object], *params: torch.Tensor):
    """A value ``build()`` derives from ``params`` (for example normalised or concatenated weights), cached on
    ``module`` for no-autograd fast paths and rebuilt whenever a parameter changes: the cache key is each
    parameter's storage address, version counter (bumped by every in-place update: optimizer steps, ``load_state_dict``,
    ``copy_``), dtype and device. Call it only under :func:`inference_fast_path` (the cached value carries no
    autograd history)."""
    stamp = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in params)
    cache = module.__dict__.setdefault("_derived_weights", {})
    hit = cache.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    value = build()
    cache[key] = (stamp, value)
    return value
