"""Count the aten calls of one cached greedy decode step, per architecture.

A decode step (one new token per sequence, the KV cache holding the prompt) is dispatch-bound on CPU and at small
shapes on GPU: each aten call costs microseconds whatever its size. The count is deterministic, so it shows the
effect of a no-autograd fast path without timing noise::

    python scripts/decode_op_count.py --arch pre_ln,attnres,block_attnres,moda,peri_ln --shape d256-L16
    python scripts/decode_op_count.py --arch attnres --shape d256-L16 --top 15   # the most frequent ops

Counts every aten op dispatched (``TorchDispatchMode``) during ``model(input_ids=[B, 1], cache=...)`` under
``torch.no_grad()`` after a prefill of ``--prompt-len`` tokens.
"""

from __future__ import annotations

import argparse
import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _Counter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def count_decode_step(model: torch.nn.Module, batch_size: int, prompt_len: int, seed: int = 0) -> collections.Counter:
    """aten op name -> number of calls in one cached decode step of ``model`` (eval, no autograd)."""
    from transformers import DynamicCache

    model.eval()
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, vocab, (batch_size, prompt_len), generator=generator)
    mask = torch.ones(batch_size, prompt_len + 1, dtype=torch.long)
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        out = model(input_ids=prompt, attention_mask=mask[:, :-1], cache=cache, use_cache=True)
        token = out.logits[:, -1:].argmax(-1)
        position_ids = torch.full((batch_size, 1), prompt_len)
        model(input_ids=token, attention_mask=mask, cache=cache, position_ids=position_ids, use_cache=True)  # warm
        cache.crop(-1)  # drop the warm-up token again
        counter = _Counter()
        with counter:
            model(input_ids=token, attention_mask=mask, cache=cache, position_ids=position_ids, use_cache=True)
    return counter.ops


def main(argv: list[str] | None = None) -> None:
    from depthbench.bench.shapes import parse_bench_shape
    from depthbench.registry import build_model, resolve_archs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="pre_ln,attnres,block_attnres,moda,peri_ln")
    parser.add_argument("--shape", default="d256-L16", help="d<width>-L<depth> or a named shape")
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--top", type=int, default=0, help="also list the N most frequent ops per architecture")
    args = parser.parse_args(argv)
    fields = dict(parse_bench_shape(args.shape, 1, 128, 8192).fields)
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    print(f"aten calls per cached decode step at {args.shape} (prompt {args.prompt_len})")
    print(f"{'arch':<16}" + "".join(f"{'bs' + str(bs):>8}" for bs in sizes))
    for name in resolve_archs(args.arch):
        torch.manual_seed(0)
        model = build_model(name, **fields)
        counts = [count_decode_step(model, bs, args.prompt_len) for bs in sizes]
        print(f"{name:<16}" + "".join(f"{sum(c.values()):>8}" for c in counts))
        if args.top:
            for op, n in counts[0].most_common(args.top):
                print(f"    {n:>6}  {op}")


if __name__ == "__main__":
    main()
