"""Capture the stream entering every sublayer's residual module (for the figures that read per-sublayer mixing)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def sublayer_streams(adapter) -> Iterator[list[tuple[torch.nn.Module, object]]]:
    """Yields a list filled, during a forward, with ``(residual module, stream)`` per sublayer in execution order."""
    seen: list[tuple[torch.nn.Module, object]] = []
    handles = []
    for layer in adapter.layers:
        for name in ("attn_residual", "mlp_residual"):
            module = getattr(layer, name)

            def hook(mod, args, kwargs):
                seen.append((mod, args[0] if args else kwargs.get("stream")))

            handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()
