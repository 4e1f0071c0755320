"""Aspect-ratio sweeps at a fixed parameter budget, the study's main experiment: definition, runner, job arrays.

    depthbench sweep --preset demo                       # = depthbench demo (the offline CPU demo)
    depthbench sweep --archs pre_ln,hc,attnres --grid 400m --depths 16,24,32 --data data/fineweb \\
        --lrs 1e-3,2e-3 --seeds 0 --config src/depthbench/configs/400m.yaml --out runs/400m
    depthbench sweep --archs pre_ln,hc --budget 20m --depths 4,8,16 --heads 8 --vocab-size 8192 \\
        --data runs/demo/data --out runs/20m  # explicit depths at a budget (design-rule shapes, no named grid)
    depthbench sweep ... --emit slurm                    # job array instead of running here
    depthbench report runs/400m                          # rebuild results.csv / plot / report.md

A sweep is the cross product (architecture x shape x learning rate x seed). Every point is one ordinary training
run (``depthbench.training.trainer.train``) in ``<out>/runs/<run id>/``; finished runs (``summary.json`` with status
``finished``, or ``diverged``: a non-finite loss is a result of that learning rate, not a crash) are skipped and
unfinished ones resume from their latest checkpoint, so an interrupted sweep continues where it stopped. The sweep
definition is stored in ``<out>/sweep.json``; re-running a different definition in the same folder is refused
(nothing is overwritten).

Shapes are named grid shapes (``tiny-L4``, resolved by ``depthbench.shapes.get_shape`` in the trainer) or, with
``--budget N --depths ...``, design-rule shapes from ``depthbench.shapes.shape_for_budget`` named
``budget<N>-L<depth>``; those are passed to the trainer as explicit ``model.fields`` (``SweepSpec.custom_shapes``).

Results (``results.csv``, ``results.jsonl``, ``loss_vs_aspect_ratio.png``, ``report.md``) are written by
``depthbench.sweeps.report`` after every run; ``depthbench report <out>`` rebuilds them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from depthbench import atomic, registry
from depthbench.config import load_run_config, read_config_file
from depthbench.errors import Failed
from depthbench.shapes import _parse_count, get_shape, grid_shapes, shape_for_budget
from depthbench.sweeps.report import (  # noqa: F401 - results names moved to depthbench.sweeps.report, re-exported for old imports
    best_points,
    collect_results,
    loss_changes,
    metric_label,
    plot_loss_vs_aspect_ratio,
    print_table,
    read_summary,
    render_report,
    result_metrics,
    write_report,
)


class SweepError(ValueError):
    """The sweep definition or results folder is invalid (the message says what and what is allowed)."""


class SweepRunFailed(Failed, SweepError):
    """A run of the sweep failed while training (exit code 1; the message names the run and says why)."""


#: Summary statuses after which a run is never trained again (``diverged``: the LR is too high, a valid result).
DONE_STATUSES = ("finished", "diverged")


# ================================================================================================ definition
@dataclass
class SweepSpec:
    """What to sweep.

    Attributes:
        archs: Architecture ids (``["all"]`` or a comma-separated string are accepted and resolved).
        shapes: Shape names: named grid shapes (``"tiny-L4"``) or keys of ``custom_shapes``.
        lrs: Peak learning rates (positive numbers); each (arch, shape) is reported at its best one.
        seeds: Training seeds (``train.seed``).
        base: Run-config dict (see ``depthbench.config``) applied to every run; the sweep sets ``model.arch``,
            ``model.shape`` (or ``model.fields`` for custom shapes), ``optim.lr``, ``train.seed``, ``output_dir``
            and ``resume=auto`` per run.
        overrides: Dotted run-config overrides for every run (``"train.max_steps=100"``), applied after ``base``
            and the shape, so ``model.fields.*`` overrides win over the shape.
        name: Display name (not part of the definition's fingerprint).
        custom_shapes: ``{shape name: config fields}`` for shapes outside the named grids (``--budget``).
        notes: Free text shown in ``report.md`` (not part of the fingerprint).
    """

    archs: list[str]
    shapes: list[str]
    lrs: list[float]
    seeds: list[int] = field(default_factory=lambda: [0])
    base: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    name: str = "sweep"
    custom_shapes: dict[str, dict[str, int]] = field(default_factory=dict)
    notes: str = ""

    def __post_init__(self) -> None:
        try:
            self.archs = _dedupe(registry.resolve_archs(self.archs))
        except ValueError as exc:
            raise SweepError(str(exc)) from None
        if not isinstance(self.custom_shapes, dict) or not all(
            isinstance(v, dict) and {"hidden_size", "num_hidden_layers"} <= set(v) for v in self.custom_shapes.values()
        ):
            raise SweepError("custom_shapes must map shape names to config fields with at least hidden_size and "
                             "num_hidden_layers")
        self.shapes = _dedupe(list(self.shapes or []))
        if not self.shapes:
            raise SweepError("the shape grid is empty: give a grid name with --grid (and optionally --depths), "
                             "--shapes, or --budget with --depths")
        for shape in self.shapes:
            if shape in self.custom_shapes:
                continue
            try:
                get_shape(shape)
            except ValueError as exc:  # names the valid grids / depths
                raise SweepError(f"unknown shape {shape!r}: {exc}") from None
        if isinstance(self.lrs, (int, float, str)):
            self.lrs = [self.lrs]
        if not self.lrs:
            raise SweepError("no learning rate given: --lrs takes positive numbers, e.g. 1e-3,2e-3")
        for lr in self.lrs:
            if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
                raise SweepError(f"learning rate {lr!r} is not allowed: learning rates must be positive numbers")
        self.lrs = _dedupe([float(lr) for lr in self.lrs])
        if not self.seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in self.seeds):
            raise SweepError(f"seeds {self.seeds!r} are not allowed: seeds must be a non-empty list of integers")
        self.seeds = _dedupe(list(self.seeds))
        if not isinstance(self.base, dict):
            raise SweepError(f"base must be a run-config dict, got {type(self.base).__name__}")
        if not all(isinstance(o, str) for o in self.overrides):
            raise SweepError(f"overrides must be 'section.key=value' strings, got {self.overrides!r}")
        ids = [p.run_id for p in self.runs()]
        if len(set(ids)) != len(ids):
            raise SweepError("two sweep points map to the same run folder (learning rates that agree to 6 "
                             f"significant digits?): {sorted({i for i in ids if ids.count(i) > 1})}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        """Hash of the definition (what would change results), used to refuse mixing two sweeps in one folder."""
        blob = json.dumps({k: v for k, v in self.to_dict().items() if k not in ("name", "notes")}, sort_keys=True,
                          default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def runs(self) -> list[RunPoint]:
        """Every point, architecture-major (all shapes, LRs and seeds of the first architecture come first)."""
        return [
            RunPoint(arch, shape, lr, seed)
            for arch in self.archs
            for shape in self.shapes
            for lr in self.lrs
            for seed in self.seeds
        ]

    def run_overrides(self, point: RunPoint, run_dir: str) -> list[str]:
        """The dotted overrides that turn ``base`` into the run config of ``point`` (shape, then the sweep's
        overrides, then the point's identity and ``output_dir``)."""
        shape = []
        if point.shape in self.custom_shapes:
            shape = ["model.shape=null"] + [f"model.fields.{k}={json.dumps(v)}"
                                            for k, v in sorted(self.custom_shapes[point.shape].items())]
        return shape + list(self.overrides) + point.overrides(run_dir, named_shape=not shape)

    def run_config(self, point: RunPoint, run_dir: str):
        """The validated ``depthbench.config.RunConfig`` of ``point``; raises :class:`SweepError` naming the key."""
        try:
            return load_run_config(self.base, self.run_overrides(point, run_dir))
        except ValueError as exc:
            raise SweepError(f"invalid run config for {point.run_id}: {exc}") from None


def _dedupe(items: list) -> list:
    return list(dict.fromkeys(items))


@dataclass(frozen=True)
class RunPoint:
    """One point of the sweep (one training run)."""

    arch: str
    shape: str
    lr: float
    seed: int

    @property
    def run_id(self) -> str:
        """Folder name under ``<out>/runs``, e.g. ``pre_ln__tiny-L4__lr0.002__s0``."""
        return f"{self.arch}__{self.shape}__lr{self.lr:g}__s{self.seed}"

    def overrides(self, run_dir: str, named_shape: bool = True) -> list[str]:
        """The point's identity as dotted overrides (``model.shape`` only when ``named_shape``: a grid shape)."""
        return [
            f"model.arch={self.arch}",
            *([f"model.shape={self.shape}"] if named_shape else []),
            f"optim.lr={self.lr!r}",
            f"train.seed={self.seed}",
            f"output_dir={json.dumps(run_dir)}",
            "resume=auto",
        ]


def budget_shapes(budget: int | str, depths: list[int], *, vocab_size: int = 50280, heads: int = 16,
                  kv_heads: int | None = None, count: str = "total") -> tuple[list[str], dict[str, dict[str, int]]]:
    """Design-rule shapes at an explicit budget: ``(names, {name: config fields})`` for :class:`SweepSpec`.

    ``budget`` is a count or text like ``"20m"``; shapes are named ``budget<budget>-L<depth>``.
    """
    text = str(budget).strip().lower()
    try:
        n = _parse_count(text) if isinstance(budget, str) else int(budget)
        if not depths:
            raise ValueError("--depths is required with --budget (e.g. --depths 4,8,16)")
        shapes = [shape_for_budget(n, depth, vocab_size=vocab_size, heads=heads, kv_heads=kv_heads, count=count)
                  for depth in depths]
    except ValueError as exc:
        raise SweepError(str(exc)) from None
    names = [f"budget{text}-L{s.num_layers}" for s in shapes]
    return names, {name: s.config_fields() for name, s in zip(names, shapes)}


# ================================================================================================ running
def _check_folder(spec: SweepSpec, out_dir: str) -> None:
    """Validate every run config, refuse a folder of another sweep, then (only then) write ``sweep.json``."""
    points = spec.runs()
    for point in points:
        spec.run_config(point, os.path.join(out_dir, "runs", point.run_id))
    path = os.path.join(out_dir, "sweep.json")
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                old = json.load(f)
        except (OSError, json.JSONDecodeError) as exc:
            raise SweepError(f"cannot read {path} ({exc}); use another --out folder (nothing was overwritten)"
                             ) from None
        if old.get("fingerprint") != spec.fingerprint():
            raise SweepError(
                f"{out_dir} holds results of a different sweep definition ({path}: {_describe(old.get('spec'))}; "
                f"this one: {_describe(spec.to_dict())}); use another --out folder (nothing was overwritten)"
            )
    elif os.path.isdir(os.path.join(out_dir, "runs")) and os.listdir(os.path.join(out_dir, "runs")):
        raise SweepError(f"{out_dir} has a runs/ folder but no sweep.json: it is not a folder of this sweep; use "
                         "another --out folder (nothing was overwritten)")
    os.makedirs(out_dir, exist_ok=True)
    atomic.write_json(path, {"fingerprint": spec.fingerprint(), "spec": spec.to_dict(), "runs": len(points)})


def _describe(spec: dict[str, Any] | None) -> str:
    if not isinstance(spec, dict):
        return "unknown"
    steps = ((spec.get("base") or {}).get("train") or {}).get("max_steps")
    return (f"archs {','.join(spec.get('archs', []))}, shapes {','.join(spec.get('shapes', []))}, lrs "
            f"{','.join(f'{lr:g}' for lr in spec.get('lrs', []))}, seeds {','.join(map(str, spec.get('seeds', [])))}"
            + (f", {steps} steps" if steps else "") + (f", overrides {spec['overrides']}" if spec.get("overrides")
                                                       else ""))



def run_sweep(
    spec: SweepSpec,
    out_dir: str,
    *,
    launcher: str = "local",
    accelerate_args: str = "",
    log: Callable[..., None] = print,
) -> list[dict[str, Any]]:
    """Run (or continue) every point of ``spec`` into ``out_dir``; returns the result rows.

    ``launcher="local"`` trains in this process one run after another; ``"accelerate"`` runs each point as
    ``accelerate launch <accelerate_args> -m depthbench.cli train ...`` (DDP/FSDP2 per run). A run that diverges
    (non-finite loss) is recorded with status ``diverged`` and the sweep goes on; a run stopped by a signal
    (SIGTERM/SIGINT: checkpointed) stops the sweep, and the next invocation resumes it.

    Raises:
        SweepError: Invalid definition, a folder of another sweep, missing data, or a failed run.
    """
    if launcher not in ("local", "accelerate"):
        raise SweepError(f"launcher={launcher!r} is not allowed: launcher must be 'local' or 'accelerate'")
    data_dir = (spec.base.get("data") or {}).get("data_dir")
    probe = spec.run_config(spec.runs()[0], os.path.join(out_dir, "runs", "probe"))
    data_dir = probe.data.data_dir or data_dir
    if not data_dir or not os.path.isfile(os.path.join(data_dir, "meta.json")):
        raise SweepError(f"data.data_dir={data_dir!r} is not a prepared data folder (no meta.json); prepare one with "
                         "`depthbench prepare-data` and pass it with --data (nothing was written)")
    _check_folder(spec, out_dir)
    points = spec.runs()
    started = time.time()
    for k, point in enumerate(points, 1):
        run_dir = os.path.join(out_dir, "runs", point.run_id)
        summary = read_summary(run_dir)
        if summary and summary.get("status") in DONE_STATUSES:
            log(f"[{k}/{len(points)}] {point.run_id}: {summary['status']} earlier, skipped")
            continue
        resuming = "resuming" if summary or os.path.exists(os.path.join(run_dir, "run_config.json")) else "training"
        log(f"[{k}/{len(points)}] {point.run_id}: {resuming} ({time.time() - started:.0f}s into the sweep)")
        overrides = spec.run_overrides(point, run_dir)
        if launcher == "local":
            status = _train_local(spec.base, overrides, log, run_dir)
        else:
            status = _train_accelerate(spec.base, overrides, out_dir, run_dir, accelerate_args, log)
        write_report(out_dir, log=lambda *_: None, plot=False)  # partial results stay visible while the sweep runs
        if status == "stopped":
            log(f"sweep stopped during {point.run_id} (checkpointed); run the same command again to continue")
            break
    paths = write_report(out_dir, log=log)
    log(f"sweep done in {time.time() - started:.0f}s; results: {paths['csv']}")
    return collect_results(out_dir)


def _train_local(base: dict[str, Any], overrides: list[str], log: Callable[..., None], run_dir: str = "") -> str:
    # imported here: the trainer loads torch and accelerate (import cost: `depthbench sweep --emit slurm` and
    # `--launcher accelerate` never train in this process)
    from depthbench.training.checkpoint import CheckpointError, TrainingError
    from depthbench.training.trainer import NonFiniteLossError, train

    try:
        return train(load_run_config(base, overrides))["status"]
    except NonFiniteLossError as exc:
        log(f"  diverged: {exc}")
        return "diverged"
    except CheckpointError as exc:  # a corrupt checkpoint is bad input: the message, not a traceback
        raise SweepError(f"run {run_dir} cannot continue: {exc}. The sweep stopped here; repair or remove that run "
                         "folder and run the same command again (finished runs are skipped)") from None
    except (TrainingError, OSError) as exc:
        raise SweepRunFailed(f"run {run_dir} failed: {exc}. The sweep stopped here; run the same command again to "
                             "continue (finished runs are skipped)") from None


def _train_accelerate(base: dict[str, Any], overrides: list[str], out_dir: str, run_dir: str, accelerate_args: str,
                      log: Callable[..., None]) -> str:
    os.makedirs(run_dir, exist_ok=True)
    base_path = os.path.join(out_dir, "base_config.json")
    atomic.write_json(base_path, base)
    cmd = ["accelerate", "launch", *shlex.split(accelerate_args), "-m", "depthbench.cli", "train",
           "--config", base_path, *overrides]
    proc = subprocess.run(cmd, check=False)
    summary = read_summary(run_dir) or {}
    if proc.returncode != 0 and summary.get("status") != "diverged":
        error = SweepError if proc.returncode == 2 else SweepRunFailed
        raise error(f"training run failed with exit code {proc.returncode}: {shlex.join(cmd)}")
    return summary.get("status", "stopped")


def emit_slurm(spec: SweepSpec, out_dir: str, *, accelerate_args: str = "", sbatch: str = "") -> str:
    """Write ``<out>/sweep.slurm`` (a job array, one task per run) and ``<out>/runs.txt``; returns the script path.

    Line ``i`` of ``runs.txt`` is ``<run id> <dotted overrides...>`` (shell-quoted) for array task ``i``. Each task
    exits at once when its run already has a finished/diverged ``summary.json``, otherwise runs
    ``accelerate launch ... -m depthbench.cli train --config base_config.json <overrides>`` (which resumes an
    unfinished run), so the array can simply be resubmitted. Rebuild the report with ``depthbench report <out>``.
    """
    _check_folder(spec, out_dir)
    base_path = os.path.abspath(os.path.join(out_dir, "base_config.json"))
    atomic.write_json(base_path, spec.base)
    lines = []
    for point in spec.runs():
        run_dir = os.path.abspath(os.path.join(out_dir, "runs", point.run_id))
        lines.append(" ".join(shlex.quote(a) for a in [point.run_id, *spec.run_overrides(point, run_dir)]))
    runs_path = os.path.abspath(os.path.join(out_dir, "runs.txt"))
    with open(runs_path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    script = os.path.join(out_dir, "sweep.slurm")
    extra = "".join(f"#SBATCH {line.strip()}\n" for line in sbatch.split(";") if line.strip())
    runs_root = shlex.quote(os.path.join(os.path.abspath(out_dir), "runs"))
    done = ("import json,sys; s=json.load(open(sys.argv[1])); "
            f"sys.exit(0 if s.get('status') in {sorted(DONE_STATUSES)!r} else 1)")
    with open(script, "w", encoding="utf-8") as f:
        f.write(
            "#!/bin/bash\n"
            f"#SBATCH --job-name=depthbench-{spec.name}\n"
            f"#SBATCH --array=1-{len(lines)}\n"
            f"#SBATCH --output={os.path.abspath(out_dir)}/slurm-%A_%a.out\n"
            f"{extra}"
            f"# {len(lines)} runs of sweep {spec.name} (fingerprint {spec.fingerprint()}); resubmitting is safe.\n"
            "set -euo pipefail\n"
            f"cd {shlex.quote(os.getcwd())}  # relative paths (configs, data) as when the array was written\n"
            f'LINE=$(sed -n "${{SLURM_ARRAY_TASK_ID}}p" {shlex.quote(runs_path)})\n'
            'RUN_ID=${LINE%% *}\n'
            'ARGS=${LINE#* }\n'
            f'SUMMARY={runs_root}/"$RUN_ID"/summary.json\n'
            f'if [ -f "$SUMMARY" ] && python -c {shlex.quote(done)} "$SUMMARY"; then\n'
            '    echo "$RUN_ID: already done, skipped"; exit 0\n'
            "fi\n"
            f"eval accelerate launch {accelerate_args} -m depthbench.cli train "
            f"--config {shlex.quote(base_path)} $ARGS\n"
        )
    return script


# ================================================================================================ CLI
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
    if not (args.archs and (args.grid or args.shapes or args.budget)):
        raise SweepError("give --preset demo, or --archs and --grid/--shapes/--budget (see depthbench sweep --help)")
    spec = spec_from_args(args)
    if args.emit == "slurm":
        path = emit_slurm(spec, args.out, accelerate_args=args.accelerate_args, sbatch=args.sbatch)
        print(f"wrote {path} ({len(spec.runs())} array tasks) and {os.path.join(args.out, 'runs.txt')}; "
              f"submit with: sbatch {path}; afterwards: depthbench report {args.out}")
        return 0
    rows = run_sweep(spec, args.out, launcher=args.launcher, accelerate_args=args.accelerate_args)
    print()
    print_table(rows)
    return 0


def register_cli(subparsers) -> None:
    """Add ``depthbench sweep`` (``depthbench sweep --preset demo`` is resolved to ``depthbench demo`` by
    ``depthbench.cli``)."""
    p = subparsers.add_parser("sweep", help="train architectures x aspect ratios at a fixed parameter budget",
                              description=__doc__.split("\n\n")[0],
                              epilog="--preset demo: an alias of `depthbench demo` (the offline CPU demo)")
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
    p.add_argument("--launcher", choices=["local", "accelerate"], default="local",
                   help="local: one run after another in this process; accelerate: each run under accelerate launch")
    p.add_argument("--accelerate-args", default="",
                   help="arguments for accelerate launch; pass with '=': --accelerate-args='--num_processes 8'")
    p.add_argument("--emit", choices=["slurm"], help="write a job-array script instead of running")
    p.add_argument("--sbatch", default="",
                   help="extra #SBATCH lines separated by ';'; pass with '=': --sbatch='--gres=gpu:8;--time=24:00:00'")
    p.set_defaults(func=_cmd_sweep)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(print("use: depthbench sweep ...") or 2)
