"""Shared state code of the layer analyses: one adapter over depthbench models and plain Hugging Face causal LMs,
traces of a forward pass, and batched interventions.

Depth states follow the study's definition (arXiv 2609.32534, analysis setup; ``z_0`` = input of block 0,
``z_{l+1}`` = output of block l) through the model's own :meth:`Wiring.depth_state` (hyper-connections: a token's n
streams concatenated; attention residuals: the depth mix consumed at a block boundary). Interventions are the
model's own ``skip_block`` / ``swap_blocks`` context managers. A model without them (``LlamaForCausalLM``, any Hub
decoder with ``model.layers``) falls back to its decoder layers: the states are the layer inputs/outputs (what
``output_hidden_states`` returns before the final norm), a skipped layer returns its input and a swap exchanges all
same-named, same-shaped tensors of two layers.

Batched interventions (:func:`run_groups`). An intervention changes the model from one depth on, so the prefix is
shared: the trace of the unmodified model holds the stream entering every block, and an intervention group starts
from the stream at its first affected depth. Groups are then run *together*: at every depth the streams of all
groups unaffected there are concatenated along the batch and go through the block in one call; only the groups whose
intervention touches that depth run under their context. Streams concatenate when their non-tensor fields agree
(tensor streams, hyper-connection streams, MoDA's depth cache, attention-residual banks without a pending skip);
otherwise the groups run one after another, still from the shared prefix. Only plain tensor streams (the Pre-LN
family, hyper-connections, any Hub decoder) are batched: structured streams grow with depth, and concatenating them
at every depth was measured slower than running the groups one by one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class NotBatchable(Exception):
    """Streams of different intervention groups cannot be concatenated."""


# ================================================================================================ stream pytrees
def cat_streams(streams: list[Any]) -> Any:
    """Concatenate streams (tensors, tuples, NamedTuples of them) along the batch dimension."""
    first = streams[0]
    if torch.is_tensor(first):
        return torch.cat(streams, dim=0)
    if isinstance(first, tuple):
        if any(not isinstance(s, tuple) or len(s) != len(first) for s in streams):
            raise NotBatchable("tuple fields differ")
        fields = [cat_streams([s[k] for s in streams]) for k in range(len(first))]
        return type(first)(*fields) if hasattr(first, "_fields") else tuple(fields)
    if all(s == first for s in streams):
        return first
    raise NotBatchable(f"non-tensor stream fields differ: {streams!r}")


def split_stream(stream: Any, sizes: list[int]) -> list[Any]:
    """Inverse of :func:`cat_streams`."""
    if torch.is_tensor(stream):
        return list(torch.split(stream, sizes, dim=0))
    if isinstance(stream, tuple):
        parts = [split_stream(f, sizes) for f in stream]
        make = (lambda *a: type(stream)(*a)) if hasattr(stream, "_fields") else (lambda *a: tuple(a))
        return [make(*[p[g] for p in parts]) for g in range(len(sizes))]
    return [stream] * len(sizes)


def expand_batch(obj: Any, batch: int, factor: int) -> Any:
    """Repeat tensors whose first dim is ``batch`` ``factor`` times along it (layer kwargs of a merged batch)."""
    if factor == 1:
        return obj
    if torch.is_tensor(obj):
        return obj.repeat(factor, *([1] * (obj.dim() - 1))) if obj.dim() and obj.shape[0] == batch > 1 else obj
    if isinstance(obj, tuple):
        return type(obj)(expand_batch(o, batch, factor) for o in obj)
    if isinstance(obj, dict):
        return {k: expand_batch(v, batch, factor) for k, v in obj.items()}
    return obj


# ================================================================================================ adapter
@dataclass
class Trace:
    """One forward pass of the unmodified model on a micro-batch.

    Attributes:
        input_ids: [B, T].
        inputs: The stream entering each block (``inputs[l]`` for block l).
        output: The stream after the last block.
        layer_kwargs: Keyword arguments every block was called with (mask, position embeddings, ...).
        logits: The model's own output logits [B, T, V] (fp32).
    """

    input_ids: torch.Tensor
    inputs: list[Any]
    output: Any
    layer_kwargs: dict
    logits: torch.Tensor
    extra: dict = field(default_factory=dict)


class ModelAdapter:
    """Uniform access to a causal LM's blocks, states, readout and interventions.

    depthbench models answer through their wiring and intervention methods; other causal LMs with
    ``model.<base>.layers`` and ``model.<base>.norm`` (Llama, Mistral, Qwen, ...) fall back to per-layer rules.
    """

    def __init__(self, model: nn.Module):
        self.model = model
        base = getattr(model, getattr(model, "base_model_prefix", "model"), None)
        base = base if isinstance(base, nn.Module) else model
        if not hasattr(base, "layers"):
            raise ValueError(
                f"{type(model).__name__} has no decoder layer list (`model.{model.base_model_prefix}.layers`): "
                "the layer analyses need a depthbench model or a Llama-style causal LM"
            )
        self.base = base
        self.layers = base.layers
        self.wiring = getattr(base, "wiring", None)
        self.native = self.wiring is not None and hasattr(model, "skip_block") and hasattr(model, "swap_blocks")
        self.norm = getattr(base, "norm", None)
        self.lm_head = model.get_output_embeddings()
        self._owner: dict[int, int] | None = None
        self.unbatchable: set[str] = set()  # intervention kinds whose streams did not concatenate

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def family(self) -> str:
        return getattr(self.wiring, "family", "residual") if self.native else "residual"

    @property
    def name(self) -> str:
        return getattr(self.model.config, "model_type", type(self.model).__name__)

    # -------------------------------------------------------------------------------------------- forward pieces
    def call_layer(self, idx: int, stream: Any, kwargs: dict) -> Any:
        out = self.layers[idx](stream, **kwargs)
        if not self.native and isinstance(out, tuple) and not hasattr(out, "_fields"):
            out = out[0]
        return out

    def exit(self, stream: Any) -> torch.Tensor:
        """The final hidden state the LM head reads."""
        if self.native:
            return self.wiring.exit(stream, self.norm)
        return self.norm(stream)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()

    def depth_state(self, stream: Any, depth: int) -> torch.Tensor:
        """z_depth from the stream entering block ``depth`` (``depth == L``: the stream after the last block)."""
        if not self.native:
            return stream
        nxt = self.layers[depth] if depth < self.num_layers else None
        return self.wiring.depth_state(stream, nxt)

    def lens_hidden(self, stream: Any) -> torch.Tensor:
        """The final hidden state the model's own readout makes of ``stream`` (logit lens; study §logit lens).

        depthbench wirings define it (``Wiring.lens_hidden``: their ``exit``, or for attention residuals the norm of
        the next consumer's raw mix); for the last stream it is exactly what the LM head reads."""
        if not self.native:
            return self.norm(stream)
        lens = getattr(self.wiring, "lens_hidden", None)
        return lens(stream, self.norm) if lens is not None else self.wiring.exit(stream, self.norm)

    def stream_tensor(self, stream: Any) -> torch.Tensor | None:
        """The stream as one [B, T, ...] tensor when it is a plain tensor (else ``None``: a structured stream)."""
        return stream if torch.is_tensor(stream) else None

    @torch.no_grad()
    def trace(self, input_ids: torch.Tensor) -> Trace:
        """Run the unmodified model once and record the stream entering every block and leaving the last."""
        inputs: list[Any] = [None] * self.num_layers
        kwargs_box: dict = {}
        out_box: list[Any] = []
        handles = []

        def pre_hook(idx):
            def hook(module, args, kwargs):
                inputs[idx] = args[0] if args else kwargs.get("hidden_states", kwargs.get("stream"))
                if idx == 0:
                    kw = dict(kwargs)
                    kw.pop("hidden_states", None)
                    kw.pop("stream", None)
                    kwargs_box.update(kw)
            return hook

        def last_hook(module, args, kwargs, output):
            out_box.append(output[0] if (not self.native and isinstance(output, tuple)
                                         and not hasattr(output, "_fields")) else output)

        for idx, layer in enumerate(self.layers):
            handles.append(layer.register_forward_pre_hook(pre_hook(idx), with_kwargs=True))
        handles.append(self.layers[-1].register_forward_hook(last_hook, with_kwargs=True))
        try:
            out = self.model(input_ids=input_ids, use_cache=False)
        finally:
            for h in handles:
                h.remove()
        kwargs_box.pop("use_cache", None)
        if "cache" in kwargs_box:
            kwargs_box["cache"] = None
        if "past_key_values" in kwargs_box:
            kwargs_box["past_key_values"] = None
        return Trace(input_ids, inputs, out_box[0], kwargs_box, out.logits.float())

    def depth_states(self, trace: Trace) -> list[torch.Tensor]:
        """z_0..z_L of a trace."""
        states = [self.depth_state(s, d) for d, s in enumerate(trace.inputs)]
        return states + [self.depth_state(trace.output, self.num_layers)]

    # -------------------------------------------------------------------------------------------- interventions
    @contextlib.contextmanager
    def skip(self, index: int) -> Iterator[None]:
        """Block ``index`` contributes nothing (depthbench: ``model.skip_block``; else the layer returns its input)."""
        if self.native:
            with self.model.skip_block(index):
                yield
            return
        layer = self.layers[index]
        layer.forward = lambda hidden_states, *args, **kwargs: hidden_states
        try:
            yield
        finally:
            del layer.forward

    @contextlib.contextmanager
    def swap(self, i: int, j: int) -> Iterator[None]:
        """Blocks ``i`` and ``j`` exchange parameters (depthbench: ``model.swap_blocks``); restored on exit."""
        if self.native:
            with self.model.swap_blocks(i, j):
                yield
            return
        pairs = [(self.layers[i], self.layers[j])] if i != j else []
        _swap_same_named(pairs)
        try:
            yield
        finally:
            _swap_same_named(pairs)

    def swap_depths(self, i: int, j: int) -> set[int]:
        """Depths whose computation ``swap(i, j)`` changes (``L`` = the final readout)."""
        if not self.native:
            return {i, j}
        if self._owner is None:
            self._owner = {}
            for k, layer in enumerate(self.layers):
                for m in layer.modules():
                    self._owner[id(m)] = k
        depths = {i, j}
        for a, b in self.wiring.swap_pairs(self.base, i, j):
            for m in (a, b):
                depths.add(self._owner.get(id(m), self.num_layers))
        return depths


@torch.no_grad()
def _swap_same_named(pairs: list[tuple[nn.Module, nn.Module]]) -> None:
    for a, b in pairs:
        tb = dict(b.named_parameters()) | dict(b.named_buffers())
        for name, ta in list(a.named_parameters()) + list(a.named_buffers()):
            other = tb.get(name)
            if other is not None and other.shape == ta.shape and other is not ta:
                tmp = ta.detach().clone()
                ta.copy_(other)
                other.copy_(tmp)


# ================================================================================================ losses
def token_losses(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy per position [B, T-1] (fp32)."""
    return F.cross_entropy(
        logits[:, :-1].float().flatten(0, 1), input_ids[:, 1:].flatten(), reduction="none"
    ).view(input_ids.shape[0], -1)


# ================================================================================================ batched groups
@dataclass
class Group:
    """One intervention: starts at depth ``start`` from the unmodified stream there; at the depths in ``special``
    (``L`` = the final readout) its rows run under ``context()``."""

    start: int
    special: set[int]
    context: Callable[[], contextlib.AbstractContextManager]
    key: Any = None
    kind: str = ""


@dataclass
class GroupResult:
    key: Any
    logits: torch.Tensor
    states: dict[int, torch.Tensor] = field(default_factory=dict)


def run_groups(adapter: ModelAdapter, trace: Trace, groups: list[Group], *, batched: bool = True,
               want_states: bool = False) -> list[GroupResult]:
    """Evaluate intervention groups on one traced micro-batch, sharing the unmodified prefix.

    Returns per group the logits [B, T, V] and (``want_states``) the depth states z_{start+1}..z_L.
    """
    kinds = {g.kind for g in groups}
    # Structured streams (AttnRes banks, MoDA depth caches, DenseFormer histories) carry every earlier source:
    # concatenating them at every depth costs more than it saves (measured), so they run one group at a time.
    if not batched or kinds & adapter.unbatchable or not torch.is_tensor(trace.inputs[0]):
        return [_run_one(adapter, trace, g, want_states) for g in groups]
    L, bsz = adapter.num_layers, trace.input_ids.shape[0]
    streams: dict[int, Any] = {}
    states: list[dict[int, torch.Tensor]] = [{} for _ in groups]
    kw_cache: dict[int, dict] = {}

    def kwargs_for(n_groups: int) -> dict:
        if n_groups not in kw_cache:
            kw_cache[n_groups] = expand_batch(trace.layer_kwargs, bsz, n_groups)
        return kw_cache[n_groups]

    try:
        for depth in range(L):
            for g, grp in enumerate(groups):
                if grp.start == depth:
                    streams[g] = trace.inputs[depth]
            active = sorted(streams)
            normal = [g for g in active if depth not in groups[g].special]
            for g in active:
                if depth in groups[g].special:
                    with groups[g].context():
                        streams[g] = adapter.call_layer(depth, streams[g], kwargs_for(1))
            if normal:
                merged = cat_streams([streams[g] for g in normal])
                out = adapter.call_layer(depth, merged, kwargs_for(len(normal)))
                for g, part in zip(normal, split_stream(out, [bsz] * len(normal))):
                    streams[g] = part
            if want_states:
                for g in active:
                    states[g][depth + 1] = adapter.depth_state(streams[g], depth + 1)
    except NotBatchable:  # remembered per intervention kind: later micro-batches go straight to one-by-one
        adapter.unbatchable |= kinds
        return [_run_one(adapter, trace, g, want_states) for g in groups]
    results = []
    normal = [g for g in range(len(groups)) if L not in groups[g].special]
    if normal:
        hidden = adapter.exit(cat_streams([streams[g] for g in normal]))
        logits = adapter.head(hidden).split(bsz, dim=0)
        by_group = dict(zip(normal, logits))
    else:
        by_group = {}
    for g, grp in enumerate(groups):
        if g not in by_group:
            with grp.context():
                by_group[g] = adapter.head(adapter.exit(streams[g]))
        results.append(GroupResult(grp.key, by_group[g], states[g]))
    return results


def _run_one(adapter: ModelAdapter, trace: Trace, grp: Group, want_states: bool) -> GroupResult:
    """One group alone, from its shared prefix, under its context for the whole suffix (no batching)."""
    L = adapter.num_layers
    stream = trace.inputs[grp.start]
    states: dict[int, torch.Tensor] = {}
    with grp.context():
        for depth in range(grp.start, L):
            stream = adapter.call_layer(depth, stream, trace.layer_kwargs)
            if want_states:
                states[depth + 1] = adapter.depth_state(stream, depth + 1)
        logits = adapter.head(adapter.exit(stream))
    return GroupResult(grp.key, logits, states)


def chunked(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), max(1, size)):
        yield items[i : i + size]
