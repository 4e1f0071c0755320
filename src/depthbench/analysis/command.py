"""``depthbench analyze``: the layer analyses of arXiv 2609.32534 on a checkpoint, a Hub model or a whole sweep.

    depthbench analyze runs/demo/runs/hc__tiny-L8__lr0.003__s0/final --metrics angular,causal --data runs/demo/data
    depthbench analyze meta-llama/Llama-3.2-1B --metrics logit_lens --data calib.txt -o out/llama
    depthbench analyze runs/demo --metrics causal,permutation,logit_lens     # every run, resumable + comparisons

Heavy frameworks are imported inside the functions (``depthbench --help`` stays fast).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def load_model(target: str, *, device: str | None = None, trust_remote_code: bool = False):
    """Model + tokenizer (or ``None``) from a checkpoint folder, a training run folder (its ``final/``) or a Hub id."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import depthbench  # noqa: F401  (registers every architecture with the Auto classes)

    path = target
    if os.path.isdir(target) and not os.path.isfile(os.path.join(target, "config.json")):
        if os.path.isfile(os.path.join(target, "final", "config.json")):
            path = os.path.join(target, "final")
        else:
            raise FileNotFoundError(f"{target} holds no config.json (nor final/config.json): not a checkpoint folder")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, trust_remote_code=trust_remote_code)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device).eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError):
        tokenizer = None
    return model, tokenizer


def metric_options(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    return {
        "causal": {"threshold": args.causal_threshold},
        "permutation": {"anchors": args.anchor_layer or None, "threshold": args.permutation_threshold},
        "pruning": {"layers": args.layers, "task": args.task, "include_path": args.include_path,
                    "limit": args.limit, "task_metric": args.task_metric},
        "jacobian": {"mode": args.jacobian_mode, "positions": args.jacobian_positions,
                     "max_dim": args.jacobian_max_dim, "force": args.jacobian_force},
        "efficiency": {"seq_len": args.efficiency_seq_len},
    }


def analyze_one(target: str, metrics: list[str], out_dir: str, args: argparse.Namespace, *, skip_done: bool = False,
                log=print) -> dict[str, Any]:
    """Run ``metrics`` on one model, writing ``out_dir/<metric>.{json,csv,png}``; returns ``{metric: seconds}``."""
    from . import run_metric
    from .common import AnalysisContext
    from .sampling import WindowSpec, load_windows

    todo = [m for m in metrics if not (skip_done and os.path.isfile(os.path.join(out_dir, f"{m}.json")))]
    if not todo:
        log(f"{target}: all metrics done, skipped")
        return {}
    model, tokenizer = load_model(target, device=args.device, trust_remote_code=args.trust_remote_code)
    spec = WindowSpec(num_samples=args.num_samples, seq_len=args.seq_len, seed=args.seed, split=args.split,
                      cross_documents=args.cross_documents)
    if args.data is None:
        raise ValueError("--data is required: a token-shard folder (prepare-data output) or a text file")
    if tokenizer is None and os.path.isdir(args.data):
        from transformers import AutoTokenizer

        from depthbench.data import load_meta

        tok_dir = os.path.join(args.data, load_meta(args.data).get("tokenizer_dir", "tokenizer"))
        tokenizer = AutoTokenizer.from_pretrained(tok_dir) if os.path.isdir(tok_dir) else None
    windows = load_windows(args.data, spec, tokenizer)
    ctx = AnalysisContext(model, windows, spec, model_id=target, micro_batch_size=args.micro_batch_size,
                          batched=not args.no_batching, group_batch=args.group_batch, progress=not args.no_progress,
                          tokenizer=tokenizer)
    options = metric_options(args)
    timings = {}
    for metric in todo:
        try:
            result = run_metric(ctx, metric, out_dir, **options.get(metric, {}))
        except ValueError as err:
            log(f"{metric}: skipped ({err})")
            continue
        timings[metric] = result.seconds
        log(f"{metric}: {result.seconds:.1f} s -> {os.path.join(out_dir, metric + '.json')}")
    return timings


def _default_out(target: str) -> str:
    if os.path.isdir(target):
        return os.path.join(target, "analysis")
    return os.path.join("analysis", target.replace("/", "__"))


def _cmd_analyze(args: argparse.Namespace) -> int:
    from . import parse_metrics
    from .sweep import finished_runs, is_sweep, sweep_data_dir, write_comparison

    try:
        metrics = parse_metrics(args.metrics)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if is_sweep(args.target):
        args.data = args.data or sweep_data_dir(args.target)
        runs = finished_runs(args.target)
        if not runs:
            print(f"error: no finished runs with a final/ export under {args.target}/runs", file=sys.stderr)
            return 2
        root = args.output or os.path.join(args.target, "analysis")
        for k, run in enumerate(runs):
            print(f"[{k + 1}/{len(runs)}] {run['run_id']}")
            analyze_one(run["model_dir"], metrics, os.path.join(root, run["run_id"]), args, skip_done=not args.force)
        write_comparison(args.target)
        return 0
    out = args.output or _default_out(args.target)
    analyze_one(args.target, metrics, out, args, skip_done=False)
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="checkpoint folder, training run folder, Hugging Face Hub id, or sweep folder")
    p.add_argument("--metrics", default=None,
                   help="comma-separated ids: angular, causal, permutation, usefulness, jacobian, logit_lens, pruning, "
                        "token_collapse, depth_mixing, hc_transport, efficiency, or 'all' (default: the eight metrics)")
    p.add_argument("--data", default=None, help="token-shard folder (prepare-data output) or a text file "
                                                "(one document per line); a sweep defaults to its own data")
    p.add_argument("--split", default=None, help="split of a token-shard folder (default: eval, eval*, else train)")
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
    g.add_argument("--jacobian-max-dim", type=int, default=4096)
    g.add_argument("--jacobian-force", action="store_true", help="compute above --jacobian-max-dim")
    g.add_argument("--efficiency-seq-len", type=int, default=4096, help="efficiency: sequence length (default 4096)")


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("analyze", help="layer analyses (angular, causal, permutation, ...) of a model or sweep")
    add_arguments(p)
    p.set_defaults(func=_cmd_analyze)
