"""The ``depthbench`` command line (console script declared in setup.py).

    depthbench --help
    depthbench archs [--json]
    depthbench shapes 400m --arch mhc [--depths 16,24] [--json | --csv]
    depthbench bench --arch hc,mhc --shape bench-L8

Subcommands live next to the code they drive: every module in :data:`COMMAND_MODULES` defines
``register_cli(subparsers)``, which adds its parser(s) and sets ``func`` (called with the parsed namespace; returns
an exit code or ``None``). To add a command, write ``register_cli`` in your module and add one line to
:data:`COMMAND_MODULES`. A module that fails to import does not break the other commands: the failure is listed
at the end of ``depthbench --help`` and reported in full when its command is used.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from collections.abc import Sequence

COMMAND_MODULES: list[str] = [
    "depthbench.cli",  # archs
    "depthbench.shapes",  # shapes
    "depthbench.bench",  # bench
    "depthbench.data.prepare",  # prepare-data
    "depthbench.train",  # train
    "depthbench.sweep",  # sweep
    "depthbench.report",  # report
    "depthbench.demo",  # demo (and its alias `sweep --preset demo`, see ALIASES)
    "depthbench.evaluation",  # eval
    "depthbench.sft",  # sft
    "depthbench.hub.publish",  # publish
    "depthbench.hub.convert",  # convert
    "depthbench.hub.export_llama",  # export-llama
    "depthbench.analysis.command",  # analyze
    # (new command modules: one line above this comment)
]
"""Modules that contribute subcommands (each defines ``register_cli(subparsers)``)."""

ALIASES: dict[tuple[str, str, str], str] = {
    ("sweep", "--preset", "demo"): "demo",  # the README's first command, from before `depthbench demo` existed
}
"""Old spellings kept working: ``depthbench <command> <flag> <value> ...`` runs ``depthbench <target> ...``. Flags
of the old command that the target does not take are refused with a message naming them."""


# ================================================================================================ archs
def _cmd_archs(args: argparse.Namespace) -> int:
    # imported here: the registry loads torch, transformers and every architecture (import cost)
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
def build_parser() -> tuple[argparse.ArgumentParser, dict[str, str]]:
    """The ``depthbench`` parser and ``{module: error}`` for command modules that failed to import/register."""
    parser = argparse.ArgumentParser(
        prog="depthbench",
        description="DepthBench: residual-connection architectures x width/depth aspect ratio, Hugging Face-native.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="<command>")
    failures: dict[str, str] = {}
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
            module.register_cli(subparsers)
        except Exception as exc:  # one broken module must not take the whole CLI down
            failures[module_name] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    parser.commands = set(subparsers.choices)  # names of the registered subcommands
    if failures:
        parser.epilog = "unavailable command modules:\n" + "\n".join(f"  {m}: {e}" for m, e in failures.items())
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser, failures


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``depthbench`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code.

    ``ValueError`` raised by a command (bad shape, unknown architecture, ...) is printed as a one-line error with
    exit code 2; set ``DEPTHBENCH_TRACEBACK=1`` to see the traceback instead.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, failures = build_parser()
    argv, alias = _resolve_alias(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is not None and command not in parser.commands and failures:
        # The command probably belongs to a module that failed to import: say which and why.
        print(f"depthbench: error: unknown command {command!r}; these command modules failed to load:",
              file=sys.stderr)
        for module_name, error in failures.items():
            print(f"  {module_name}: {error}", file=sys.stderr)
        return 2
    if alias:
        args, unknown = parser.parse_known_args(argv)
        flags = [a.split("=")[0] for a in unknown if a.startswith("-")]
        if unknown:
            command, flag, value = alias
            dropped = ", ".join(flags or unknown)
            print(f"depthbench {command} {flag} {value}: error: this is `depthbench {ALIASES[alias]}`, which does not "
                  f"take {dropped}; drop {dropped} (or run depthbench {command} without {flag})", file=sys.stderr)
            return 2
    else:
        args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0 if not argv else 2
    try:
        code = args.func(args)
    except ValueError as exc:
        if os.environ.get("DEPTHBENCH_TRACEBACK"):
            raise
        print(f"depthbench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0 if code is None else int(code)


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
