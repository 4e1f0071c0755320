"""``depthbench upcycle-study``: the study's comparison on a model that already exists.

    depthbench upcycle-study ./smollm2 --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf --archs pre_ln,hc,attnres \\
        --data runs/prose-data -o runs/smollm2-study train.max_steps=300
    depthbench upcycle-study ./llama --archs pre_ln,hc --grow-depth 4 --seeds 0,1 --data DIR -o OUT -c run.yaml
    depthbench report runs/smollm2-study        # rebuild results.csv, upcycle_study.png, report.md / report.html

The stages (upcycle, step-0 loss, analyses before, training, analyses after, lm-eval) and the folder:
:mod:`depthbench.sweeps.upcycled.study`; docs/upcycling.md has a worked example with its figures.
"""

from __future__ import annotations

import argparse

#: The continued-pretraining recipe used without ``-c``: a short CPU-sized run (every key can be overridden).
DEFAULT_RECIPE = {
    "data": {"seq_len": 256, "eval_sequences": 16},
    "optim": {"weight_decay": 0.1, "warmup_fraction": 0.1, "min_lr_ratio": 0.1, "grad_clip": 1.0},
    "train": {"global_batch_size": 8, "micro_batch_size": 8, "max_steps": 200, "eval_every": 50, "log_every": 10},
    "checkpoint": {"every": 50, "keep_last": 1, "hf_export": False},
}


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _seeds(text: str) -> list[int]:
    try:
        return [int(s) for s in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give integers separated by commas, e.g. 0,1") from None


def _grow(text: str) -> int:
    from depthbench.upcycle.command import grow_depth_arg

    return grow_depth_arg(text)


def _cmd_upcycle_study(args: argparse.Namespace) -> int:
    import copy

    from depthbench.config import read_config_file
    from depthbench.sweeps.spec import SweepError
    from depthbench.sweeps.upcycled.study import StudyDefinition, run_study
    from depthbench.upcycle.command import field_overrides

    source, overrides = args.source[0], args.source[1:]
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise SweepError(f"{bad[0]!r} is not a run-config override KEY=VALUE (give one source model, then "
                         "overrides such as train.max_steps=300)")
    base = read_config_file(args.config) if args.config else copy.deepcopy(DEFAULT_RECIPE)
    base.pop("output_dir", None)
    metrics = [] if args.metrics.strip().lower() == "none" else _csv(args.metrics)
    defn = StudyDefinition(
        source=source, archs=_csv(args.archs), data_dir=args.data, grow_depth=args.grow_depth or 0,
        grow_mode=args.grow_mode, gguf_file=args.gguf_file, revision=args.revision, seeds=args.seeds, lr=args.lr,
        base=base, overrides=overrides, upcycle_overrides=field_overrides(args.set),
        allow_function_change=args.allow_function_change, split=args.split, metrics=metrics,
        analysis={"num_samples": args.analysis_samples, "seq_len": args.analysis_seq_len, "seed": 42},
        tasks=_csv(args.tasks) if args.tasks else [], task_limit=args.limit)
    run_study(defn, args.output, wait_for_writer=args.wait_for_writer)
    return 0


def register_cli(subparsers) -> None:
    """Add ``depthbench upcycle-study``."""
    p = subparsers.add_parser(
        "upcycle-study", help="upcycle one model into several designs, train each on the same tokens, compare",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="For a source model, a list of designs and a growth setting: upcycle each design (depthbench "
                    "upcycle), measure its step-0 held-out loss next to the source's, train each on the same tokens "
                    "with the same recipe and seeds (depthbench train --init-from), run the layer analyses before "
                    "and after, optionally lm-eval tasks, and write results.csv, upcycle_study.png and "
                    "report.md / report.html. Running the same command again continues where it stopped.",
        epilog="Recipe without -c: " + ", ".join(f"{s}.{k}={v}" for s, kv in DEFAULT_RECIPE.items()
                                                 for k, v in kv.items()) + "; override any key as KEY=VALUE.")
    p.add_argument("source", metavar="SRC [KEY=VALUE ...]", nargs="+",
                   help="local folder or Hub id of the source model (Llama/Mistral/Qwen2/Qwen3), then run-config "
                        "overrides of the training recipe right after it, e.g. SRC train.max_steps=300 --archs ...")
    p.add_argument("--archs", required=True, help="comma-separated designs, e.g. pre_ln,hc,attnres")
    p.add_argument("--data", required=True, help="prepared data folder, tokenized with the source's tokenizer")
    p.add_argument("-o", "--output", required=True, help="the study folder (new, or this study's to continue)")
    p.add_argument("-c", "--config", help="run file of the training recipe (default: the recipe below)")
    p.add_argument("--grow-depth", type=_grow, metavar="K", help="add K new blocks to every design")
    p.add_argument("--grow-mode", choices=("interleave", "append"), default="interleave")
    p.add_argument("--gguf-file", help="GGUF file inside the source folder (dequantised to fp32)")
    p.add_argument("--revision", help="branch, tag or commit of a Hub id")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE", help="an architecture field for the upcycle")
    p.add_argument("--allow-function-change", action="store_true",
                   help="accept designs whose start changes the function")
    p.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (default 3e-4)")
    p.add_argument("--seeds", type=_seeds, default=[0], help="training seeds, e.g. 0,1 (default 0)")
    p.add_argument("--split", default="eval", help="held-out split compared (default eval)")
    p.add_argument("--metrics", default="logit_lens,angular",
                   help="layer analyses before and after (default logit_lens,angular; 'none' to skip)")
    p.add_argument("--analysis-samples", type=int, default=8, help="analysis windows (default 8)")
    p.add_argument("--analysis-seq-len", type=int, default=128, help="tokens per analysis window (default 128)")
    p.add_argument("--tasks", help="lm-eval tasks run on every trained model (optional)")
    p.add_argument("--limit", type=float, help="lm-eval documents per task")
    p.add_argument("--wait-for-writer", type=float, default=0.0, metavar="SECONDS",
                   help="wait up to SECONDS while another live process works in -o (default 0: refuse at once, "
                        "naming it)")
    p.set_defaults(func=_cmd_upcycle_study)
