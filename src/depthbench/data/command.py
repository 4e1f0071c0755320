"""``depthbench prepare-data``: the argparse command over :func:`depthbench.data.prepare.prepare_data`. Its errors
and exit codes are those of every command (``depthbench.errors``, applied by ``depthbench.cli``).
"""

from __future__ import annotations

import argparse
import os

from depthbench import runs


def _extra_splits(items: list[str] | None) -> dict[str, list[str]]:
    """``{name: files}`` of the ``--extra-split NAME=FILE[,FILE...]`` arguments."""
    extra = {}
    for item in items or []:
        name, sep, files = item.partition("=")
        if not sep or not name or not files:
            raise ValueError(f"--extra-split {item!r} is not of the form NAME=FILE[,FILE...]")
        extra[name] = [f for f in files.split(",") if f]
    return extra


def _cmd_prepare_data(args: argparse.Namespace) -> int:
    """``depthbench prepare-data`` (errors and exit codes: ``depthbench.errors``)."""
    from depthbench.data.prepare import prepare_data  # numpy: loaded by the command, not by its --help

    extra = _extra_splits(args.extra_split)
    meta = prepare_data(
        args.inputs,
        args.tokenizer,
        args.output,
        text_field=args.text_field,
        eval_fraction=args.eval_fraction,
        eval_files=args.eval_files,
        shard_tokens=args.shard_tokens,
        num_workers=args.num_workers,
        max_documents=args.max_documents,
        dataset_config=args.dataset_config,
        split=args.split,
        progress=not args.quiet,
        extra_splits=extra or None,
        model_max_length=args.model_max_length,
    )
    splits = meta.get("splits", {})
    for name, info in splits.items():
        print(f"{name}: {info.get('documents')} documents, {info.get('tokens')} tokens")
    print(f"wrote {os.path.join(args.output, runs.DATA_META)} (dtype {meta.get('dtype')}, "
          f"vocab {meta.get('vocab_size')})")
    return 0


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``depthbench prepare-data``."""
    p = subparsers.add_parser(
        "prepare-data",
        help="tokenize parquet/jsonl/txt files (or a Hub dataset) into token shards + meta.json",
        description="Tokenize documents into uint16/uint32 token shards with meta.json and a held-out eval split. "
        "Example: depthbench prepare-data 'fineweb/*.parquet' --tokenizer allenai/OLMo-1B-hf "
        "--eval-files fineweb/013_00008.parquet -o data/fineweb --num-workers 16",
    )
    p.add_argument("inputs", nargs="+", help="files, folders or globs (.parquet/.jsonl/.json/.txt) or a Hub dataset id")
    p.add_argument("--tokenizer", required=True, help="tokenizer path or Hub id")
    p.add_argument("-o", "--output", required=True, help="output folder")
    p.add_argument("--text-field", default="text")
    p.add_argument("--eval-fraction", type=float, default=0.0, help="hold out this fraction of documents (by hash)")
    p.add_argument("--eval-files", nargs="*", help="files that form the eval split")
    p.add_argument("--extra-split", action="append", metavar="NAME=FILES", help="an extra named split from files")
    p.add_argument("--shard-tokens", type=int, default=50_000_000)
    p.add_argument("--num-workers", type=int, help="tokenizing workers, one core each (default: every core this "
                   "process may use)")
    p.add_argument("--max-documents", type=int)
    p.add_argument("--dataset-config", help="Hub dataset config name (e.g. sample-10BT)")
    p.add_argument("--split", default="train", help="Hub dataset split")
    p.add_argument("--model-max-length", type=int,
                   help="context length of the model the data is for (max_position_embeddings), saved with the "
                   "tokenizer")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_prepare_data)
