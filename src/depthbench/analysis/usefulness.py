"""Usefulness score (arXiv 2609.32534, layer analyses): how much is lost when a block is replaced by its best affine
approximation.

For each block l, an affine map ``y ~ W x + b`` is fitted by least squares (fp64 normal equations) and the block is
replaced by it; ``loss_increase = L_lin - L``, ``loss_ratio = L_lin / L``, significant iff ratio > 1.1.

Fitted and scored on different tokens: the map is fitted on every other window (windows 0, 2, 4, ...) and both
losses are measured on the others (1, 3, 5, ...). A fit needs at least D + 1 tokens (D = the width of x, plus the
bias) or it interpolates the fitting tokens; the reference scripts fitted and scored on the same tokens, so an
under-determined fit scored a loss increase of 0 by construction. Fewer fitting tokens than D + 1 are refused
(the message says how many windows are needed); the values record ``fit_tokens``, ``fit_unknowns`` and
``score_tokens``. What x and y are is decided by the stream the architecture carries, so the score works for every
architecture (the reference's version treated hyper-connection streams as extra batch rows and could not return the
structured state attention residuals and MoDA pass on):

* a tensor stream (Pre-LN family, Post-LN, DeepNorm, KEEL, hyper-connections with their n streams flattened to one
  n*d vector, a plain Llama): x = the block's input stream, y = its output stream, the whole block is replaced;
* a structured stream (attention residuals' source bank, MoDA's depth cache, DenseFormer's history): x = the
  block's depth state (``Wiring.depth_state``), y = its two branch outputs (attention, MLP); the branches are
  replaced and the architecture's own wiring stores them in its bank/cache exactly as it stores real outputs.
"""

from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
import torch

from .common import AnalysisContext, MetricResult, NeedsMoreData, line_plot
from .state import Group, chunked, run_groups, token_losses

METRIC_ID = "usefulness"
SIGNIFICANT_RATIO = 1.1


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, int(np.prod(t.shape[2:]))).double()


def _with_bias(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)], dim=1)


class _Collector:
    """Per block: sums of x^T x and x^T y (fp64) over tokens."""

    def __init__(self, L: int):
        self.xtx = [None] * L
        self.xty = [None] * L

    def add(self, blk: int, x: torch.Tensor, y: torch.Tensor) -> None:
        xb = _with_bias(x)
        xtx, xty = xb.T @ xb, xb.T @ y.double()
        self.xtx[blk] = xtx if self.xtx[blk] is None else self.xtx[blk] + xtx
        self.xty[blk] = xty if self.xty[blk] is None else self.xty[blk] + xty

    def solve(self, blk: int) -> torch.Tensor:
        """[D_in + 1, D_out] least-squares solution (minimum norm where under-determined)."""
        return torch.linalg.pinv(self.xtx[blk], hermitian=True, rtol=1e-12) @ self.xty[blk]


def _branch_modules(adapter, blk: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    layer = adapter.layers[blk]
    return layer.self_attn, layer.mlp


@contextlib.contextmanager
def _structured_capture(adapter, col: _Collector):
    """Hooks that record x (block depth state) and y (attention, MLP outputs) of every block during a trace."""
    handles, xs, outs = [], {}, {}
    for blk in range(adapter.num_layers):
        attn, mlp = _branch_modules(adapter, blk)

        def pre(module, args, kwargs, blk=blk):
            xs[blk] = adapter.depth_state(args[0], blk)

        def on_attn(module, args, output, blk=blk):
            outs[(blk, 0)] = output[0] if isinstance(output, tuple) else output

        def on_mlp(module, args, output, blk=blk):
            outs[(blk, 1)] = output

        handles += [adapter.layers[blk].register_forward_pre_hook(pre, with_kwargs=True),
                    attn.register_forward_hook(on_attn), mlp.register_forward_hook(on_mlp)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
    for blk in range(adapter.num_layers):
        y = torch.cat([outs[(blk, 0)], outs[(blk, 1)]], dim=-1)
        col.add(blk, _flat(xs[blk]), _flat(y))


@contextlib.contextmanager
def _replace_tensor_block(adapter, blk: int, w: torch.Tensor):
    layer = adapter.layers[blk]

    def affine(stream, *args, **kwargs):
        y = _with_bias(_flat(stream)) @ w
        return y.to(stream.dtype).view(stream.shape)

    layer.forward = affine
    try:
        yield
    finally:
        del layer.forward


@contextlib.contextmanager
def _replace_branches(adapter, blk: int, w: torch.Tensor):
    attn, mlp = _branch_modules(adapter, blk)
    pred = {}

    def pre(module, args, kwargs):
        x = adapter.depth_state(args[0], blk)
        y = _with_bias(_flat(x)) @ w
        a, m = y.to(x.dtype).view(*x.shape[:2], -1).chunk(2, dim=-1)
        pred["a"], pred["m"] = a, m

    def on_attn(module, args, output):
        return (pred["a"], *output[1:]) if isinstance(output, tuple) else pred["a"]

    def on_mlp(module, args, output):
        return pred["m"]

    handles = [adapter.layers[blk].register_forward_pre_hook(pre, with_kwargs=True),
               attn.register_forward_hook(on_attn), mlp.register_forward_hook(on_mlp)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def split_windows(windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fitting windows, scoring windows): every other window, starting with window 0 for the fit."""
    return windows[0::2], windows[1::2]


def check_fit(ctx: AnalysisContext) -> int:
    """The number of unknowns per output channel of the fit (D + 1), or ValueError when the fitting windows have
    fewer tokens than that (the message names the windows needed); one short trace of one window finds D."""
    a = ctx.adapter
    with torch.no_grad(), ctx.autocast():
        stream = a.trace(next(ctx.batches(ctx.windows[:1, :2]))).inputs[0]
    x = stream if a.stream_tensor(stream) is not None else a.depth_state(stream, 0)
    unknowns = int(np.prod(x.shape[2:])) + 1
    fit, score = split_windows(ctx.windows)
    seq = ctx.windows.shape[1]
    if fit.size < unknowns or len(score) == 0:
        need = max(2, 2 * math.ceil(unknowns / seq) - 1)
        raise NeedsMoreData(
            f"usefulness fits an affine map with {unknowns} unknowns per output channel (stream width "
            f"{unknowns - 1} plus a bias) on every other window and scores it on the others: it needs at least "
            f"{unknowns} tokens to fit, the {len(ctx.windows)} windows of {seq} tokens give {fit.size}; pass "
            f"--num-samples {need} or more at --seq-len {seq} (or leave usefulness out of --metrics)")
    return unknowns


def check(ctx: AnalysisContext, **_) -> None:
    """ValueError when the windows are too few for the fit (before anything is computed)."""
    check_fit(ctx)


def fit_maps(ctx: AnalysisContext, windows: np.ndarray) -> tuple[list[torch.Tensor], bool]:
    """Least-squares affine maps [D_in + 1, D_out] of every block on ``windows``, and whether the stream is a tensor."""
    a = ctx.adapter
    col = _Collector(a.num_layers)
    tensor_stream = None
    for ids in ctx.bar(ctx.batches(windows), "usefulness: fit", ctx.count_batches(windows)):
        with torch.no_grad(), ctx.autocast():
            trace = a.trace(ids)
            tensor_stream = a.stream_tensor(trace.inputs[0]) is not None
            if tensor_stream:
                streams = list(trace.inputs) + [trace.output]
                for blk in range(a.num_layers):
                    col.add(blk, _flat(streams[blk]), _flat(streams[blk + 1]))
            else:
                with _structured_capture(a, col):
                    a.trace(ids)
    return [col.solve(blk).to(ctx.device) for blk in range(a.num_layers)], tensor_stream


def replaced_losses(ctx: AnalysisContext, weights: list[torch.Tensor], tensor_stream: bool, windows: np.ndarray
                    ) -> tuple[float, list[float], int]:
    """Mean next-token loss on ``windows`` of the unmodified model and with each block replaced; the token count."""
    a = ctx.adapter
    L = a.num_layers
    replace = _replace_tensor_block if tensor_stream else _replace_branches
    base_sum, sums, count = 0.0, [0.0] * L, 0
    for trace in ctx.traces("usefulness: replace", windows):
        base_sum += float(token_losses(trace.logits, trace.input_ids).sum())
        count += trace.input_ids.shape[0] * (trace.input_ids.shape[1] - 1)
        with torch.no_grad(), ctx.autocast():
            for chunk in chunked(list(range(L)), ctx.group_batch):
                groups = [Group(blk, {blk}, (lambda blk=blk: replace(a, blk, weights[blk])), blk, "affine")
                          for blk in chunk]
                for res in run_groups(a, trace, groups, batched=ctx.batched):
                    sums[res.key] += float(token_losses(res.logits, trace.input_ids).sum())
    return base_sum / count, [s / count for s in sums], count


def run(ctx: AnalysisContext, significant_ratio: float = SIGNIFICANT_RATIO) -> MetricResult:
    L = ctx.adapter.num_layers
    unknowns = check_fit(ctx)
    fit, score = split_windows(ctx.windows)
    if fit.size < 2 * unknowns:
        warnings.warn(f"usefulness: {fit.size} fitting tokens for {unknowns} unknowns; the held-out loss increase "
                      "includes the error of a barely determined fit (several times more tokens are better)",
                      stacklevel=2)
    weights, tensor_stream = fit_maps(ctx, fit)
    base, lin, score_tokens = replaced_losses(ctx, weights, tensor_stream, score)
    rows = [{"layer": blk, "loss_linear": lin[blk], "loss_increase": lin[blk] - base, "loss_ratio": lin[blk] / base,
             "significant": lin[blk] / base > significant_ratio} for blk in range(L)]
    values = {
        "base_loss": base,
        "replacement": "whole block (tensor stream)" if tensor_stream else "branch outputs (structured stream)",
        "split": "fitted on windows 0, 2, 4, ...; scored on windows 1, 3, 5, ...",
        "fit_tokens": int(fit.size), "fit_unknowns": unknowns, "score_tokens": score_tokens,
        "loss_increase": [r["loss_increase"] for r in rows],
        "loss_ratio": [r["loss_ratio"] for r in rows],
        "significant_ratio": significant_ratio,
        "significant_fraction": float(np.mean([r["significant"] for r in rows])),
        "mean_increase": float(np.mean([r["loss_increase"] for r in rows])),
        "mean_ratio": float(np.mean([r["loss_ratio"] for r in rows])),
    }
    return MetricResult(METRIC_ID, values, rows)


def plot(result: MetricResult, path: str) -> bool:
    v = result.values
    return line_plot(list(range(len(v["loss_increase"]))), {"loss increase": v["loss_increase"]}, path,
                     f"usefulness: loss increase under an affine block (base {v['base_loss']:.3f})", "block",
                     "L_linear - L", bar=True)
