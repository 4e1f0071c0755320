"""``depthbench train`` and ``python -m depthbench.training``: the run config from a file, flags and dotted
overrides, then :func:`depthbench.training.trainer.train`; ``depthbench sft``: the flags as a
:class:`depthbench.training.sft.SFTConfig`, then :func:`depthbench.training.sft.run_sft`.

    depthbench train -c src/depthbench/configs/demo.yaml --arch pre_ln --shape tiny-L4 --data runs/demo-data \\
        --output runs/demo train.max_steps=200 track.tensorboard=true
    depthbench train -c runs/demo/run_config.json --resume            # continue the latest checkpoint
    accelerate launch --config_file src/depthbench/configs/fsdp2.yaml -m depthbench.training -c 400m.yaml ...
    torchrun --nproc_per_node 8 -m depthbench.training -c 400m.yaml ...   # DDP
"""

from __future__ import annotations

import argparse
import json
import sys

from depthbench.config import RunConfig, load_run_config
from depthbench.errors import run_command

_DESCRIPTION = ("Pretraining with Accelerate: CPU, one GPU, DDP or FSDP2 (under torchrun / accelerate launch: "
                "-m depthbench.training).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``depthbench train`` arguments (shared by ``python -m depthbench.training``)."""
    parser.add_argument("-c", "--config", help="run file (YAML or JSON; a saved run_config.json works too)")
    parser.add_argument("--arch", help="architecture id (model.arch)")
    parser.add_argument("--shape", help="named grid shape, e.g. tiny-L4 (model.shape)")
    parser.add_argument("--model-config", help="HF config.json to build the model from (model.config_path)")
    parser.add_argument("--init-from", metavar="DIR",
                        help="start from the weights of this checkpoint folder, e.g. one written by `depthbench "
                             "upcycle` (model.init_from; its config gives the architecture and sizes)")
    parser.add_argument("--data", help="prepared data folder (data.data_dir)")
    parser.add_argument("-o", "--output", help="run folder (output_dir)")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output")
    parser.add_argument("--overwrite", action="store_true", help="start over in an --output that holds a run")
    parser.add_argument("--wait-for-writer", type=float, metavar="SECONDS",
                        help="wait up to SECONDS while another live process trains into --output (wait_for_writer; "
                             "default: refuse at once, naming it)")
    parser.add_argument("--layer-stats-every", type=int, help="log per-block statistics every N steps")
    parser.add_argument("--profile", action="store_true", help="report the share of step time outside the model")
    parser.add_argument("--verify-data", action="store_true",
                        help="hash every data shard against meta.json before training, ignoring the cache "
                             "(data.verify=always)")
    parser.add_argument("--preempt-signal", metavar="SIGNAL",
                        help="extra stop signal, e.g. SIGUSR1 for Slurm's --signal=USR1@90 (train.preempt_signal; "
                             "default SIGUSR1; 'none' to disable)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="dotted overrides, e.g. train.max_steps=100 optim.lr=1e-3")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Run config = file, then flags, then dotted overrides (later wins)."""
    flags = []
    for attr, key in (("arch", "model.arch"), ("shape", "model.shape"), ("model_config", "model.config_path"),
                      ("init_from", "model.init_from"),
                      ("data", "data.data_dir"), ("output", "output_dir"),
                      ("layer_stats_every", "train.layer_stats_every"), ("wait_for_writer", "wait_for_writer")):
        value = getattr(args, attr, None)
        if value is not None:
            flags.append(f"{key}={json.dumps(value)}")
    if args.resume:
        flags.append("resume=true")
    if args.overwrite:
        flags.append("overwrite=true")
    if args.profile:
        flags.append("train.profile=true")
    if getattr(args, "verify_data", False):
        flags.append("data.verify=always")
    if getattr(args, "preempt_signal", None) is not None:
        value = None if args.preempt_signal.lower() in ("none", "null", "") else args.preempt_signal
        flags.append(f"train.preempt_signal={json.dumps(value)}")
    return load_run_config(args.config, flags + list(args.overrides))


def _cmd_train(args: argparse.Namespace) -> int:
    """Entry point of ``depthbench train`` (0 also when stopped by a signal after checkpointing; errors and their
    exit codes: ``depthbench.errors``)."""
    # imported here: the trainer loads torch, accelerate and transformers (`depthbench sft --help` stays fast)
    import torch

    from depthbench.training.trainer import train

    try:
        summary = train(config_from_args(args))
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    evals = ", ".join(f"{k} {v:.4f}" for k, v in summary["eval"].items())
    print(f"depthbench train: {summary['status']} at step {summary['steps']}/{summary['max_steps']}, "
          f"train loss {summary['final_train_loss']:.4f}" + (f", eval {evals}" if evals else "")
          + (f" ({summary['stopped_by']}; continue with --resume)" if summary.get("stopped_by") else ""),
          file=sys.stderr)
    if summary.get("profile"):
        print(f"depthbench train: profile {json.dumps(summary['profile'])}", file=sys.stderr)
    return 0


# ================================================================================================ sft
def sft_config_from_args(args: argparse.Namespace):
    """The :class:`depthbench.training.sft.SFTConfig` of ``depthbench sft`` arguments."""
    from depthbench.training.sft import SFTConfig

    return SFTConfig(
        checkpoint=args.checkpoint, output_dir=args.output, data=args.data, max_samples=args.max_samples,
        shuffle_seed=args.shuffle_seed, max_seq_len=args.max_seq_len, epochs=args.epochs, max_steps=args.max_steps,
        global_batch_size=args.global_batch_size, micro_batch_size=args.micro_batch_size, lr=args.lr,
        weight_decay=args.weight_decay, betas=(args.beta1, args.beta2), eps=args.eps, warmup_ratio=args.warmup_ratio,
        grad_clip=args.grad_clip, seed=args.seed, bf16={"auto": None, "yes": True, "no": False}[args.bf16],
        use_cpu=args.cpu, trust_remote_code=args.trust_remote_code, logging_steps=args.logging_steps,
        report_to=[r for r in args.report_to.split(",") if r], overwrite=args.overwrite,
    )


def _cmd_sft(args: argparse.Namespace) -> int:
    from depthbench.training.sft import run_sft

    run_sft(sft_config_from_args(args))
    return 0


def _add_sft(subparsers) -> None:
    from depthbench.training.sft import SFTConfig

    d = SFTConfig("", "")
    p = subparsers.add_parser(
        "sft", help="supervised fine-tuning (Commonsense170K recipe) with transformers.Trainer",
        description="Fine-tune a checkpoint (any depthbench architecture or HF causal LM) with transformers.Trainer "
                    "on instruction rows (instruction, input, output) with the study's Alpaca template, response-"
                    "only loss and recipe; the output folder is a normal checkpoint.")
    p.add_argument("checkpoint", help="model folder, run folder (uses final/) or Hub id")
    p.add_argument("-o", "--output", required=True, help="output folder (refused if it holds a model, unless "
                                                         "--overwrite)")
    p.add_argument("--data", default=d.data, help=f"local .json/.jsonl file or Hub dataset id (default {d.data})")
    p.add_argument("--max-samples", type=int, default=None, help="use the first N rows after shuffling")
    p.add_argument("--shuffle-seed", type=int, default=d.shuffle_seed, help="data shuffle seed (default 42)")
    p.add_argument("--max-seq-len", type=int, default=d.max_seq_len, help="tokens per sequence (default 512)")
    p.add_argument("--epochs", type=float, default=d.epochs, help="epochs (default 3)")
    p.add_argument("--max-steps", type=int, default=d.max_steps, help="optimizer steps; overrides --epochs if > 0")
    p.add_argument("--global-batch-size", type=int, default=d.global_batch_size, help="sequences per step (128)")
    p.add_argument("--micro-batch-size", type=int, default=d.micro_batch_size, help="per device (default 16)")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate (default 1e-4)")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay, help="AdamW weight decay (default 0.1)")
    p.add_argument("--beta1", type=float, default=d.betas[0], help="AdamW beta1 (default 0.9)")
    p.add_argument("--beta2", type=float, default=d.betas[1], help="AdamW beta2 (default 0.95)")
    p.add_argument("--eps", type=float, default=d.eps, help="AdamW epsilon (default 1e-8)")
    p.add_argument("--warmup-ratio", type=float, default=d.warmup_ratio, help="linear warmup fraction (0.03)")
    p.add_argument("--grad-clip", type=float, default=d.grad_clip, help="max gradient norm (default 1.0)")
    p.add_argument("--seed", type=int, default=d.seed, help="training seed (default 0)")
    p.add_argument("--bf16", choices=["auto", "yes", "no"], default="auto", help="bf16 autocast (auto: bf16 GPU)")
    p.add_argument("--cpu", action="store_true", help="train on the CPU even when a GPU is present")
    p.add_argument("--logging-steps", type=int, default=d.logging_steps, help="log every N steps (default 10)")
    p.add_argument("--report-to", default="none", help="Trainer trackers, comma-separated (default none)")
    p.add_argument("--trust-remote-code", action="store_true", help="for checkpoints of other libraries' models")
    p.add_argument("--overwrite", action="store_true", help="replace a model already in --output")
    p.set_defaults(func=_cmd_sft)


def register_cli(subparsers) -> None:
    """Add ``depthbench train`` and ``depthbench sft`` to a ``depthbench`` argparse sub-parser set."""
    parser = subparsers.add_parser("train", help="pretrain a model (Accelerate: CPU, GPU, DDP, FSDP2)",
                                   description=_DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(func=_cmd_train)
    _add_sft(subparsers)


def main(argv: list[str] | None = None) -> int:
    """``python -m depthbench.training`` (what ``torchrun`` / ``accelerate launch -m`` run): ``depthbench train``."""
    parser = argparse.ArgumentParser(prog="depthbench train", description=_DESCRIPTION)
    add_arguments(parser)
    return run_command("train", _cmd_train, parser.parse_args(argv))
