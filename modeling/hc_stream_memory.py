"""Training memory of the multi-stream designs (HC, mHC): saved-tensor hooks that let autograd keep the n-stream
input of every k-th hyper-connected sublayer only and rebuild the others in the backward pass (:func:`stream_saver`).
The update whose result is rebuilt is ``hyper_connection_update`` in ``modeling_hc.py``; it records, through
:meth:`StreamSaver.record`, how each new stream was made.

Ships to the Hugging Face Hub as remote code with every checkpoint (imports only torch).
"""

from __future__ import annotations

import contextlib

import torch

#: What :func:`stream_saver` returns where it saves plainly: a shared no-op context yielding ``None``.
_PLAIN_SAVING = contextlib.nullcontext()


class _KeptStream:
    """A sublayer's input stream that autograd saves as it is (the input of every k-th sublayer)."""

    __slots__ = ("value",)

    def __init__(self, value: torch.Tensor):
        self.value = value

    def get(self) -> torch.Tensor:
        return self.value


class RecomputedStream:
    """A sublayer's input stream that autograd does not keep: the backward pass rebuilds it from the previous
    sublayer's stream (kept or itself rebuilt) with that sublayer's update ``H' = (W H)[1:] + depth · out``, the
    very kernels :func:`hyper_connection_update` ran in the forward pass (same inputs, same autocast state: bitwise
    the same tensor). ``width``, ``depth`` and ``out`` are the tensors that update's backward keeps anyway. The
    rebuilt stream is cached here until the saved tensors that need it are released."""

    __slots__ = ("parent", "width", "depth", "out", "autocast", "value", "version")

    def __init__(self, parent, width: torch.Tensor, depth: torch.Tensor, out: torch.Tensor, version: int):
        self.parent, self.width, self.depth, self.out, self.version = parent, width, depth, out, version
        device = out.device.type
        # None: autocast was off; a dtype: the update ran under autocast to it (replayed, whatever is on at backward)
        self.autocast = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        self.value = None

    def get(self) -> torch.Tensor:
        if self.value is None:
            n, d = self.width.shape[-1], self.out.shape[-1]
            device = self.out.device.type
            replay = (torch.autocast(device, dtype=self.autocast) if self.autocast is not None
                      else torch.autocast(device, enabled=False))
            with replay:
                carried = torch.bmm(self.width, self.parent.get().reshape(-1, n, d)).split_with_sizes([1, n], 1)[1]
                self.value = torch.addcmul(carried, self.depth, self.out)
            self.parent = self.width = self.depth = self.out = None  # the parent's own savers hold it while needed
        return self.value


class _SavedStreamView:
    """What autograd holds instead of a tensor viewing a recomputed stream: the stream's handle and the view."""

    __slots__ = ("stream", "size", "stride", "offset")

    def __init__(self, stream: RecomputedStream, tensor: torch.Tensor):
        self.stream, self.size, self.stride = stream, tensor.size(), tensor.stride()
        self.offset = tensor.storage_offset()


def _unpack_stream(packed):
    if type(packed) is _SavedStreamView:
        return packed.stream.get().as_strided(packed.size, packed.stride, packed.offset)
    return packed


class StreamSaver:
    """The pack hook of one hyper-connected sublayer's saved-tensor hooks (see :func:`stream_saver`), and the record
    of how its update made the next stream. Autograd keeps the hooks as long as the saved tensors: this object
    holds no reference to a stream it does not keep, and nothing refers back to it (no reference cycle, so all of
    it is freed with the saved tensors, without waiting for the garbage collector)."""

    __slots__ = ("handle", "storage", "dtype")

    def __init__(self, stream: torch.Tensor, keep: bool):
        lineage = getattr(stream, "_hc_lineage", None)  # set by the previous sublayer's update (`record`)
        recompute = (not keep and lineage is not None and lineage.version == stream._version
                     and stream.is_contiguous() and stream.storage_offset() == 0
                     and stream.untyped_storage().nbytes() == stream.numel() * stream.element_size())
        self.handle = lineage if recompute else _KeptStream(stream)
        self.storage = stream.untyped_storage().data_ptr() if recompute else None
        self.dtype = stream.dtype

    def __call__(self, tensor: torch.Tensor):
        if (self.storage is not None and tensor.dtype == self.dtype and tensor.layout == torch.strided
                and tensor.untyped_storage().data_ptr() == self.storage):
            return _SavedStreamView(self.handle, tensor)
        return tensor

    def record(self, new_stream: torch.Tensor, width: torch.Tensor, depth: torch.Tensor, out: torch.Tensor) -> None:
        """Tell the next sublayer how ``new_stream`` was made: ``(width @ H)[1:] + depth · out`` with ``H`` this
        sublayer's stream."""
        new_stream._hc_lineage = RecomputedStream(self.handle, width, depth, out, new_stream._version)


class _StreamHooks(torch.autograd.graph.saved_tensors_hooks):
    def __enter__(self) -> StreamSaver:
        super().__enter__()
        return self.pack_hook


def _other_saved_tensors_hooks() -> bool:
    """True inside someone else's saved-tensor hooks (non-reentrant activation checkpointing, ``save_on_cpu``,
    activation offloading) or where they are disabled: the stream is then saved plainly, under their rules."""
    if not torch._C._autograd._saved_tensors_hooks_is_enabled():
        return True
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


def stream_saver(stream: torch.Tensor, index: int, keep_every: int) -> contextlib.AbstractContextManager:
    """Context around one hyper-connected sublayer's training forward (connections + :func:`hyper_connection_update`)
    that lets autograd keep the n-stream input [B, T, n, d] of every ``keep_every``-th sublayer only.

    Each sublayer's coefficient GEMMs and its width-mixing ``bmm`` save their input stream for the backward pass:
    one [B, T, n, d] tensor per sublayer, n times a Pre-LN residual, the largest part of HC's and mHC's extra
    activation memory at token-heavy shapes (the study, arXiv 2609.32534, benchmarks peak training memory against
    Pre-LN). Inside this context a sublayer whose ``index`` is not a multiple of ``keep_every`` saves, instead of its
    input stream, a recipe for rebuilding it in the backward pass from the previous sublayer's stream: that
    sublayer's update ``H' = (W H)[1:] + depth · F(N(u))`` re-run on tensors its own backward keeps anyway (W, depth
    and the branch output). The rebuild runs the forward's kernels on the same inputs, so gradients are bitwise
    those of ``keep_every = 1``, at the price of one small ``bmm`` + ``addcmul`` per rebuilt stream (activation
    recomputation, Chen et al. 2016, arXiv 1604.06174, applied to the cheap residual update only).

    Returns saved-tensor hooks whose ``with ... as saver`` gives the :class:`StreamSaver` to pass to
    :func:`hyper_connection_update`, or a no-op context yielding ``None`` (plain saving) when ``keep_every`` is 1
    (no hooks at all), autograd is off, under ``torch.compile`` (compiled graphs plan their own recomputation) and
    inside other saved-tensor hooks (non-reentrant activation checkpointing, which recomputes the whole block
    anyway, and activation offloading). Reentrant checkpointing runs the block's forward without autograd; its
    re-run in the backward pass may rebuild the block's second stream, with the same gradients.
    """
    if (keep_every == 1 or not torch.is_grad_enabled() or torch.compiler.is_compiling() or not stream.requires_grad
            or _other_saved_tensors_hooks()):
        return _PLAIN_SAVING
    return _StreamHooks(StreamSaver(stream, keep=index % keep_every == 0), _unpack_stream)
