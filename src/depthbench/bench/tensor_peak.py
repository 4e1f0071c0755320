"""Exact peak tensor memory on any device, by watching every storage the aten operators hand out.

CUDA has an allocator that counts (``torch.cuda.max_memory_allocated``); the CPU allocator does not, and a process's
peak RSS adds the C library's heap fragmentation and arenas, which vary by several percent between identical runs.
:class:`TensorPeak` is a ``TorchDispatchMode`` that sees each tensor an operator returns (forward, backward through
the autograd engine, optimizer steps, parameter creation), records the bytes of every storage it has not seen
before, and subtracts them when the storage is freed (a ``weakref.finalize`` on the storage object, which PyTorch
keeps alive exactly as long as the storage). ``peak_bytes`` is therefore the high-water mark of live tensor bytes,
the same quantity ``max_memory_allocated`` reports on CUDA minus the allocator's rounding, and it is deterministic:
the same program gives the same figure on every run.

    >>> import torch
    >>> from depthbench.bench.tensor_peak import TensorPeak
    >>> with TensorPeak() as peak:
    ...     a = torch.ones(1024, 256)          # 1 MiB
    ...     b = a @ a.t()                      # 4 MiB more
    ...     del b
    >>> peak.peak_bytes, peak.current_bytes
    (5242880, 1048576)
    >>> with TensorPeak() as peak:              # ``a`` existed before: its views and in-place updates are free
    ...     _ = a.t().mul_(2)
    >>> peak.peak_bytes
    0

Storages that existed before the mode was entered are not counted (enter it before building the model to count
parameters too). The mode costs a few microseconds of Python per operator, so use it for memory, not for timing.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class TensorPeak(TorchDispatchMode):
    """Live and peak bytes of the tensor storages created while the mode is active (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, int] = {}
        self.current_bytes = 0
        self.peak_bytes = 0

    def _freed(self, key: int) -> None:
        self.current_bytes -= self._live.pop(key, 0)

    def _see(self, tensor: torch.Tensor, inputs: set[int]) -> None:
        storage = tensor.untyped_storage()
        key, size = id(storage), storage.nbytes()
        known = self._live.get(key)
        if known is None:
            weakref.finalize(storage, self._freed, key)
            if key in inputs:  # a view (or in-place result) of a storage from before the mode: not counted
                self._live[key] = 0
                return
        elif known == size or known == 0 and key in inputs:
            return
        self._live[key] = size  # new, or resized in place (an ``out=`` argument grown by the operator)
        self.current_bytes += size - (known or 0)
        self.peak_bytes = max(self.peak_bytes, self.current_bytes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = {id(t.untyped_storage()) for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor) and t.device.type != "meta"}
        out = func(*args, **kwargs)
        for item in tree_flatten(out)[0]:
            if isinstance(item, torch.Tensor) and item.device.type != "meta":
                self._see(item, inputs)
        return out
