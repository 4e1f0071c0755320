"""Gradient checkpointing of streams that are nested tuples of tensors (``modeling/depthbench_checkpointing.py``),
against the same block run without checkpointing (plain autograd is the oracle). The registry-wide checks through
whole models are ``test_gradient_checkpointing_gives_same_loss_and_grads`` (test_contract.py) and
``test_reentrant_gradient_checkpointing_gives_same_loss_and_grads`` (test_contract_hf.py).

    python -m pytest tests/modeling/test_depthbench_checkpointing.py -q
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import pytest
import torch
from depthbench.modeling.depthbench_checkpointing import stream_checkpointing
from torch.utils.checkpoint import checkpoint


class Stream(NamedTuple):
    streams: tuple
    memory: torch.Tensor | None
    count: int


def block(stream: Stream, weight: torch.Tensor) -> Stream:
    """A block that reads every part of a nested stream and returns one of the same structure."""
    a, b = stream.streams
    mixed = torch.tanh(a @ weight) + b * stream.count
    return Stream(streams=(mixed, a * b), memory=None if stream.memory is None else stream.memory + mixed.sum(),
                  count=stream.count + 1)


def _inputs(with_memory: bool):
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(2, 3, 4, generator=generator, requires_grad=True) for _ in range(2))
    memory = torch.randn(1, generator=generator, requires_grad=True) if with_memory else None
    weight = torch.randn(4, 4, generator=generator, requires_grad=True)
    return Stream((a, b), memory, 2), weight


def _loss_and_grads(run, with_memory: bool):
    stream, weight = _inputs(with_memory)
    out = run(block, stream, weight)
    loss = out.streams[0].pow(2).sum() + out.streams[1].sum() + (0 if out.memory is None else out.memory.sum())
    loss.backward()
    leaves = [*stream.streams, weight] + ([stream.memory] if with_memory else [])
    return out, loss, [t.grad for t in leaves]


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("with_memory", [True, False])
def test_checkpointed_nested_stream_equals_the_block_without_checkpointing(use_reentrant, with_memory):
    adapted = stream_checkpointing(functools.partial(checkpoint, use_reentrant=use_reentrant))
    out, loss, grads = _loss_and_grads(adapted, with_memory)
    want_out, want_loss, want_grads = _loss_and_grads(lambda fn, *args: fn(*args), with_memory)
    assert type(out) is Stream and type(out.streams) is tuple and out.count == 3
    assert (out.memory is None) == (not with_memory)
    torch.testing.assert_close(loss, want_loss, rtol=0, atol=0)
    for got, want in zip(grads, want_grads):
        assert got is not None
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_tensor_streams_pass_through_and_the_adapter_is_applied_once():
    calls = []

    def recording_checkpoint(function, *args):
        calls.append(args)
        return function(*args)

    adapted = stream_checkpointing(recording_checkpoint)
    x, w = torch.randn(3), torch.randn(3)
    assert torch.equal(adapted(torch.mul, x, w), x * w)
    assert len(calls) == 1 and calls[0][0] is x and calls[0][1] is w  # the tensors themselves, not a flattening
    assert stream_checkpointing(adapted) is adapted  # transformers may assign the function more than once
