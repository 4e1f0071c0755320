"""The ``depthbench`` command line (console script declared in setup.py).

    depthbench --help
    depthbench --version
    depthbench archs [--json]
    depthbench shapes 400m --arch mhc [--depths 16,24] [--json | --csv]
    depthbench bench --arch hc,mhc --shapes bench --quick

Every command lives in its family's ``command.py`` (``depthbench/<family>/command.py``; ``archs`` and ``shapes``,
which read only the registry and the shape rule, live here): that module defines ``register_cli(subparsers)``, which
adds the family's parsers and sets ``func`` to the command's handler ``_cmd_<command>`` (called with the parsed
namespace; returns an exit code or ``None``). :data:`COMMANDS` maps each command name to that module and a one-line
summary; to add a command, add its parser and handler to its family's ``command.py`` and one line to
:data:`COMMANDS`.

The command line answers at once: ``depthbench --help`` reads only the table, and ``depthbench <command>`` imports
only that command's module (so torch, transformers, datasets ... load only for the commands that use them, and a
module that fails to import breaks only its own commands, with the error shown when one of them is used).
"""

from __future__ import annotations

import argparse
import csv
import importlib
import io
import json
import os
import sys
import traceback
from collections.abc import Sequence

from depthbench import __version__
from depthbench.errors import EXIT_OK, EXIT_PIPE, EXIT_USAGE, run_command, silence_stdout

COMMANDS: dict[str, tuple[str, str]] = {
    "archs": ("depthbench.cli", "list the registered architectures"),
    "shapes": ("depthbench.cli", "shape grids of the design rule with exact parameter counts"),
    "bench": ("depthbench.bench.command",
              "train-step time, decode speed and peak memory vs pre_ln and LlamaForCausalLM"),
    "prepare-data": ("depthbench.data.command", "tokenize parquet/jsonl/txt files or a Hub dataset into token shards"),
    "train": ("depthbench.training.command", "pretrain a model (Accelerate: CPU, GPU, DDP, FSDP2)"),
    "sweep": ("depthbench.sweeps.command", "train architectures x aspect ratios at a fixed parameter budget"),
    "report": ("depthbench.sweeps.command", "rebuild results.csv, the plot and report.md of a sweep folder"),
    "demo": ("depthbench.sweeps.command", "the offline CPU demo: a small real aspect-ratio sweep (< 10 min)"),
    "eval": ("depthbench.evaluation.command",
             "lm-eval on a checkpoint or every run of a sweep (results.json/.md, card)"),
    "sft": ("depthbench.training.command", "supervised fine-tuning (Commonsense170K recipe) with transformers.Trainer"),
    "publish": ("depthbench.hub.command", "upload a run, a sweep or a converted model to the Hugging Face Hub"),
    "convert": ("depthbench.hub.command", "convert a released checkpoint of the study (OLMo-core) to depthbench"),
    "export-llama": ("depthbench.hub.command", "export a pre_ln checkpoint as a stock LlamaForCausalLM"),
    "analyze": ("depthbench.analysis.command", "layer analyses of a checkpoint, a Hub model or every run of a sweep"),
    "released": ("depthbench.sweeps.released.command", "the study's released checkpoints: list them, re-measure them"),
    "tasks-path": ("depthbench.evaluation.command", "print the installed lm-eval task folder (lm_eval --include_path)"),
    "upcycle": ("depthbench.upcycle.command",
                "a pretrained Llama/Mistral/Qwen2/Qwen3 model as any architecture, exact at step 0 where it can be"),
    "upcycle-study": ("depthbench.sweeps.upcycled.command",
                      "upcycle one model into several designs, train each on the same tokens, analyse and compare"),
    # (new commands: one line above this comment)
}
"""Command name -> (module defining ``register_cli`` that adds it, one-line summary for ``depthbench --help``)."""


# ================================================================================================ archs
def _cmd_archs(args: argparse.Namespace) -> int:
    from depthbench.registry import ARCHITECTURES

    rows = [{"id": a.id, "model_type": a.model_type, "family": a.family, "arxiv": a.paper_url,
             "description": a.description} for a in ARCHITECTURES.values()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    header = {"id": "id", "model_type": "model_type", "family": "family", "arxiv": "paper",
              "description": "description"}
    widths = {k: max(len(str(r[k])) for r in [header, *rows]) for k in header}
    for r in [header, *rows]:
        print("  ".join(str(r[k]).ljust(widths[k]) for k in header).rstrip())
    return 0


# ================================================================================================ shapes
def _cmd_shapes(args: argparse.Namespace) -> int:
    from depthbench.shapes import (
        GRIDS,
        format_table,
        grid_shapes,
        millions,
        param_table,
        parse_count,
        parse_depths,
        shape_for_budget,
    )

    if args.arch is not None:
        from depthbench.registry import get

        get(args.arch)  # unknown ids raise, listing the valid ones
    depths = parse_depths(args.depths) if args.depths else None
    if args.budget is not None:
        if depths is None:
            raise ValueError("--depths=None is not allowed: --depths must be given with --budget "
                             "(e.g. --depths 12,24).")
        budget = parse_count(args.budget)
        shapes = [shape_for_budget(budget, depth, vocab_size=args.vocab_size, heads=args.heads,
                                   kv_heads=args.kv_heads, ffn=args.ffn, count=args.count) for depth in depths]
        rows = param_table(shapes, args.arch, budget=budget, count=args.count)
    elif args.grid is None:
        for g in GRIDS.values():
            print(f"{g.name:<14} {g.count:<8} budget {millions(g.budget):>8}  depths "
                  f"{','.join(map(str, g.depths))}  {g.description}")
        return 0
    else:
        rows = param_table(grid_shapes(args.grid, depths), args.arch)
    if args.json:
        print(json.dumps(rows, indent=1))
    elif args.csv:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        sys.stdout.write(buffer.getvalue())
    else:
        first = rows[0]
        if first["budget"] is not None:
            print(f"# arch {args.arch or 'pre_ln'}; {first['count']} held at {millions(first['budget'])} "
                  f"({first['budget']:,} parameters)")
        print(format_table(rows))
    return 0


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``depthbench archs`` and ``depthbench shapes``."""
    from depthbench.shapes import COUNTS, FFN_RULES, GRIDS

    p = subparsers.add_parser(
        "archs", help="list the registered architectures",
        description="Print the architecture registry: id, model_type, family, paper, description.",
    )
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.set_defaults(func=_cmd_archs)
    p = subparsers.add_parser(
        "shapes",
        help="shape grids of the design rule with exact parameter counts",
        description="Print a grid's shapes (L, d, f, heads, head_dim, d/L, backbone, extra, total, difference from "
        "the budget) with the exact parameter counts of an architecture. Without a grid, list the grids.",
    )
    p.add_argument("grid", nargs="?", choices=list(GRIDS), help="named grid (omit to list the grids)")
    p.add_argument("--arch", default=None,
                   help="registered architecture whose counts are shown (default: the shared backbone, i.e. pre_ln's "
                   "counts, computed without loading model code)")
    p.add_argument("--depths", help="comma-separated subset of depths, e.g. 16,24 (required with --budget)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the rows as JSON")
    fmt.add_argument("--csv", action="store_true", help="print the rows as CSV")
    custom = p.add_argument_group("ad-hoc budget (instead of a named grid)")
    custom.add_argument("--budget", help="parameter budget, e.g. 400m, 1.6b, 25000000")
    custom.add_argument("--count", choices=COUNTS, default="total", help="count held fixed (default total)")
    custom.add_argument("--vocab-size", type=int, default=50280, help="vocabulary size (default 50280)")
    custom.add_argument("--heads", type=int, default=16, help="query heads (default 16)")
    custom.add_argument("--kv-heads", type=int, default=None, help="key/value heads (default: heads)")
    custom.add_argument("--ffn", choices=list(FFN_RULES), default="8/3", help="SwiGLU width rule (default 8/3)")
    p.set_defaults(func=_cmd_shapes)


# ================================================================================================ entry point
def _top_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = argparse.ArgumentParser(
        prog="depthbench",
        description="DepthBench: residual-connection architectures x width/depth aspect ratio, Hugging Face-native.",
    )
    parser.add_argument("--version", action="version", version=f"depthbench {__version__}")
    return parser, parser.add_subparsers(dest="command", metavar="<command>")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``depthbench`` parser. Every command of :data:`COMMANDS` is listed with its summary; only ``command``'s
    module is imported and registers its real parser (the others stay argument-less placeholders).

    Raises ``ImportError`` (or whatever the module raised) when ``command``'s module cannot be loaded.
    """
    parser, subparsers = _top_parser()
    if command in COMMANDS:
        module_name = COMMANDS[command][0]
        importlib.import_module(module_name).register_cli(subparsers)
        if command not in subparsers.choices:
            raise ImportError(f"{module_name}.register_cli did not add the command {command!r}")
    for name, (_, summary) in COMMANDS.items():
        if name not in subparsers.choices:
            subparsers.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``depthbench`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code.

    Every command's errors go through :func:`depthbench.errors.run_command`: bad input (a ``ValueError``: bad
    shape, unknown architecture, ...) is a one-line message with exit code 2, a failure of the work exit code 1;
    set ``DEPTHBENCH_TRACEBACK=1`` to see the traceback instead. When the reader of stdout goes away
    (``depthbench archs | head``), the command stops without a message, exit code 141 (as for SIGPIPE).
    """
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # ``depthbench --help | head``: the reader left; stop quietly, as SIGPIPE would
        silence_stdout()
        return EXIT_PIPE


def _main(argv: list[str]) -> int:
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        parser = build_parser(command)
    except Exception as exc:  # the command's module is broken: say which and why (the other commands still work)
        if os.environ.get("DEPTHBENCH_TRACEBACK"):
            raise
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        print(f"depthbench: error: the command {command!r} is unavailable: its module {COMMANDS[command][0]} "
              f"failed to load:\n  {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        args = parser.parse_args(argv)
    except SystemExit:  # --help, --version, a usage error: flush here, where a closed pipe can still be handled
        sys.stdout.flush()
        raise
    if getattr(args, "func", None) is None:
        parser.print_help()
        sys.stdout.flush()
        return EXIT_OK if not argv else EXIT_USAGE
    return run_command(args.command, args.func, args)


if __name__ == "__main__":
    sys.exit(main())
