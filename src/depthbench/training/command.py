"""``depthbench train`` and ``python -m depthbench.training``: the run config from a file, flags and dotted
overrides, then :func:`depthbench.training.trainer.train`.

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

import torch

from depthbench.config import RunConfig, load_run_config
from depthbench.errors import run_command
from depthbench.training.trainer import train

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


def run_cli(args: argparse.Namespace) -> int:
    """Entry point of ``depthbench train`` (0 also when stopped by a signal after checkpointing; errors and their
    exit codes: ``depthbench.errors``)."""
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


def register_cli(subparsers) -> None:
    """Add the ``train`` sub-command to a ``depthbench`` argparse sub-parser set."""
    parser = subparsers.add_parser("train", help="pretrain a model (Accelerate: CPU, GPU, DDP, FSDP2)",
                                   description=_DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(func=run_cli)


def main(argv: list[str] | None = None) -> int:
    """``python -m depthbench.training`` (what ``torchrun`` / ``accelerate launch -m`` run): ``depthbench train``."""
    parser = argparse.ArgumentParser(prog="depthbench train", description=_DESCRIPTION)
    add_arguments(parser)
    return run_command("train", run_cli, parser.parse_args(argv))
