"""MoDA's products with the per-token depth slots: the depth logits ``q . kappa_s`` and the depth readout
``sum_s a_s nu_s``, computed from the S separate slots the depth cache holds. With autograd they save the slots
themselves (alive anyway) rather than their stack, which is rebuilt transiently in the backward pass.

Ships to the Hugging Face Hub as remote code with every checkpoint (imports only torch).

Einsum legend: b batch, k key/value head, g query heads per key/value head (GQA group), t query position, s depth
slot, d head_dim.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class _DepthLogits(torch.autograd.Function):
    """Depth logits ``l[b,k,g,t,s] = q[b,k,g,t,:] . kappa_s[b,k,t,:]`` from the S separate depth slots.

    Saves the query and the slots themselves (which the depth cache keeps alive anyway) rather than their stack:
    block l's stack holds 2l slots, so stacks saved for the backward pass would grow quadratically with depth
    (most of MoDA's extra activation memory at depth: see docs/benchmarks.md). The stack is rebuilt, transiently,
    in the backward pass.
    """

    @staticmethod
    def forward(ctx, query: torch.Tensor, *slots: torch.Tensor) -> torch.Tensor:
        return _slot_product(ctx, query, slots, "bkgtd", "bkgts")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _slot_product_grads(ctx, grad, "bkgtd", "bkgts")


class _DepthReadout(torch.autograd.Function):
    """Depth part of the attention output ``o[b,k,g,t,:] = sum_s a[b,k,g,t,s] nu_s[b,k,t,:]`` from the S separate
    depth slots; saves the weights and the slots, not their stack (see :class:`_DepthLogits`)."""

    @staticmethod
    def forward(ctx, weights: torch.Tensor, *slots: torch.Tensor) -> torch.Tensor:
        return _slot_product(ctx, weights, slots, "bkgts", "bkgtd")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _slot_product_grads(ctx, grad, "bkgts", "bkgtd")


def _slot_product(ctx, per_token: torch.Tensor, slots: tuple, subscripts: str, out_subscripts: str) -> torch.Tensor:
    """The forward of :class:`_DepthLogits` (``per_token`` the query, ``"bkgtd" -> "bkgts"``) and of
    :class:`_DepthReadout` (the weights, ``"bkgts" -> "bkgtd"``): the product with the slots' stack
    [B, H_kv, T, S, hd], saving ``per_token`` and the slots themselves."""
    ctx.save_for_backward(per_token, *slots)
    return torch.einsum(f"{subscripts},bktsd->{out_subscripts}", per_token, torch.stack(slots, dim=3))


def _slot_product_grads(ctx, grad: torch.Tensor, subscripts: str, out_subscripts: str) -> tuple:
    """The backward of :func:`_slot_product`: the gradients of ``per_token`` and of each slot."""
    per_token, *slots = ctx.saved_tensors
    # Under autocast the forward product ran in the gradient's (lower) dtype, whatever its inputs' dtypes (a
    # RoPE'd fp32 query, bf16 slots); the backward products run in it too (autograd casts each gradient back
    # to its input's dtype).
    per_token, stack = per_token.to(grad.dtype), torch.stack(slots, dim=3).to(grad.dtype)
    grad_per_token = torch.einsum(f"{out_subscripts},bktsd->{subscripts}", grad, stack)
    by_subscripts = {subscripts: per_token, out_subscripts: grad}  # the [.., S] operand first, then the [.., hd]
    grad_stack = torch.einsum("bkgts,bkgtd->bktsd", by_subscripts["bkgts"], by_subscripts["bkgtd"])
    return (grad_per_token, *grad_stack.unbind(dim=3))


def _slots(depth: torch.Tensor | Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Depth keys/values as a tuple of S slots [B, H_kv, T, hd] (a stacked [B, H_kv, T, S, hd] tensor is split)."""
    return depth.unbind(dim=3) if isinstance(depth, torch.Tensor) else tuple(depth)


def depth_logits(query: torch.Tensor, depth_keys: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """Raw depth logits [B, H_kv, G, T, S] of the query [B, H_kv, G, T, hd] against the same-position depth keys
    (stacked [B, H_kv, T, S, hd] or S slots [B, H_kv, T, hd])."""
    slots = _slots(depth_keys)
    if torch.is_grad_enabled():
        return _DepthLogits.apply(query, *slots)
    # the same batched product as the einsum, without its parsing (decoding pays per call: fast_path.py)
    return (query.transpose(2, 3) @ torch.stack(slots, dim=3).transpose(-1, -2)).transpose(2, 3)


def depth_readout(weights: torch.Tensor, depth_values: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """``sum_s weights[..., s] * value_s``: [B, H_kv, G, T, hd] from weights [B, H_kv, G, T, S] and the depth
    values (stacked [B, H_kv, T, S, hd] or S slots [B, H_kv, T, hd])."""
    slots = _slots(depth_values)
    if torch.is_grad_enabled():
        return _DepthReadout.apply(weights, *slots)
    return (weights.transpose(2, 3) @ torch.stack(slots, dim=3)).transpose(2, 3)


def num_slots(depth_keys) -> int:
    if depth_keys is None:
        return 0
    return depth_keys.shape[3] if isinstance(depth_keys, torch.Tensor) else len(depth_keys)
