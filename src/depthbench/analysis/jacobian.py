"""Jacobian deviation (arXiv 2609.32534, layer analyses): how far each block is from the identity map.

``per_token`` (default): for sampled positions t of every window, the block's per-token Jacobian
``J_t = d y[t] / d x[t]`` (D x D, D = the stream width, n*d for hyper-connections) is computed exactly in fp32 with
one vector-Jacobian product per output channel, and the metric is ``mean_t ||J_t - I||_F / sqrt(D)``. Norms are
taken per token before averaging.

``averaged_total`` (the reference's quantity, for comparison): a cotangent equal to 1 at channel k at *every*
position, averaged over positions, gives ``Jbar[k, :] = mean_p sum_q d y[q, k] / d x[p, :]`` (cross-token attention
terms included, averaged before the norm, so terms can cancel); metric ``||Jbar - I||_F / sqrt(D)``.

Cost: per sampled token one backward pass of the block over D replicas of its prefix (per token), or D backward
passes per micro-batch (averaged); by default 4 positions in each of the first 4 windows. A stream wider than
``max_dim`` is refused unless forced. Defined for architectures whose block maps one state tensor to one state
tensor; structured streams (attention-residual banks, MoDA's depth cache, DenseFormer's history) are refused.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .common import AnalysisContext, MetricResult, NotApplicable, line_plot
from .state import expand_batch

METRIC_ID = "jacobian"
MODES = ("per_token", "averaged_total")
MAX_DIM = 4096


def _slice_tokens(obj, seq_len: int, keep: int):
    """Layer kwargs cut to the first ``keep`` tokens: every tensor dim (after the batch dim) of size ``seq_len``."""
    if torch.is_tensor(obj):
        for dim in range(1, obj.dim()):
            if obj.shape[dim] == seq_len:
                obj = obj.narrow(dim, 0, keep)
        return obj
    if isinstance(obj, tuple):
        return type(obj)(_slice_tokens(o, seq_len, keep) for o in obj)
    if isinstance(obj, dict):
        return {k: _slice_tokens(v, seq_len, keep) for k, v in obj.items()}
    return obj


def _rows_grad(adapter, blk: int, x: torch.Tensor, kwargs: dict, cot: torch.Tensor) -> torch.Tensor:
    """d<y, cot>/dx for a batch of rows [R, t, ...] (each row its own copy, so rows never mix), fp32."""
    x = x.detach().float().requires_grad_(True)
    with torch.autocast(x.device.type, enabled=False), torch.enable_grad():
        y = adapter.call_layer(blk, x, kwargs)
        return torch.autograd.grad(y, x, cot.view_as(y))[0]


def block_jacobians(adapter, blk: int, x: torch.Tensor, kwargs: dict, positions: list[int], max_rows: int = 256,
                    tick=None) -> torch.Tensor:
    """Per-token Jacobians [B, P, D, D] of block ``blk`` at ``positions``, exact, fp32 with autocast off.

    For window b and position t the block runs on the first t+1 tokens only (causal: later tokens cannot matter),
    replicated once per output channel k; row k's cotangent is e_k at position t, so one backward returns the
    whole D x D Jacobian with every other position held fixed (no cross-token terms, nothing averaged).
    ``tick()`` is called after each (window, position)."""
    b, seq = x.shape[:2]
    d = x[0, 0].numel()
    out = torch.zeros(b, len(positions), d, d, device=x.device)
    for p, t in enumerate(positions):
        for w in range(b):
            kw = _slice_tokens(_select_window(kwargs, b, w), seq, t + 1)
            for k0 in range(0, d, max_rows):
                ks = torch.arange(k0, min(d, k0 + max_rows), device=x.device)
                prefix = x[w : w + 1, : t + 1]
                rows = prefix.expand(len(ks), *prefix.shape[1:]).contiguous()
                cot = torch.zeros(len(ks), t + 1, d, device=x.device)
                cot[torch.arange(len(ks)), t, ks] = 1.0
                grad = _rows_grad(adapter, blk, rows, kw, cot)
                out[w, p, k0 : k0 + len(ks)] = grad[:, t].reshape(len(ks), d)
            if tick is not None:
                tick()
    return out


def averaged_total_jacobian(adapter, blk: int, x: torch.Tensor, kwargs: dict, max_rows: int = 256) -> torch.Tensor:
    """The reference's ``Jbar`` [D, D] summed over the micro-batch's positions (divide by the position count):
    cotangent 1 at channel k at every position, input gradients summed over positions."""
    b = x.shape[0]
    d = x[0, 0].numel()
    per = max(1, max_rows // b)
    rows_out = []
    for k0 in range(0, d, per):
        ks = list(range(k0, min(d, k0 + per)))
        rows = x.repeat(len(ks), *([1] * (x.dim() - 1)))  # [K*B, T, ...], group c = channel ks[c]
        cot = torch.zeros(len(ks), b, x.shape[1], d, device=x.device)
        for c, k in enumerate(ks):
            cot[c, :, :, k] = 1.0
        grad = _rows_grad(adapter, blk, rows, _expand_kwargs(kwargs, b, len(ks)), cot)
        rows_out.append(grad.reshape(len(ks), -1, d).sum(1))
    return torch.cat(rows_out)


def _expand_kwargs(kwargs: dict, batch: int, factor: int) -> dict:
    return expand_batch(kwargs, batch, factor)


def _select_window(obj, batch: int, w: int):
    """Layer kwargs of window ``w`` alone (tensors whose first dim is the batch keep row w)."""
    if torch.is_tensor(obj):
        return obj[w : w + 1] if obj.dim() and obj.shape[0] == batch > 1 else obj
    if isinstance(obj, tuple):
        return type(obj)(_select_window(o, batch, w) for o in obj)
    if isinstance(obj, dict):
        return {k: _select_window(v, batch, w) for k, v in obj.items()}
    return obj


def _check_stream(adapter, stream, max_dim: int, force: bool) -> int:
    """The stream width D, or NotApplicable for a structured stream or (unless ``force``) a width over ``max_dim``."""
    if adapter.stream_tensor(stream) is None:
        raise NotApplicable(
            f"the Jacobian deviation needs a block that maps one state tensor to one state tensor; {adapter.name} "
            f"carries a structured stream ({type(stream).__name__}) between blocks")
    dim = stream[0, 0].numel()
    if dim > max_dim and not force:
        raise NotApplicable(f"stream width D={dim} exceeds the Jacobian size limit {max_dim} "
                            f"({dim} backward passes per position per block); raise --jacobian-max-dim to force")
    return dim


def run(ctx: AnalysisContext, mode: str = "per_token", positions: int = 4, windows: int | None = 4,
        max_dim: int = MAX_DIM, force: bool = False) -> MetricResult:
    """``positions`` sampled tokens in each of the first ``windows`` windows (``None``: all windows).

    Progress: one step per per-token Jacobian (window, position, block) with an ETA, or per block and micro-batch
    for ``averaged_total``."""
    if mode not in MODES:
        raise ValueError(f"jacobian mode {mode!r} unknown; choose one of {list(MODES)}")
    a = ctx.adapter
    L = a.num_layers
    sums, count = np.zeros(L), 0
    jbar = [None] * L
    rng = np.random.default_rng(ctx.window_spec.seed)
    model_dtype = next(ctx.model.parameters()).dtype
    if model_dtype != torch.float32:
        raise ValueError(f"the Jacobian runs in fp32; the model is loaded in {model_dtype} (load it in float32)")
    used = len(ctx.windows) if windows is None else min(windows, len(ctx.windows))
    batches = [ids[: used - k] for k, ids in zip(range(0, used, ctx.micro_batch_size), ctx.batches())]
    per_window = min(positions, ctx.windows.shape[1])
    total = used * per_window * L if mode == "per_token" else len(batches) * L
    with ctx.bar(None, f"jacobian ({mode})", total, unit="jacobian" if mode == "per_token" else "block") as bar:
        for ids in batches:
            with torch.no_grad():
                trace = a.trace(ids)
            dim = _check_stream(a, trace.inputs[0], max_dim, force)
            b, t = ids.shape
            pos = sorted(rng.choice(t, size=per_window, replace=False).tolist())
            for blk in range(L):
                bar.set_postfix(block=blk, refresh=False)
                if mode == "per_token":
                    jac = block_jacobians(a, blk, trace.inputs[blk], trace.layer_kwargs, pos, tick=bar.update)
                    eye = torch.eye(dim, device=jac.device)
                    sums[blk] += float((torch.linalg.matrix_norm(jac - eye) / math.sqrt(dim)).sum())
                else:
                    s = averaged_total_jacobian(a, blk, trace.inputs[blk], trace.layer_kwargs)
                    jbar[blk] = s if jbar[blk] is None else jbar[blk] + s
                    bar.update()
            count += b * (len(pos) if mode == "per_token" else t)
    if mode == "per_token":
        dev = sums / count
    else:
        dim = jbar[0].shape[0]
        eye = torch.eye(dim, device=jbar[0].device)
        dev = np.array([float(torch.linalg.matrix_norm(j / count - eye) / math.sqrt(dim)) for j in jbar])
    rows = [{"layer": blk, "jacobian_deviation": dev[blk]} for blk in range(L)]
    values = {"mode": mode, "deviation": dev, "mean": float(dev.mean()), "windows": used,
              "positions_per_window": positions if mode == "per_token" else None, "tokens": count}
    return MetricResult(METRIC_ID, values, rows)


def plot(result: MetricResult, path: str) -> bool:
    v = result.values
    return line_plot(list(range(len(v["deviation"]))), {v["mode"]: v["deviation"]}, path,
                     f"Jacobian deviation ||J - I||_F / sqrt(D) ({v['mode']})", "block", "deviation")
