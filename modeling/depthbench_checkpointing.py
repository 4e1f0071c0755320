"""Gradient checkpointing of the backbone's blocks (``DecoderLayer`` in ``modeling_depthbench.py``) for streams that
are nested tuples of tensors rather than single tensors (:func:`stream_checkpointing`).

Ships to the Hugging Face Hub as remote code with every checkpoint (imports only torch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch


class _Constant(NamedTuple):
    """A non-tensor part of a stream (``None``, an int, a flag), kept out of the checkpoint's arguments."""

    value: object


class _Node(NamedTuple):
    """A tuple, list or NamedTuple part of a stream: its type and the specs of its items."""

    kind: type
    items: tuple


_TENSOR = None  # the spec of a tensor leaf


def flatten_stream(tree, leaves: list[torch.Tensor]):
    """Append the tensors of ``tree`` (tensors nested in tuples, lists and NamedTuples) to ``leaves`` in order and
    return the spec :func:`unflatten_stream` rebuilds it from (other values are kept in the spec)."""
    if isinstance(tree, torch.Tensor):
        leaves.append(tree)
        return _TENSOR
    if isinstance(tree, (tuple, list)):
        return _Node(type(tree), tuple(flatten_stream(item, leaves) for item in tree))
    return _Constant(tree)


def unflatten_stream(spec, leaves: Iterator[torch.Tensor]):
    """The inverse of :func:`flatten_stream`: ``spec`` filled with the next tensors of ``leaves``."""
    if spec is _TENSOR:
        return next(leaves)
    if isinstance(spec, _Constant):
        return spec.value
    items = [unflatten_stream(item, leaves) for item in spec.items]
    return spec.kind(*items) if hasattr(spec.kind, "_fields") else spec.kind(items)


def stream_checkpointing(checkpoint_fn: Callable) -> Callable:
    """Adapt a checkpointing function (``torch.utils.checkpoint.checkpoint`` with its keywords bound) to streams
    that are nested tuples of tensors (NamedTuples, tuples of tensors, ``None`` and ints), not single tensors.

    Reentrant checkpointing (``use_reentrant=True``, what PEFT enables in many setups) runs the block inside an
    ``autograd.Function``, which sees only top-level tensor arguments and returns its outputs as a plain tuple: a
    NamedTuple stream would lose its type and its tensors would get no gradient. The adapter hands the checkpoint
    the stream's tensors (:func:`flatten_stream`) and rebuilds the stream (input and output) around the block, so
    both modes give the same loss and gradients. Tensor streams pass through untouched.
    """
    if getattr(checkpoint_fn, "_depthbench_stream_adapter", False):
        return checkpoint_fn

    def checkpoint_stream(function: Callable, *args):
        if all(isinstance(a, torch.Tensor) for a in args):
            return checkpoint_fn(function, *args)
        leaves: list[torch.Tensor] = []
        spec = flatten_stream(args, leaves)
        out_spec: list = []

        def flat_function(*flat_leaves):
            out_leaves: list[torch.Tensor] = []
            out_spec[:] = [flatten_stream(function(*unflatten_stream(spec, iter(flat_leaves))), out_leaves)]
            return tuple(out_leaves)  # the same structure on the backward re-computation

        out = checkpoint_fn(flat_function, *leaves)
        return unflatten_stream(out_spec[0], iter(out))

    checkpoint_stream._depthbench_stream_adapter = True
    return checkpoint_stream
