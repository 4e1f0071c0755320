"""``depthbench analyze``: the layer analyses of arXiv 2609.32534 on a checkpoint, a Hub model or a whole sweep.

    depthbench analyze runs/demo/runs/hc__micro-L8__lr0.003__s0/final --metrics angular,causal --data runs/demo/data
    depthbench analyze meta-llama/Llama-3.2-1B --metrics logit_lens --data calib.txt -o out/llama
    depthbench analyze runs/demo --metrics causal,permutation,logit_lens     # every run, resumable + comparisons

Heavy frameworks are imported inside the functions (``depthbench --help`` stays fast).
"""

from __future__ import annotations

import argparse
import os
from typing import Any


def metric_options(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Per-metric keyword options from ``depthbench analyze``'s arguments."""
    return {
        "angular": {"tokens": args.angular_tokens},
        "causal": {"threshold": args.causal_threshold},
        "permutation": {"anchors": args.anchor_layer or None, "threshold": args.permutation_threshold},
        "pruning": {"layers": args.layers, "task": args.task, "include_path": args.include_path,
                    "limit": args.limit, "task_metric": args.task_metric},
        "jacobian": {"mode": args.jacobian_mode, "positions": args.jacobian_positions, "windows": args.jacobian_windows,
                     "max_dim": args.jacobian_max_dim, "force": args.jacobian_force},
        "efficiency": {"seq_len": args.efficiency_seq_len},
    }


def _default_out(target: str) -> str:
    from depthbench import runs

    if os.path.isdir(target):
        return os.path.join(target, runs.ANALYSIS)
    return os.path.join(runs.ANALYSIS, target.replace("/", "__"))


def _cmd_analyze(args: argparse.Namespace) -> int:
    from depthbench.runs import is_sweep

    from . import parse_metrics
    from .runner import analyze_sweep, analyze_target
    from .sampling import WindowSpec

    metrics = parse_metrics(args.metrics)
    named = set(metrics) if args.metrics else set()  # the default list: a metric short of windows is skipped
    spec = WindowSpec(num_samples=args.num_samples, seq_len=args.seq_len, seed=args.seed, split=args.split,
                      cross_documents=args.cross_documents)
    common = dict(options=metric_options(args), device=args.device, trust_remote_code=args.trust_remote_code,
                  micro_batch_size=args.micro_batch_size, batched=not args.no_batching, group_batch=args.group_batch,
                  progress=not args.no_progress)
    if is_sweep(args.target):
        analyze_sweep(args.target, metrics, args.data, spec, out_root=args.output, force=args.force, named=named,
                      **common)
    else:
        analyze_target(args.target, metrics, args.output or _default_out(args.target), args.data, spec, named=named,
                       **common)
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="checkpoint folder, training run folder, Hugging Face Hub id, or sweep folder")
    p.add_argument("--metrics", default=None,
                   help="comma-separated ids: angular, causal, permutation, usefulness, jacobian, logit_lens, pruning, "
                        "token_collapse, depth_mixing, hc_transport, efficiency, or 'all' (default: the eight metrics)")
    p.add_argument("--data", default=None,
                   help="token-shard folder (prepare-data output) or a text file (one document per line); a training "
                        "run or a sweep defaults to the data it trained on (run_config.json, sweep.json)")
    p.add_argument("--split", default=None,
                   help="split of a token-shard folder (default: the first of eval, eval*, train in which "
                        "--num-samples windows fit inside documents)")
    p.add_argument("-o", "--output", default=None,
                   help="output folder (default: <checkpoint>/analysis; a sweep: <sweep>/analysis/<run>)")
    p.add_argument("--num-samples", type=int, default=16, help="windows (default 16)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per window (default 128)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--cross-documents", action="store_true", help="allow windows across document boundaries")
    p.add_argument("--micro-batch-size", type=int, default=4)
    p.add_argument("--group-batch", type=int, default=8, help="interventions evaluated together (default 8)")
    p.add_argument("--no-batching", action="store_true", help="evaluate interventions one after another")
    p.add_argument("--device", default=None, help="cpu / cuda (default: cuda when available)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow a Hub model's own modeling code")
    p.add_argument("--force", action="store_true", help="sweep mode: recompute metrics that already have a JSON")
    p.add_argument("--no-progress", action="store_true")
    g = p.add_argument_group("metric options")
    g.add_argument("--angular-tokens", choices=["all", "last"], default="all",
                   help="angular: average over every token (the study, default) or each window's last token "
                        "(Gromov et al.)")
    g.add_argument("--causal-threshold", type=float, default=0.45)
    g.add_argument("--permutation-threshold", type=float, default=0.15)
    g.add_argument("--anchor-layer", type=int, action="append", help="permutation: only pairs with this block")
    g.add_argument("--layers", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="pruning: blocks to prune (default all)")
    g.add_argument("--task", default=None, help="pruning: score an lm-eval task instead of the LM loss")
    g.add_argument("--include-path", default=None, help="pruning: lm-eval task folder (e.g. eval_tasks)")
    g.add_argument("--limit", type=int, default=None, help="pruning: lm-eval documents per evaluation")
    g.add_argument("--task-metric", default=None, help="pruning: lm-eval metric (default acc_norm > acc > exact_match)")
    g.add_argument("--jacobian-mode", default="per_token", choices=["per_token", "averaged_total"])
    g.add_argument("--jacobian-positions", type=int, default=4, help="per-token Jacobians per window (default 4)")
    g.add_argument("--jacobian-windows", type=int, default=4, help="windows the Jacobian uses (default the first 4)")
    g.add_argument("--jacobian-max-dim", type=int, default=4096)
    g.add_argument("--jacobian-force", action="store_true", help="compute above --jacobian-max-dim")
    g.add_argument("--efficiency-seq-len", type=int, default=4096, help="efficiency: sequence length (default 4096)")


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("analyze", help="layer analyses (angular, causal, permutation, ...) of a model or sweep")
    add_arguments(p)
    p.set_defaults(func=_cmd_analyze)
