"""``depthbench upcycle``: a pretrained Llama-family model as a depthbench checkpoint of any architecture.

    depthbench upcycle HuggingFaceTB/SmolLM2-135M -o smollm2-hc --arch hc
    depthbench upcycle ./smollm2 --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf -o smollm2-hc-L36 --arch hc --grow-depth 6
    depthbench upcycle ./llama -o llama-attnres --arch attnres --set attnres_mix_eps=1e-9
    depthbench upcycle ./llama -o llama-postln --arch post_ln --allow-function-change

The library is :func:`depthbench.upcycle.upcycle`; docs/upcycling.md explains every start.
"""

from __future__ import annotations

import argparse
import json

from depthbench.upcycle.sources import FAMILIES, UpcycleError

_DTYPES = ("float32", "bfloat16", "float16")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"--grow-depth {text!r} is not allowed: the number of new blocks must be a "
                                         "positive integer")
    return value


def _overrides(items: list[str]) -> dict:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UpcycleError(f"--set {item!r} is not allowed: write FIELD=VALUE (e.g. attnres_mix_eps=1e-9)")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def starts_table() -> str:
    """One line per registered architecture: its start and why (from the architecture's own config class)."""
    from depthbench.registry import ARCHITECTURES

    lines = []
    for arch_id, spec in ARCHITECTURES.items():
        cls = spec.config_class
        knob = f" [knob: {cls.upcycle_knob}]" if cls.upcycle_knob else ""
        lines.append(f"  {arch_id:<14} {cls.upcycle_start:<8} {cls.upcycle_reason}{knob}")
    return "\n".join(lines)


def _cmd_upcycle(args: argparse.Namespace) -> int:
    from depthbench.upcycle.checkpoint import check_output
    from depthbench.upcycle.core import upcycle

    check_output(args.output, args.overwrite)  # before any loading: a bad folder costs nothing
    result = upcycle(args.source, args.arch, grow_depth=args.grow_depth or 0, grow_mode=args.grow_mode,
                     dtype=args.dtype, allow_function_change=args.allow_function_change,
                     overrides=_overrides(args.set), revision=args.revision, gguf_file=args.gguf_file, seed=args.seed)
    out = result.save(args.output, overwrite=args.overwrite)
    r = result.report
    grown = f", {r['growth']['new_blocks']} new blocks ({r['growth']['mode']})" if r["growth"]["new_blocks"] else ""
    print(f"upcycled {r['source']['name']} ({r['source']['family']}) -> {out} as {result.arch}{grown}")
    bound = f" (bound {result.bound:.3g}; {result.knob} tightens it)" if result.bound is not None else ""
    print(f"  start: {result.start}; logits deviate by {result.deviation:.3g} relative{bound}")
    print(f"  step-0 loss on {result.sample_tokens} tokens ({result.sample}): {result.loss_upcycled:.4f} vs the "
          f"source's {result.loss_source:.4f} ({result.loss_change:+.4f} nats/token)")
    return 0


def register_cli(subparsers) -> None:
    """Add ``depthbench upcycle``."""
    p = subparsers.add_parser(
        "upcycle", help="a pretrained Llama/Mistral/Qwen2/Qwen3 model as a depthbench model of any architecture",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Load a pretrained causal LM (" + ", ".join(FAMILIES) + "), put its weights into a "
                    "depthbench architecture (optionally grown deeper with new blocks whose output projections are "
                    "zero), measure the start against the source on a built-in English sample, and write an "
                    "ordinary depthbench checkpoint (remote code, tokenizer, generation config, card, upcycle.json). "
                    "Every source tensor is consumed or the command refuses, naming it.",
        epilog="Starts by architecture (exact: logits equal the source's; bounded: within the stated bound, which "
               "the knob tightens; changes: needs --allow-function-change, the loss change is printed):\n"
               + starts_table())
    p.add_argument("source", help="local folder or Hub id of the source model")
    p.add_argument("-o", "--output", required=True, help="output folder (new or empty)")
    p.add_argument("--arch", required=True, help="registered architecture id (depthbench archs)")
    p.add_argument("--grow-depth", type=_positive_int, metavar="K", help="add K new blocks (zero output projections)")
    p.add_argument("--grow-mode", choices=("interleave", "append"), default="interleave",
                   help="where the new blocks go: spread between the source's blocks (default) or after the last")
    p.add_argument("--dtype", choices=_DTYPES, help="dtype of the saved weights (default float32; measured in fp32)")
    p.add_argument("--allow-function-change", action="store_true",
                   help="accept an architecture whose start changes the function (the loss change is printed)")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE",
                   help="an architecture config field, e.g. a bounded start's knob attnres_mix_eps=1e-9 (repeatable)")
    p.add_argument("--gguf-file", help="GGUF file inside the source folder to load (dequantised to fp32)")
    p.add_argument("--revision", help="branch, tag or commit of a Hub id")
    p.add_argument("--seed", type=int, default=0, help="seed of the new parameters' init (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier upcycle in the output folder")
    p.set_defaults(func=_cmd_upcycle)
