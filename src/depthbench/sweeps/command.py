"""The sweep family's commands: ``depthbench sweep``, a sweep from the command line (run here, under ``accelerate
launch`` per run, or emitted as a Slurm job array; see ``depthbench.sweeps.runner``); ``depthbench report``, a sweep
folder's results rebuilt (``depthbench.sweeps.report``); ``depthbench demo``, the offline CPU demo
(``depthbench.sweeps.demo``)."""

from __future__ import annotations

import os
from typing import Any

from depthbench import runs
from depthbench.config import read_config_file
from depthbench.shapes import grid_shapes
from depthbench.sweeps.spec import SweepError, SweepSpec, budget_shapes

_DESCRIPTION = ("Aspect-ratio sweeps at a fixed parameter budget, the study's main experiment: definition, runner, "
                "job arrays.")


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SweepError(f"--lrs {text!r} is not allowed: give positive numbers separated by commas") from None


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SweepError(f"{flag} {text!r} is not allowed: give integers separated by commas") from None


def spec_from_args(args) -> SweepSpec:
    """The :class:`SweepSpec` of ``depthbench sweep`` arguments (raises :class:`SweepError` on bad input)."""
    base: dict[str, Any] = read_config_file(args.config) if args.config else {}
    base.pop("output_dir", None)
    base.pop("resume", None)
    if args.data:
        base.setdefault("data", {})["data_dir"] = os.path.abspath(args.data)
    depths = _ints(args.depths, "--depths") if args.depths is not None else None
    if depths is not None and not depths:
        raise SweepError(f"--depths {args.depths!r} is empty: give depths separated by commas, e.g. 2,4,8")
    shapes: list[str] = []
    custom: dict[str, dict[str, int]] = {}
    if getattr(args, "budget", None):
        if args.grid:
            raise SweepError("give either --grid or --budget, not both")
        shapes, custom = budget_shapes(args.budget, depths or [], vocab_size=args.vocab_size, heads=args.heads,
                                       count=args.count)
    elif args.grid:
        try:
            shapes = [s.name for s in grid_shapes(args.grid, depths)]
        except ValueError as exc:
            raise SweepError(str(exc)) from None
    if args.shapes:
        shapes += [s.strip() for s in args.shapes.split(",") if s.strip()]
    return SweepSpec(
        archs=args.archs,
        shapes=shapes,
        lrs=_floats(args.lrs),
        seeds=_ints(args.seeds, "--seeds"),
        base=base,
        overrides=list(args.set or []),
        name=args.name or os.path.basename(os.path.abspath(args.out)),
        custom_shapes=custom,
    )


def _cmd_sweep(args) -> int:
    # imported here: the runner loads the trainer's checkpoint code (numpy, torch)
    from depthbench.sweeps.report import print_table
    from depthbench.sweeps.runner import run_sweep
    from depthbench.sweeps.slurm import emit_slurm

    if not (args.archs and (args.grid or args.shapes or args.budget)):
        raise SweepError("give --archs and --grid/--shapes/--budget (see depthbench sweep --help; the offline CPU "
                         "demo is depthbench demo)")
    spec = spec_from_args(args)
    if args.emit == "slurm":
        path = emit_slurm(spec, args.out, accelerate_args=args.accelerate_args, sbatch=args.sbatch)
        print(f"wrote {path} ({len(spec.runs())} array tasks) and {os.path.join(args.out, runs.SLURM_RUNS)}; "
              f"submit with: sbatch {path}; afterwards: depthbench report {args.out}")
        return 0
    rows = run_sweep(spec, args.out, launcher=args.launcher, accelerate_args=args.accelerate_args,
                     wait_for_writer=args.wait_for_writer or 0.0,
                     workers=args.workers)
    print()
    print_table(rows)
    return 0


def _add_sweep(subparsers) -> None:
    p = subparsers.add_parser("sweep", help="train architectures x aspect ratios at a fixed parameter budget",
                              description=_DESCRIPTION)
    p.add_argument("--archs", help="architecture ids separated by commas, or 'all'")
    p.add_argument("--grid", help="named shape grid (see depthbench shapes), e.g. 400m, tiny")
    p.add_argument("--depths", help="depths to run, e.g. 16,24,32 (default with --grid: all of the grid)")
    p.add_argument("--shapes", help="explicit shape names, e.g. 400m-L16,400m-L32")
    p.add_argument("--budget", help="explicit parameter budget instead of --grid, e.g. 20m (needs --depths)")
    p.add_argument("--heads", type=int, default=16, help="(--budget) query heads of the shapes (default 16)")
    p.add_argument("--vocab-size", type=int, default=50280, help="(--budget) vocabulary size (default 50280)")
    p.add_argument("--count", choices=["total", "backbone"], default="total",
                   help="(--budget) parameter count held fixed (default total)")
    p.add_argument("--data", help="prepared data folder (depthbench prepare-data)")
    p.add_argument("--config", help="base run file (YAML/JSON) applied to every run")
    p.add_argument("--lrs", default="2e-3", help="peak learning rates, comma separated (best is reported)")
    p.add_argument("--seeds", default="0", help="seeds, comma separated")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="run-config override for every run")
    p.add_argument("--out", default="runs/sweep", help="results folder (default runs/sweep)")
    p.add_argument("--name", help="sweep name (default: the folder name)")
    p.add_argument("--wait-for-writer", type=float, metavar="SECONDS",
                   help="wait up to SECONDS while another live launcher runs this --out folder (default: refuse)")
    p.add_argument("--launcher", choices=["local", "accelerate"], default="local",
                   help="local: one run after another in this process; accelerate: each run under accelerate launch")
    p.add_argument("--workers", type=int, default=1,
                   help="(--launcher local) runs trained side by side in that many processes, the machine's cores "
                        "shared out among them (default 1; small CPU models gain from 2 or more)")
    p.add_argument("--accelerate-args", default="",
                   help="arguments for accelerate launch; pass with '=': --accelerate-args='--num_processes 8'")
    p.add_argument("--emit", choices=["slurm"], help="write a job-array script instead of running")
    p.add_argument("--sbatch", default="",
                   help="extra #SBATCH lines separated by ';'; pass with '=': --sbatch='--gres=gpu:8;--time=24:00:00'")
    p.set_defaults(func=_cmd_sweep)


# ================================================================================================ report
def _cmd_report(args) -> int:
    from depthbench.sweeps.report import ReportError, collect_results, print_table, write_report

    if not os.path.isdir(args.run_dir):
        raise ReportError(f"{args.run_dir} is not a folder (give the --out folder of a sweep)")
    paths = write_report(args.run_dir, log=lambda *_: None)
    print_table(collect_results(args.run_dir))
    print()
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _add_report(subparsers) -> None:
    r = subparsers.add_parser("report",
                              help="rebuild results.csv, the plot, report.md and report.html of a sweep folder")
    r.add_argument("run_dir", help="the --out folder of a sweep")
    r.set_defaults(func=_cmd_report)


# ================================================================================================ demo
def _cmd_demo(args) -> int:
    from depthbench.sweeps.demo import run_demo

    return run_demo(args.out, steps=args.steps, overrides=args.set, workers=args.workers, eval_limit=args.eval_limit)


def _add_demo(subparsers) -> None:
    from depthbench.sweeps import demo
    from depthbench.sweeps.demo import DEMO_MAX_WORKERS, DEMO_OUT, DEMO_STEPS, DEMO_TOKENS_PER_PARAMETER

    p = subparsers.add_parser("demo", help="the offline CPU demo: a small real aspect-ratio sweep (< 10 min)",
                              description=demo.__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEMO_OUT, help=f"results folder (default {DEMO_OUT})")
    p.add_argument("--steps", type=int, help=f"optimizer steps per run (default {DEMO_STEPS}: "
                   f"{DEMO_TOKENS_PER_PARAMETER} tokens per parameter of the largest model)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="run-config override for every run")
    p.add_argument("--workers", type=int, default=None,
                   help=f"runs trained side by side, one torch thread each (default: the usable cores, at most "
                        f"{DEMO_MAX_WORKERS})")
    p.add_argument("--eval-limit", type=int, default=None,
                   help="questions per synthetic task family in the closing evaluation (default: all 100)")
    p.set_defaults(func=_cmd_demo)


def register_cli(subparsers) -> None:
    """Add ``depthbench sweep``, ``depthbench report`` and ``depthbench demo``."""
    _add_sweep(subparsers)
    _add_report(subparsers)
    _add_demo(subparsers)
