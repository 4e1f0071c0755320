"""The ``depthbench eval`` command line: lm-eval on a checkpoint (or every run of a sweep), results as files and in
the model card.

    depthbench eval runs/demo/runs/hc__micro-L5__lr0.003__s0 --tasks depthbench_synthetic
    depthbench eval my-ckpt --tasks depthbench_nll,depthbench_zeroshot --batch-size 16 --device cuda
    depthbench eval my-ckpt --tasks depthbench_nll --data-dir nll_data --limit 100      # offline local copies
    depthbench eval runs/demo --tasks depthbench_synthetic      # a sweep folder: every run, resumable, + report
    lm_eval --model hf --model_args pretrained=my-ckpt --include_path "$(depthbench tasks-path)" --tasks ...

Errors are raised (``EvalError`` is a ``ValueError``: bad input); ``depthbench.cli`` turns them into the message
and the exit code.
"""

from __future__ import annotations

import argparse

from depthbench import runs
from depthbench.evaluation.harness import DEFAULT_TASKS, EvalError, evaluate_checkpoint, evaluate_sweep, tasks_dir


def _limit(text: str) -> float | int:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"--limit must be > 0 (a count, or a fraction < 1), got {text}")
    return int(value) if value >= 1 and value == int(value) else value


def _batch_size(text: str) -> int | str:
    if text == "auto" or text.startswith("auto:"):
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--batch-size must be a positive integer or 'auto', got {text!r}")
    return value


def _cmd_eval(args: argparse.Namespace) -> int:
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    kwargs = dict(limit=args.limit, batch_size=args.batch_size, device=args.device, dtype=args.dtype,
                  data_dir=args.data_dir, include_path=args.include_path, trust_remote_code=args.trust_remote_code,
                  max_length=args.max_length)
    if runs.is_sweep(args.checkpoint):
        if args.output:
            raise EvalError("-o/--output is for one checkpoint; a sweep writes into each run's eval/ folder")
        evaluate_sweep(args.checkpoint, tasks, **kwargs)
        return 0
    evaluate_checkpoint(args.checkpoint, tasks, out_dir=args.output, update_card=not args.no_card, **kwargs)
    return 0


def _cmd_tasks_path(args: argparse.Namespace) -> int:
    print(tasks_dir())
    return 0


def register_cli(subparsers) -> None:
    """Add ``depthbench eval`` and ``depthbench tasks-path``."""
    p = subparsers.add_parser(
        "tasks-path", help="print the installed lm-eval task folder",
        description="Print the lm-eval task folder installed with depthbench (the default --include-path of "
                    "depthbench eval), to hand to the stock lm-eval CLI: "
                    'lm_eval --model hf --include_path "$(depthbench tasks-path)" --tasks depthbench_synthetic ...',
    )
    p.set_defaults(func=_cmd_tasks_path)
    p = subparsers.add_parser(
        "eval", help="lm-eval on a checkpoint or every run of a sweep (results.json/.md, model card)",
        description="Evaluate a checkpoint (model folder, run folder or Hub id) in-process with lm-eval's HFLM "
                    "and the installed task folder (depthbench tasks-path); writes <folder>/eval/results.json "
                    "(lm-eval's format) and results.md and records the results in the model card's model-index. "
                    "Given a sweep folder, evaluates every run (finished evaluations are skipped) and adds plots "
                    "against aspect ratio and a section to the sweep's report.md.")
    p.add_argument("checkpoint", help="model folder, run folder (uses final/), sweep folder, or Hub id")
    p.add_argument("--tasks", default=DEFAULT_TASKS, help=f"comma-separated tasks/groups (default {DEFAULT_TASKS})")
    p.add_argument("--limit", type=_limit, default=None, help="documents per task (or a fraction < 1)")
    p.add_argument("--batch-size", type=_batch_size, default=8, help="lm-eval batch size or 'auto' (default 8)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps ... (default: cuda if available)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="weights dtype (auto: bfloat16 on a bf16 GPU, else float32)")
    p.add_argument("--max-length", type=int, default=None, help="context length for lm-eval (default: the model's)")
    p.add_argument("--data-dir", default=None,
                   help="local copies of the depthbench_nll datasets (<source>.jsonl/.json/.csv/.parquet)")
    p.add_argument("--include-path", default=None, help=f"lm-eval task folder (default {tasks_dir()})")
    p.add_argument("--trust-remote-code", action="store_true", help="for checkpoints of other libraries' models")
    p.add_argument("-o", "--output", default=None, help="output folder (default <checkpoint>/eval)")
    p.add_argument("--no-card", action="store_true", help="do not write the model card's model-index")
    p.set_defaults(func=_cmd_eval)
