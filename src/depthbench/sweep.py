"""Aspect-ratio sweeps at a fixed parameter budget: the study's main experiment, and its report.

    depthbench sweep --preset demo                       # offline CPU demo, < 10 min on 2 cores
    depthbench sweep --archs pre_ln,hc,attnres --grid 400m --depths 16,24,32 --data data/fineweb \\
        --lrs 1e-3,2e-3 --seeds 0 --config src/depthbench/configs/400m.yaml --out runs/400m
    depthbench sweep --archs pre_ln,hc --budget 20m --depths 4,8,16 --heads 8 --vocab-size 8192 \\
        --data runs/demo/data --out runs/20m  # explicit depths at a budget (design-rule shapes, no named grid)
    depthbench sweep ... --emit slurm                    # job array instead of running here
    depthbench report runs/400m                          # rebuild results.csv / plot / report.md

A sweep is the cross product (architecture x shape x learning rate x seed). Every point is one ordinary training
run (``depthbench.train.train``) in ``<out>/runs/<run id>/``; finished runs (``summary.json`` with status
``finished``, or ``diverged``: a non-finite loss is a result of that learning rate, not a crash) are skipped and
unfinished ones resume from their latest checkpoint, so an interrupted sweep continues where it stopped. The sweep
definition is stored in ``<out>/sweep.json``; re-running a different definition in the same folder is refused
(nothing is overwritten).

Shapes are named grid shapes (``tiny-L4``, resolved by ``depthbench.shapes.get_shape`` in the trainer) or, with
``--budget N --depths ...``, design-rule shapes from ``depthbench.shapes.shape_for_budget`` named
``budget<N>-L<depth>``; those are passed to the trainer as explicit ``model.fields`` (``SweepSpec.custom_shapes``).

Results: ``results.csv`` / ``results.jsonl`` (one row per run: architecture, L, d, d/L, parameters, tokens, final
train loss, held-out losses, learning rate, the best learning rate of its (architecture, shape), seed, wall time,
tokens/s), ``loss_vs_aspect_ratio.png`` (held-out loss against d/L, one line per architecture at its best learning
rate, mean and min-max over seeds; one panel per eval split plus their mean) and ``report.md`` (the setup, the
plot, the best-LR table and each architecture's loss change from the shallowest to the deepest shape).
"""

from __future__ import annotations

import csv
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

from depthbench import registry


class SweepError(ValueError):
    """The sweep definition or results folder is invalid (the message says what and what is allowed)."""


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
        from depthbench.shapes import get_shape

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
        from depthbench.config import load_run_config

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
    from depthbench.shapes import _parse_count, shape_for_budget

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
    _write_json_atomic(path, {"fingerprint": spec.fingerprint(), "spec": spec.to_dict(), "runs": len(points)})


def _describe(spec: dict[str, Any] | None) -> str:
    if not isinstance(spec, dict):
        return "unknown"
    steps = ((spec.get("base") or {}).get("train") or {}).get("max_steps")
    return (f"archs {','.join(spec.get('archs', []))}, shapes {','.join(spec.get('shapes', []))}, lrs "
            f"{','.join(f'{lr:g}' for lr in spec.get('lrs', []))}, seeds {','.join(map(str, spec.get('seeds', [])))}"
            + (f", {steps} steps" if steps else "") + (f", overrides {spec['overrides']}" if spec.get("overrides")
                                                       else ""))


def _write_json_atomic(path: str, data: Any) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, default=str)
    os.replace(tmp, path)


def _read_json(path: str) -> Any:
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def _read_summary(run_dir: str) -> dict[str, Any] | None:
    summary = _read_json(os.path.join(run_dir, "summary.json"))
    return summary if isinstance(summary, dict) else None


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
        summary = _read_summary(run_dir)
        if summary and summary.get("status") in DONE_STATUSES:
            log(f"[{k}/{len(points)}] {point.run_id}: {summary['status']} earlier, skipped")
            continue
        resuming = "resuming" if summary or os.path.exists(os.path.join(run_dir, "run_config.json")) else "training"
        log(f"[{k}/{len(points)}] {point.run_id}: {resuming} ({time.time() - started:.0f}s into the sweep)")
        overrides = spec.run_overrides(point, run_dir)
        if launcher == "local":
            status = _train_local(spec.base, overrides, log)
        else:
            status = _train_accelerate(spec.base, overrides, out_dir, run_dir, accelerate_args, log)
        write_report(out_dir, log=lambda *_: None, plot=False)  # partial results stay visible while the sweep runs
        if status == "stopped":
            log(f"sweep stopped during {point.run_id} (checkpointed); run the same command again to continue")
            break
    paths = write_report(out_dir, log=log)
    log(f"sweep done in {time.time() - started:.0f}s; results: {paths['csv']}")
    return collect_results(out_dir)


def _train_local(base: dict[str, Any], overrides: list[str], log: Callable[..., None]) -> str:
    from depthbench.config import load_run_config
    from depthbench.train import NonFiniteLossError, train

    try:
        return train(load_run_config(base, overrides))["status"]
    except NonFiniteLossError as exc:
        log(f"  diverged: {exc}")
        return "diverged"


def _train_accelerate(base: dict[str, Any], overrides: list[str], out_dir: str, run_dir: str, accelerate_args: str,
                      log: Callable[..., None]) -> str:
    os.makedirs(run_dir, exist_ok=True)
    base_path = os.path.join(out_dir, "base_config.json")
    _write_json_atomic(base_path, base)
    cmd = ["accelerate", "launch", *shlex.split(accelerate_args), "-m", "depthbench.cli", "train",
           "--config", base_path, *overrides]
    proc = subprocess.run(cmd, check=False)
    summary = _read_summary(run_dir) or {}
    if proc.returncode != 0 and summary.get("status") != "diverged":
        raise SweepError(f"training run failed with exit code {proc.returncode}: {shlex.join(cmd)}")
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
    _write_json_atomic(base_path, spec.base)
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


# ================================================================================================ results
_COLUMNS = [
    "arch", "shape", "num_layers", "hidden_size", "aspect_ratio", "params_total", "params_backbone", "params_extra",
    "lr", "seed", "tokens", "steps", "final_train_loss", "eval_loss", "best_lr", "at_best_lr", "wall_time_s",
    "tokens_per_s", "status",
]


def _split_column(split: str) -> str:
    """Result column of an eval split: ``eval_text`` -> ``eval_text``, ``val`` -> ``eval_val``, ``eval`` ->
    ``eval_heldout`` (``eval_loss`` is reserved for the mean over splits)."""
    if split == "eval":
        return "eval_heldout"
    return split if split.startswith("eval_") and split != "eval_loss" else f"eval_{split}"


def _row(run_dir: str, summary: dict[str, Any]) -> dict[str, Any]:
    record = _read_json(os.path.join(run_dir, "run_config.json")) or {}
    cfg = record.get("config") or {}
    resolved = record.get("resolved") or {}
    model_cfg = resolved.get("model_config") or {}
    arch = summary.get("arch") or (cfg.get("model") or {}).get("arch")
    shape_name = (cfg.get("model") or {}).get("shape") or os.path.basename(run_dir).split("__")[1:2]
    if isinstance(shape_name, list):
        shape_name = shape_name[0] if shape_name else None
    num_layers, hidden = model_cfg.get("num_hidden_layers"), model_cfg.get("hidden_size")
    params = summary.get("parameters") or resolved.get("parameter_counts") or {}
    evals = summary.get("eval") or {}
    wall = summary.get("wall_time_s")
    state = _latest_trainer_state(run_dir)
    if state and state.get("train_time_s"):  # summed over sessions (summary.json holds the last session only)
        wall = max(wall or 0.0, state["train_time_s"])
    row: dict[str, Any] = {
        "arch": arch,
        "shape": shape_name,
        "num_layers": num_layers,
        "hidden_size": hidden,
        "aspect_ratio": round(hidden / num_layers, 3) if num_layers and hidden else None,
        "params_total": params.get("total"),
        "params_backbone": params.get("backbone"),
        "params_extra": params.get("extra"),
        "lr": (cfg.get("optim") or {}).get("lr"),
        "seed": (cfg.get("train") or {}).get("seed"),
        "tokens": summary.get("tokens"),
        "steps": summary.get("steps"),
        "final_train_loss": summary.get("final_train_loss"),
        "wall_time_s": round(wall, 2) if isinstance(wall, (int, float)) else None,
        "tokens_per_s": round(summary["tokens_per_s"], 1) if summary.get("tokens_per_s") else None,
        "status": summary.get("status"),
        "run_dir": run_dir,
    }
    for split, loss in sorted(evals.items()):
        row[_split_column(split)] = loss
    row["eval_loss"] = _main_eval(evals)
    return row


def _latest_trainer_state(run_dir: str) -> dict[str, Any] | None:
    root = os.path.join(run_dir, "checkpoints")
    try:
        with open(os.path.join(root, "latest"), encoding="utf-8") as f:
            name = f.read().strip()
    except OSError:
        return None
    state = _read_json(os.path.join(root, name, "trainer_state.json"))
    return state if isinstance(state, dict) else None


def _main_eval(evals: dict[str, float]) -> float | None:
    """The selection metric: the mean over the eval splits (each split is also reported on its own)."""
    vals = [v for v in evals.values() if isinstance(v, (int, float)) and math.isfinite(v)]
    return sum(vals) / len(vals) if vals and len(vals) == len(evals) else None


def collect_results(out_dir: str) -> list[dict[str, Any]]:
    """One row per run found under ``<out>/runs`` (finished or not), with ``best_lr`` / ``at_best_lr`` marked."""
    runs_root = os.path.join(out_dir, "runs")
    rows = []
    for name in sorted(os.listdir(runs_root)) if os.path.isdir(runs_root) else []:
        summary = _read_summary(os.path.join(runs_root, name))
        if summary is not None:
            rows.append(_row(os.path.join(runs_root, name), summary))
    _mark_best_lr(rows)
    return rows


def _mark_best_lr(rows: list[dict[str, Any]]) -> None:
    """Per (arch, shape), the learning rate with the lowest mean (over seeds) ``eval_loss`` among finished runs is
    ``best_lr``; ``at_best_lr`` marks the rows trained at it."""
    by_point: dict[tuple, dict[float, list[float]]] = {}
    for r in rows:
        if r["eval_loss"] is not None and r["status"] == "finished":
            by_point.setdefault((r["arch"], r["shape"]), {}).setdefault(r["lr"], []).append(r["eval_loss"])
    best = {k: min(sorted(v), key=lambda lr: sum(v[lr]) / len(v[lr])) for k, v in by_point.items()}
    for r in rows:
        r["best_lr"] = best.get((r["arch"], r["shape"]))
        r["at_best_lr"] = r["best_lr"] is not None and r["best_lr"] == r["lr"] and r["status"] == "finished"


def best_points(rows: list[dict[str, Any]], metric: str = "eval_loss") -> dict[str, list[dict[str, Any]]]:
    """Per architecture, one entry per shape at its best learning rate: mean, min and max of ``metric`` over
    seeds; sorted from the shallowest (widest, largest d/L) to the deepest shape."""
    out: dict[str, list[dict[str, Any]]] = {}
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("at_best_lr") and isinstance(r.get(metric), (int, float)) and math.isfinite(r[metric]):
            groups.setdefault((r["arch"], r["shape"]), []).append(r)
    for (arch, shape), rs in groups.items():
        vals = [r[metric] for r in rs]
        out.setdefault(arch, []).append({
            "shape": shape, "num_layers": rs[0]["num_layers"], "hidden_size": rs[0]["hidden_size"],
            "aspect_ratio": rs[0]["aspect_ratio"], "lr": rs[0]["lr"], "seeds": len(vals),
            "params_total": rs[0]["params_total"], "mean": sum(vals) / len(vals), "min": min(vals),
            "max": max(vals),
        })
    for arch in out:
        out[arch].sort(key=lambda p: (p["num_layers"] or 0, -(p["aspect_ratio"] or 0)))
    return out


def result_metrics(rows: list[dict[str, Any]]) -> list[str]:
    """The held-out metrics to report: each eval split's column, then their mean ``eval_loss`` (only the mean when
    there is a single split). Synthetic splits come first, as they are the ones meant to measure depth."""
    splits = sorted({k for r in rows for k in r if k.startswith("eval_") and k != "eval_loss"},
                    key=lambda k: (0 if "synthetic" in k else 1, k))
    return [*splits, "eval_loss"] if len(splits) > 1 else ["eval_loss"]


def metric_label(metric: str) -> str:
    """Human-readable name of a result metric."""
    if metric == "eval_loss":
        return "mean of the eval splits"
    name = metric.removeprefix("eval_")
    return {"synthetic": "synthetic depth tasks", "text": "held-out text", "heldout": "held-out"}.get(name, name)


def write_report(out_dir: str, *, log: Callable[..., None] = print, plot: bool = True) -> dict[str, str]:
    """(Re)build ``results.csv``, ``results.jsonl``, the plot (unless ``plot=False``: the previous one stays) and
    ``report.md`` from the run summaries; returns ``{"csv", "jsonl", "plot", "report"}`` paths (no ``plot`` when
    none exists)."""
    rows = collect_results(out_dir)
    if not rows:
        raise SweepError(f"no finished or started runs under {os.path.join(out_dir, 'runs')}: nothing to report")
    metrics = result_metrics(rows)
    columns = _COLUMNS[:_COLUMNS.index("eval_loss")] + [m for m in metrics if m != "eval_loss"] + \
        _COLUMNS[_COLUMNS.index("eval_loss"):] + ["run_dir"]
    paths = {k: os.path.join(out_dir, name) for k, name in
             [("csv", "results.csv"), ("jsonl", "results.jsonl"), ("plot", "loss_vs_aspect_ratio.png"),
              ("report", "report.md")]}
    order = sorted(rows, key=_row_order)
    with open(paths["csv"] + ".tmp", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(order)
    os.replace(paths["csv"] + ".tmp", paths["csv"])
    with open(paths["jsonl"] + ".tmp", "w", encoding="utf-8") as f:
        for r in order:
            f.write(json.dumps(r, default=str) + "\n")
    os.replace(paths["jsonl"] + ".tmp", paths["jsonl"])
    plotted = (plot_loss_vs_aspect_ratio(rows, paths["plot"], metrics=metrics) if plot
               else os.path.exists(paths["plot"]))
    definition = (_read_json(os.path.join(out_dir, "sweep.json")) or {}).get("spec")
    with open(paths["report"] + ".tmp", "w", encoding="utf-8") as f:
        f.write(render_report(rows, metrics, plot_name=os.path.basename(paths["plot"]) if plotted else None,
                              spec=definition))
    os.replace(paths["report"] + ".tmp", paths["report"])
    if not plotted:
        paths.pop("plot")
    log("wrote " + ", ".join(paths.values()))
    return paths


def _row_order(r: dict[str, Any]) -> tuple:
    return (str(r["arch"]), r["num_layers"] or 0, r["lr"] or 0, r["seed"] or 0)


def plot_loss_vs_aspect_ratio(rows: list[dict[str, Any]], path: str, metrics: list[str]) -> bool:
    """One panel per metric: held-out loss (best LR; mean over seeds, min-max band) against d/L, one line per
    architecture, wide-shallow on the left, deep-narrow on the right (log axis). Returns False when matplotlib is
    missing or nothing finished yet."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullLocator
    except ImportError:
        return False
    per_metric = {m: best_points(rows, m) for m in metrics}
    if not any(per_metric.values()):
        return False
    archs = sorted({a for pts in per_metric.values() for a in pts})
    colors = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(archs)}
    markers = "osD^vP*Xh<>"
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.8 * len(metrics), 4.4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        ticks: dict[float, int] = {}
        for i, arch in enumerate(archs):
            points = per_metric[metric].get(arch, [])
            if not points:
                continue
            xs = [p["aspect_ratio"] for p in points]
            seeds = max(p["seeds"] for p in points)
            label = arch + (f" (n={seeds} seeds)" if seeds > 1 else "")
            ax.plot(xs, [p["mean"] for p in points], marker=markers[i % len(markers)], color=colors[arch],
                    label=label, lw=1.6, ms=5)
            if seeds > 1:
                ax.fill_between(xs, [p["min"] for p in points], [p["max"] for p in points], color=colors[arch],
                                alpha=0.15, lw=0)
            for p in points:
                ticks[p["aspect_ratio"]] = p["num_layers"]
        ax.set_xscale("log")
        ax.set_xticks(sorted(ticks))
        ax.set_xticklabels([f"{x:.3g}\nL{ticks[x]}" for x in sorted(ticks)], fontsize=8)
        ax.xaxis.set_minor_locator(NullLocator())  # only the shapes' d/L as ticks
        ax.invert_xaxis()
        ax.set_xlabel("aspect ratio d/L (depth L below)\nwide-shallow  \u2192  deep-narrow", fontsize=9)
        ax.set_ylabel("held-out loss (nats/token)", fontsize=9)
        ax.set_title(f"{metric_label(metric)}\n({metric})", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    n_seeds = max((p["seeds"] for pts in per_metric.values() for ps in pts.values() for p in ps), default=1)
    band = "; band = min-max over seeds" if n_seeds > 1 else "; one seed per point"
    fig.suptitle(f"Held-out loss vs aspect ratio at a fixed parameter budget (best LR per point{band})",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return True


def loss_changes(rows: list[dict[str, Any]], metrics: list[str]) -> list[dict[str, Any]]:
    """Per architecture and metric: best-LR loss at the shallowest and the deepest shape and the change."""
    out = []
    for metric in metrics:
        for arch, points in sorted(best_points(rows, metric).items()):
            if len(points) < 2:
                continue
            a, b = points[0], points[-1]
            out.append({"arch": arch, "metric": metric, "shallow": a, "deep": b, "change": b["mean"] - a["mean"],
                        "relative": (b["mean"] - a["mean"]) / a["mean"] if a["mean"] else None})
    return out


def render_report(rows: list[dict[str, Any]], metrics: list[str], plot_name: str | None,
                  spec: dict[str, Any] | None = None) -> str:
    """The markdown report: setup, plot, best-LR table, loss change shallow -> deep, all runs."""
    spec = spec or {}
    lines = [f"# Aspect-ratio sweep{': ' + spec['name'] if spec.get('name') else ''}", ""]
    n_done = sum(r["status"] == "finished" for r in rows)
    n_div = sum(r["status"] == "diverged" for r in rows)
    n_planned = len(spec.get("archs", [])) * len(spec.get("shapes", [])) * len(spec.get("lrs", [])) * len(
        spec.get("seeds", [])) or len(rows)
    lines += [f"{n_done} of {n_planned} runs finished" + (f", {n_div} diverged" if n_div else "")
              + (f", {n_planned - len(rows)} not started" if n_planned > len(rows) else "") + ". "
              "Each (architecture, shape) is shown at its best learning rate (lowest mean held-out loss over seeds, "
              "`eval_loss`). Losses are mean next-token cross-entropy in nats/token on held-out data; lower is "
              "better.", ""]
    if spec.get("notes"):
        lines += [spec["notes"].strip(), ""]
    if spec:
        base = spec.get("base") or {}
        train, data, optim = base.get("train") or {}, base.get("data") or {}, base.get("optim") or {}
        finished = [r for r in rows if r["status"] == "finished"]
        tokens = sorted({r["tokens"] for r in finished if r.get("tokens")})
        lines += ["## Setup", "",
                  f"- architectures: {', '.join(spec.get('archs', []))}",
                  f"- shapes: {', '.join(spec.get('shapes', []))}",
                  f"- learning rates: {', '.join(f'{lr:g}' for lr in spec.get('lrs', []))}; "
                  f"seeds: {', '.join(map(str, spec.get('seeds', [])))}",
                  f"- recipe: {train.get('max_steps') or _common([r.get('steps') for r in finished]) or '?'} steps of "
                  f"{train.get('global_batch_size', '?')} x "
                  f"{data.get('seq_len', '?')} tokens"
                  + (f" ({tokens[0]:,} tokens per run)" if len(tokens) == 1 else "")
                  + f", AdamW wd {optim.get('weight_decay', 0.1)}, warmup {optim.get('warmup_fraction', 0.1):g}, "
                  f"cosine to {optim.get('min_lr_ratio', 0.1):g} x peak, clip {optim.get('grad_clip', 1.0):g}",
                  f"- data: `{data.get('data_dir', '?')}`",
                  *([f"- overrides: `{' '.join(spec['overrides'])}`"] if spec.get("overrides") else []),
                  ""]
    if plot_name:
        lines += [f"![held-out loss vs aspect ratio]({plot_name})", ""]
    lines += ["## Best learning rate per shape", "",
              "| arch | shape | L | d | d/L | params | best lr | seeds | "
              + " | ".join(f"{metric_label(m)} (`{m}`)" for m in metrics) + " |",
              "|---|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(metrics)]
    per_metric = {m: best_points(rows, m) for m in metrics}
    for arch, points in sorted(per_metric[metrics[-1]].items()):
        for p in points:
            cells = []
            for m in metrics:
                q = next((q for q in per_metric[m].get(arch, []) if q["shape"] == p["shape"]), None)
                cells.append("" if q is None else f"{q['mean']:.4f}" + (
                    f" ({q['min']:.4f}-{q['max']:.4f})" if q["seeds"] > 1 else ""))
            lines.append(f"| {arch} | {p['shape']} | {p['num_layers']} | {p['hidden_size']} | "
                         f"{p['aspect_ratio']:.1f} | {_fmt_params(p['params_total'])} | {p['lr']:g} | {p['seeds']} | "
                         + " | ".join(cells) + " |")
    lines += ["", "## Loss change from the shallowest to the deepest shape", "",
              "Negative = the deepest shape reached a lower held-out loss than the shallowest at the same "
              "parameter budget.", "",
              "| arch | metric | shallowest (L, d/L) | deepest (L, d/L) | loss (shallow \u2192 deep) | change | "
              "relative |", "|---|---|---|---|---|---:|---:|"]
    for c in loss_changes(rows, metrics):
        a, b = c["shallow"], c["deep"]
        lines.append(f"| {c['arch']} | {metric_label(c['metric'])} | L{a['num_layers']}, {a['aspect_ratio']:.1f} | "
                     f"L{b['num_layers']}, {b['aspect_ratio']:.1f} | {a['mean']:.4f} \u2192 {b['mean']:.4f} | "
                     f"{c['change']:+.4f} | {100 * c['relative']:+.1f}% |")
    lines += ["", "## All runs", ""]
    cols = ["arch", "shape", "num_layers", "hidden_size", "aspect_ratio", "params_total", "lr", "seed", "steps",
            "tokens", "final_train_loss", *metrics, "at_best_lr", "wall_time_s", "tokens_per_s", "status"]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in sorted(rows, key=_row_order):
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _common(values: list[Any]) -> Any:
    """The value shared by all ``values`` (None when they differ or are empty)."""
    return values[0] if values and all(v == values[0] for v in values) else None


def _fmt_params(n: int | None) -> str:
    return "" if n is None else f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n / 1e3:.1f}k"


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"
    return "" if v is None else str(v)


def print_table(rows: list[dict[str, Any]], metrics: list[str] | None = None, log: Callable[..., None] = print
                ) -> None:
    """The closing terminal table: per architecture and shape, the best-LR held-out losses, then each
    architecture's change from the shallowest to the deepest shape."""
    metrics = metrics or result_metrics(rows)
    names = [m.removeprefix("eval_") if m != "eval_loss" else "mean" for m in metrics]
    header = f"{'arch':<12}{'shape':<12}{'L':>4}{'d':>6}{'d/L':>8}{'params':>9}{'lr':>9}" + "".join(
        f"{n:>12}" for n in names)
    log(header)
    log("-" * len(header))
    per_metric = {m: best_points(rows, m) for m in metrics}
    for arch, points in sorted(per_metric[metrics[-1]].items()):
        for p in points:
            vals = []
            for m in metrics:
                match = [q for q in per_metric[m].get(arch, []) if q["shape"] == p["shape"]]
                vals.append(f"{match[0]['mean']:>12.4f}" if match else f"{'':>12}")
            log(f"{arch:<12}{p['shape']:<12}{p['num_layers']:>4}{p['hidden_size']:>6}{p['aspect_ratio']:>8.1f}"
                f"{_fmt_params(p['params_total']):>9}{p['lr']:>9.1e}" + "".join(vals))
    changes = loss_changes(rows, metrics)
    if changes:
        log("")
        log("loss change, shallowest -> deepest shape (best LR; negative = deeper is better):")
        for arch in sorted({c["arch"] for c in changes}):
            parts = [f"{(c['metric'].removeprefix('eval_') if c['metric'] != 'eval_loss' else 'mean')} "
                     f"{c['change']:+.4f}" for c in changes if c["arch"] == arch]
            first = next(c for c in changes if c["arch"] == arch)
            log(f"  {arch:<12}L{first['shallow']['num_layers']} -> L{first['deep']['num_layers']}: "
                + ", ".join(parts))
    not_done = [r for r in rows if r["status"] != "finished"]
    if not_done:
        log(f"({len(not_done)} run(s) not finished: " + ", ".join(
            f"{os.path.basename(r['run_dir'])} {r['status']}" for r in not_done) + ")")


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
    from depthbench.config import read_config_file
    from depthbench.shapes import grid_shapes

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
    if args.preset:
        from depthbench.demo import run_demo

        return run_demo(args)
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


def _cmd_report(args) -> int:
    if not os.path.isdir(args.run_dir):
        raise SweepError(f"{args.run_dir} is not a folder (give the --out folder of a sweep)")
    paths = write_report(args.run_dir, log=lambda *_: None)
    print_table(collect_results(args.run_dir))
    print()
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def register_cli(subparsers) -> None:
    """Add ``depthbench sweep`` and ``depthbench report``."""
    p = subparsers.add_parser("sweep", help="train architectures x aspect ratios at a fixed parameter budget",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=["demo"], help="a complete built-in sweep (demo: offline, CPU, < 10 min)")
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
    p.add_argument("--out", default="runs/sweep", help="results folder (default runs/sweep; demo: runs/demo)")
    p.add_argument("--name", help="sweep name (default: the folder name)")
    p.add_argument("--launcher", choices=["local", "accelerate"], default="local",
                   help="local: one run after another in this process; accelerate: each run under accelerate launch")
    p.add_argument("--accelerate-args", default="",
                   help="arguments for accelerate launch; pass with '=': --accelerate-args='--num_processes 8'")
    p.add_argument("--emit", choices=["slurm"], help="write a job-array script instead of running")
    p.add_argument("--sbatch", default="",
                   help="extra #SBATCH lines separated by ';'; pass with '=': --sbatch='--gres=gpu:8;--time=24:00:00'")
    p.add_argument("--steps", type=int, help="(demo) optimizer steps per run")
    p.set_defaults(func=_cmd_sweep)
    r = subparsers.add_parser("report", help="rebuild results.csv, the plot and report.md of a sweep folder")
    r.add_argument("run_dir", help="the --out folder of a sweep")
    r.set_defaults(func=_cmd_report)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(print("use: depthbench sweep ...") or 2)
