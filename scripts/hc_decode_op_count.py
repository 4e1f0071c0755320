"""Count the aten calls of one cached decode step, per sublayer, for hyper-connection models vs ``pre_ln``.

A decode step (one new token, KV cache) is dispatch-bound: every aten call costs microseconds whatever its size, so
the number of calls is a deterministic proxy of decode speed. This script builds ``pre_ln`` and the requested
architectures at one shape, prefills a random prompt, then counts (``TorchDispatchMode``) the aten calls of the next
one-token forward under ``torch.no_grad()``: in total, and inside each sublayer's residual module (its norm and
branch included; ``overhead`` is that count minus ``pre_ln``'s)::

    python scripts/hc_decode_op_count.py --arch hc,mhc --shape d256-L16 --batch 1
    python scripts/hc_decode_op_count.py --arch mhc --perturb 0.1   # random mixing parameters (a "trained" model)
    python scripts/hc_decode_op_count.py --differentiable           # the fast paths off: the counts before them

``--perturb s`` adds N(0, s²) noise to every residual-module parameter (gates, static maps, projections), so the
maps are input dependent and far from their init (mHC's Sinkhorn then needs more iterations to converge).
"""

from __future__ import annotations

import argparse
from collections import Counter

import torch
from depthbench.modeling.modeling_depthbench import _CACHE_FIELD
from torch.utils._python_dispatch import TorchDispatchMode

from depthbench.bench.models import build_models
from depthbench.bench.settings import BenchSettings


class CountOps(TorchDispatchMode):
    """Counts every aten call (views and scalar reads included) while active."""

    def __init__(self):
        super().__init__()
        self.total = 0
        self.names: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.total += 1
        self.names[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def count_decode_step(model: torch.nn.Module, batch: int, prompt_len: int, seed: int = 0) -> dict:
    """Aten calls of one cached one-token forward: ``total``, ``per_sublayer`` (mean over the residual modules) and
    ``names`` (a Counter over the sublayers' calls)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, model.config.vocab_size, (batch, prompt_len + 1), generator=generator)
    residuals = [m for layer in model.model.layers for m in (layer.attn_residual, layer.mlp_residual)]
    with torch.no_grad():
        out = model(input_ids=ids[:, :-1], use_cache=True)
        cache = getattr(out, _CACHE_FIELD)
        mode = CountOps()
        inside = {"ops": 0, "names": Counter()}
        starts = {}

        def pre(module, args):
            starts[id(module)] = (mode.total, Counter(mode.names))

        def post(module, args, result):
            total, names = starts.pop(id(module))
            inside["ops"] += mode.total - total
            inside["names"].update(mode.names - names)

        hooks = [m.register_forward_pre_hook(pre) for m in residuals]
        hooks += [m.register_forward_hook(post) for m in residuals]
        try:
            with mode:
                model(input_ids=ids[:, -1:], use_cache=True, **{_CACHE_FIELD: cache})
        finally:
            for h in hooks:
                h.remove()
    return {"total": mode.total, "per_sublayer": inside["ops"] / len(residuals), "names": inside["names"],
            "sublayers": len(residuals)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", default="hc,mhc")
    p.add_argument("--shape", default="d256-L16")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--perturb", type=float, default=0.0)
    p.add_argument("--differentiable", action="store_true",
                   help="switch the HC/mHC no-autograd fast paths off (the counts before them)")
    p.add_argument("--names", action="store_true", help="also list the sublayers' calls by aten op")
    args = p.parse_args(argv)
    if args.differentiable:
        from depthbench.modeling import modeling_hc, modeling_mhc

        modeling_hc.inference_fast_path = modeling_mhc.inference_fast_path = lambda module: False
    names = ["pre_ln"] + [a for a in args.arch.split(",") if a and a != "pre_ln"]
    settings = BenchSettings(shape=args.shape, prompt_len=args.prompt_len, decode_tokens=1)
    models = build_models(names, settings)
    torch.manual_seed(0)
    base = None
    print(f"# aten calls of one cached decode step, shape {args.shape}, batch {args.batch}, perturb {args.perturb}")
    print(f"{'model':8} {'total':>7} {'per sublayer':>13} {'overhead':>9}")
    for name, model in models.items():
        model.eval()
        if args.perturb:
            with torch.no_grad():
                for layer in model.model.layers:
                    for m in (layer.attn_residual, layer.mlp_residual):
                        for param in m.parameters():
                            param.add_(torch.randn_like(param) * args.perturb)
        counts = count_decode_step(model, args.batch, args.prompt_len)
        base = counts["per_sublayer"] if base is None else base
        print(f"{name:8} {counts['total']:7d} {counts['per_sublayer']:13.1f} {counts['per_sublayer'] - base:9.1f}")
        if args.names:
            for op, k in sorted(counts["names"].items(), key=lambda kv: -kv[1]):
                print(f"    {op:32} {k / counts['sublayers']:6.1f}")


if __name__ == "__main__":
    main()
