"""The ``depthbench`` command line (console script declared in setup.py).

    depthbench --help
    depthbench --version
    depthbench archs [--json]
    depthbench shapes 400m --arch mhc [--depths 16,24] [--json | --csv]
    depthbench bench --arch hc,mhc --shapes bench --quick

Every command lives next to the code it drives: its module defines ``register_cli(subparsers)``, which adds its
parser(s) and sets ``func`` (called with the parsed namespace; returns an exit code or ``None``). :data:`COMMANDS`
maps each command name to that module and a one-line summary; to add a command, write ``register_cli`` in your module
and add one line to :data:`COMMANDS`.

The command line answers at once: ``depthbench --help`` reads only the table, and ``depthbench <command>`` imports
only that command's module (so torch, transformers, datasets ... load only for the commands that use them, and a
module that fails to import breaks only its own commands, with the error shown when one of them is used).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from collections.abc import Sequence

from depthbench import __version__
from depthbench.errors import EXIT_OK, EXIT_USAGE, run_command

COMMANDS: dict[str, tuple[str, str]] = {
    "archs": ("depthbench.cli", "list the registered architectures"),
    "shapes": ("depthbench.shapes", "shape grids of the design rule with exact parameter counts"),
    "bench": ("depthbench.bench.command",
              "train-step time, decode speed and peak memory vs pre_ln and LlamaForCausalLM"),
    "prepare-data": ("depthbench.data.command", "tokenize parquet/jsonl/txt files or a Hub dataset into token shards"),
    "train": ("depthbench.training.command", "pretrain a model (Accelerate: CPU, GPU, DDP, FSDP2)"),
    "sweep": ("depthbench.sweeps.command", "train architectures x aspect ratios at a fixed parameter budget"),
    "report": ("depthbench.sweeps.report", "rebuild results.csv, the plot and report.md of a sweep folder"),
    "demo": ("depthbench.sweeps.demo", "the offline CPU demo: a small real aspect-ratio sweep (< 10 min)"),
    "eval": ("depthbench.evaluation.command",
             "lm-eval on a checkpoint or every run of a sweep (results.json/.md, card)"),
    "sft": ("depthbench.training.sft", "supervised fine-tuning (Commonsense170K recipe) with transformers.Trainer"),
    "publish": ("depthbench.hub.publish", "upload a run, a sweep or a converted model to the Hugging Face Hub"),
    "convert": ("depthbench.hub.convert", "convert a released checkpoint of the study (OLMo-core) to depthbench"),
    "export-llama": ("depthbench.hub.export_llama", "export a pre_ln checkpoint as a stock LlamaForCausalLM"),
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

ALIASES: dict[tuple[str, str, str], str] = {
    ("sweep", "--preset", "demo"): "demo",  # the README's first command, from before `depthbench demo` existed
}
"""Old spellings kept working: ``depthbench <command> <flag> <value> ...`` runs ``depthbench <target> ...``. Flags
of the old command that the target does not take are refused with a message naming them."""


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


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``depthbench archs``."""
    p = subparsers.add_parser(
        "archs", help="list the registered architectures",
        description="Print the architecture registry: id, model_type, family, paper, description.",
    )
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.set_defaults(func=_cmd_archs)


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
    set ``DEPTHBENCH_TRACEBACK=1`` to see the traceback instead.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, alias = _resolve_alias(argv)
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
    if alias:
        args, unknown = parser.parse_known_args(argv)
        flags = [a.split("=")[0] for a in unknown if a.startswith("-")]
        if unknown:
            command, flag, value = alias
            dropped = ", ".join(flags or unknown)
            print(f"depthbench {command} {flag} {value}: error: this is `depthbench {ALIASES[alias]}`, which does not "
                  f"take {dropped}; drop {dropped} (or run depthbench {command} without {flag})", file=sys.stderr)
            return EXIT_USAGE
    else:
        args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return EXIT_OK if not argv else EXIT_USAGE
    return run_command(args.command, args.func, args)


def _resolve_alias(argv: list[str]) -> tuple[list[str], tuple[str, str, str] | None]:
    """``argv`` with an :data:`ALIASES` spelling replaced by its target command, and the alias key (or ``None``)."""
    if not argv:
        return argv, None
    for (command, flag, value), target in ALIASES.items():
        if argv[0] != command:
            continue
        rest = argv[1:]
        for i, arg in enumerate(rest):
            if arg == f"{flag}={value}":
                return [target, *rest[:i], *rest[i + 1:]], (command, flag, value)
            if arg == flag and i + 1 < len(rest) and rest[i + 1] == value:
                return [target, *rest[:i], *rest[i + 2:]], (command, flag, value)
    return argv, None


if __name__ == "__main__":
    sys.exit(main())
