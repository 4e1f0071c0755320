"""Per-block forward/backward statistics for training runs (``depthbench train --layer-stats-every N``).

For every block ``l`` the collector accumulates four raw moments of the block's output state and of the gradient
flowing back into it, over all micro-batches of one optimizer step, in float64::

    S1 = sum(x),  S2 = sum(x^2),  SA = sum(|x|),  n = number of elements

After a SUM all-reduce across ranks (sums of raw moments are exact to combine) they become::

    mean = S1 / n,   variance = max(S2 / n - mean^2, 0),   mean_abs = SA / n,   rms = sqrt(S2 / n)

logged as ``layer_stats/block_03/forward/rms`` (and ``.../backward/...``). The reference logged a Frobenius "norm"
``sqrt(S2)`` over every token of the step, which grows with batch size and world size; ``rms`` is its batch-size
independent replacement.

What is observed:

* tensor stream ``[B, T, d]`` (residual architectures): the block output, the residual state itself;
* multi-stream ``[B, T, n, d]`` (hyper-connections): moments per stream, logged under
  ``layer_stats/block_03/stream_1/forward/rms``, plus the all-streams aggregate under ``block_03/forward/...``;
* tuple streams (attention residuals, MoDA): forward moments of ``wiring.readout(stream)`` (the ``[B, T, d]``
  pre-final-norm state the architecture exposes; if it is not a tensor, the first tensor of the tuple), backward
  moments of the gradient w.r.t. the first tuple tensor that requires grad (a readout computed inside the hook
  is not on the loss path, so it never receives a gradient).

Backward moments are of ``grad * grad_scale``. The trainer sets ``grad_scale`` to the number of loss tokens per
micro-batch times the accumulation steps, so the logged gradient is that of the *summed* per-token loss: the
same scale whatever the batch size, accumulation or world size.

Where: the state leaving block ``l`` is observed where it is consumed, at the entry of block ``l + 1`` (a forward
pre-hook; the last block's at its exit). That is where the readout's parameters are gathered under FSDP2
(``depthbench.training.sharding``): the AttnRes readout is the depth mix of the block that consumes the stream,
whose parameters belong to that block's shard; the final consumer's belong to the root, gathered for the whole
forward. Hooks (a forward hook and a forward pre-hook per block, a tensor hook per block output) exist only inside
:meth:`LayerStats.capture`; outside it the model runs without any hook. Under activation checkpointing the block
forward runs again during backward; those re-computations are not counted. Measured overhead:
docs/training.md#training-overhead.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch
from torch import nn

#: Moments per (block, stream): sum, sum of squares, sum of absolute values, element count.
NUM_MOMENTS = 4


def _moments(x: torch.Tensor, per_stream: bool) -> torch.Tensor:
    """Raw moments of ``x`` as float64 ``[S, 4]`` (``S`` = number of streams, 1 for a single stream)."""
    x = x.detach().float()
    if per_stream:  # [B, T, n, d] -> [n, B*T*d]
        x = x.movedim(-2, 0).reshape(x.shape[-2], -1)
    else:
        x = x.reshape(1, -1)
    count = torch.full((x.shape[0],), float(x.shape[1]), device=x.device)
    return torch.stack([x.sum(1), x.square().sum(1), x.abs().sum(1), count], dim=1).double()


def _in_backward() -> bool:
    """True while autograd's engine runs (e.g. an activation-checkpointing re-computation of a block)."""
    return torch._C._current_graph_task_id() != -1


class LayerStats:
    """Collects per-block moments of a depthbench model's block outputs and their gradients.

    Args:
        model: A depthbench causal LM (or its base model); wrappers (DDP, ``torch.compile``) must be unwrapped.
        grad_scale: Multiplier applied to gradients before taking moments (see the module docstring).

    Usage::

        stats = LayerStats(model)
        with stats.capture():           # hooks live only inside
            for batch in micro_batches:
                loss = model(**batch).loss; loss.backward()
        stats.all_reduce(lambda t: accelerator.reduce(t, "sum"))
        metrics = stats.metrics()       # {"layer_stats/block_00/forward/rms": ..., ...}
        stats.reset()
    """

    def __init__(self, model: nn.Module, grad_scale: float = 1.0):
        base = getattr(model, getattr(model, "base_model_prefix", "model"), model)
        self.layers = list(base.layers)
        self.wiring = getattr(base, "wiring", None)
        self.grad_scale = float(grad_scale)
        self._handles: list = []
        self.reset()

    # ------------------------------------------------------------------------------------------------ capture
    def reset(self) -> None:
        """Forget all accumulated moments."""
        self.forward: list[torch.Tensor | None] = [None] * len(self.layers)
        self.backward: list[torch.Tensor | None] = [None] * len(self.layers)

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    @contextlib.contextmanager
    def capture(self) -> Iterator[LayerStats]:
        """Context manager: hooks are attached inside and removed on exit (also on error)."""
        last = len(self.layers) - 1
        self._handles = [layer.register_forward_hook(self._make_hook(i, observe_state=i == last))
                         for i, layer in enumerate(self.layers)]
        self._handles += [layer.register_forward_pre_hook(self._make_entry_hook(i - 1))
                          for i, layer in enumerate(self.layers) if i > 0]
        try:
            yield self
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles = []

    @staticmethod
    def _tensors(stream) -> list[torch.Tensor]:
        if isinstance(stream, torch.Tensor):
            return [stream]
        return [t for t in stream if isinstance(t, torch.Tensor)] if isinstance(stream, (tuple, list)) else []

    def _state(self, stream) -> torch.Tensor | None:
        """The tensor whose forward moments are taken: the stream itself, or the wiring's readout of a tuple
        stream (its first tensor when the readout is not one)."""
        if isinstance(stream, torch.Tensor):
            return stream
        state = self.wiring.readout(stream) if self.wiring is not None else None
        if not isinstance(state, torch.Tensor):
            tensors = self._tensors(stream)
            state = tensors[0] if tensors else None
        return state

    def _observe(self, index: int, stream) -> None:
        state = self._state(stream)
        if state is not None:
            self.forward[index] = self._add(self.forward[index], _moments(state, state.dim() == 4))

    def _make_entry_hook(self, index: int) -> Callable:
        """Forward pre-hook of block ``index + 1``: the state block ``index`` produced, as it is consumed."""
        def hook(module: nn.Module, args) -> None:
            if not _in_backward() and args:
                self._observe(index, args[0])

        return hook

    def _make_hook(self, index: int, observe_state: bool) -> Callable:
        def hook(module: nn.Module, args, output) -> None:
            if _in_backward():  # activation-checkpointing re-computation: already counted
                return
            if observe_state:  # the last block: its consumer is the wiring's exit (root parameters)
                self._observe(index, output)
            grad_tensor = next((t for t in self._tensors(output) if t.requires_grad), None)
            if grad_tensor is not None and torch.is_grad_enabled():
                per_stream = grad_tensor.dim() == 4

                def grad_hook(grad: torch.Tensor) -> None:
                    g = grad * self.grad_scale if self.grad_scale != 1.0 else grad
                    self.backward[index] = self._add(self.backward[index], _moments(g, per_stream))

                grad_tensor.register_hook(grad_hook)

        return hook

    @staticmethod
    def _add(total: torch.Tensor | None, moments: torch.Tensor) -> torch.Tensor:
        return moments if total is None else total + moments

    # ------------------------------------------------------------------------------------------------ results
    def all_reduce(self, reduce_sum: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Sum the raw moments across ranks with ``reduce_sum`` (one collective for all blocks).

        Every rank must call this with the same model (blocks that saw no data contribute zeros).
        """
        shapes = []
        parts = []
        for kind in (self.forward, self.backward):
            for i, m in enumerate(kind):
                streams = self._num_streams(i)
                if m is None:
                    m = torch.zeros(streams, NUM_MOMENTS, dtype=torch.float64, device=self._device())
                shapes.append(m.shape)
                parts.append(m.reshape(-1))
        flat = reduce_sum(torch.cat(parts))
        out, offset = [], 0
        for shape in shapes:
            n = shape[0] * shape[1]
            out.append(flat[offset: offset + n].reshape(shape))
            offset += n
        nl = len(self.layers)
        self.forward, self.backward = out[:nl], out[nl:]

    def _num_streams(self, index: int) -> int:
        for kind in (self.forward, self.backward):
            if kind[index] is not None:
                return kind[index].shape[0]
        for kind in (self.forward, self.backward):  # same model on every rank: use any block's stream count
            for m in kind:
                if m is not None:
                    return m.shape[0]
        return 1

    def _device(self) -> torch.device:
        for kind in (self.forward, self.backward):
            for m in kind:
                if m is not None:
                    return m.device
        return next(self.layers[0].parameters()).device if self.layers else torch.device("cpu")

    @staticmethod
    def summarize(moments: torch.Tensor) -> dict[str, float]:
        """Raw moments ``[4]`` (S1, S2, SA, n) -> ``{"mean", "variance", "mean_abs", "rms"}``."""
        s1, s2, sa, n = (float(v) for v in moments)
        if n <= 0:
            return {"mean": math.nan, "variance": math.nan, "mean_abs": math.nan, "rms": math.nan}
        mean = s1 / n
        return {"mean": mean, "variance": max(s2 / n - mean * mean, 0.0), "mean_abs": sa / n, "rms": math.sqrt(s2 / n)}

    def metrics(self, prefix: str = "layer_stats") -> dict[str, float]:
        """Flat metric dict; blocks without data are omitted."""
        out: dict[str, float] = {}
        for direction, kind in (("forward", self.forward), ("backward", self.backward)):
            for i, m in enumerate(kind):
                if m is None or float(m[:, 3].sum()) == 0:
                    continue
                m = m.cpu()
                block = f"{prefix}/block_{i:02d}"
                for name, value in self.summarize(m.sum(0)).items():
                    out[f"{block}/{direction}/{name}"] = value
                if m.shape[0] > 1:
                    for s in range(m.shape[0]):
                        for name, value in self.summarize(m[s]).items():
                            out[f"{block}/stream_{s}/{direction}/{name}"] = value
        return out
