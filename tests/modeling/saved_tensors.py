"""What autograd saves for the backward pass, one tensor per distinct storage (the memory-path tests of
``modeling/``)."""

from __future__ import annotations

import torch


def saved_storages(fn, *args) -> list[torch.Tensor]:
    """The tensors autograd saves while running ``fn(*args)`` (one per distinct storage)."""
    saved, seen = [], set()

    def pack(tensor):
        key = tensor.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = fn(*args)
    return out, saved


def storage_ids(*tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors}
