"""What a sweep is: the cross product architecture x shape x learning rate x seed (:class:`SweepSpec`), each point
one run (:class:`RunPoint`, named by its ``depthbench.runs.RunId``), design-rule shapes at an explicit budget
(:func:`budget_shapes`), and the claim of a sweep folder by one definition (:func:`claim_folder`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from depthbench import atomic, registry, runs
from depthbench.config import load_run_config
from depthbench.shapes import get_shape, parse_count, shape_for_budget


class SweepError(ValueError):
    """The sweep definition or results folder is invalid (the message says what and what is allowed)."""


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

    def run_dir(self, out_dir: str, point: RunPoint) -> str:
        """The run folder of ``point`` in the sweep folder ``out_dir``."""
        return os.path.join(out_dir, runs.RUNS, point.run_id)

    def run_config(self, point: RunPoint, run_dir: str):
        """The validated ``depthbench.config.RunConfig`` of ``point``; raises :class:`SweepError` naming the key."""
        try:
            return load_run_config(self.base, self.run_overrides(point, run_dir))
        except ValueError as exc:
            raise SweepError(f"invalid run config for {point.run_id}: {exc}") from None

    def run_configs(self, out_dir: str) -> list:
        """The validated run config of every point (:meth:`runs` order) in the sweep folder ``out_dir``, each built
        once: the sweep trains these, and a bad one fails before anything is written."""
        return [self.run_config(point, self.run_dir(out_dir, point)) for point in self.runs()]


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
        """Folder name under ``<out>/runs`` (``depthbench.runs.RunId``), e.g. ``pre_ln__tiny-L4__lr0.002__s0``."""
        return str(runs.RunId(self.arch, self.shape, self.lr, self.seed))

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
        n = parse_count(text) if isinstance(budget, str) else int(budget)
        if not depths:
            raise ValueError("--depths is required with --budget (e.g. --depths 4,8,16)")
        shapes = [shape_for_budget(n, depth, vocab_size=vocab_size, heads=heads, kv_heads=kv_heads, count=count)
                  for depth in depths]
    except ValueError as exc:
        raise SweepError(str(exc)) from None
    names = [f"budget{text}-L{s.num_layers}" for s in shapes]
    return names, {name: s.config_fields() for name, s in zip(names, shapes)}


# ================================================================================================ the folder
def claim_folder(spec: SweepSpec, out_dir: str) -> None:
    """Validate every run config, refuse a folder of another sweep, then (only then) write ``sweep.json``."""
    points = spec.runs()
    for point in points:
        spec.run_config(point, spec.run_dir(out_dir, point))
    path = os.path.join(out_dir, runs.SWEEP_DEFINITION)
    if os.path.exists(path):
        try:
            old = atomic.read_json(path)
        except (OSError, ValueError) as exc:
            raise SweepError(f"cannot read {path} ({exc}); use another --out folder (nothing was overwritten)"
                             ) from None
        old = old if isinstance(old, dict) else {}
        if old.get("fingerprint") != spec.fingerprint():
            raise SweepError(
                f"{out_dir} holds results of a different sweep definition ({path}: {describe(old.get('spec'))}; "
                f"this one: {describe(spec.to_dict())}); use another --out folder (nothing was overwritten)"
            )
    elif os.path.isdir(os.path.join(out_dir, runs.RUNS)) and os.listdir(os.path.join(out_dir, runs.RUNS)):
        raise SweepError(f"{out_dir} has a runs/ folder but no sweep.json: it is not a folder of this sweep; use "
                         "another --out folder (nothing was overwritten)")
    os.makedirs(out_dir, exist_ok=True)
    atomic.write_json(path, {"fingerprint": spec.fingerprint(), "spec": spec.to_dict(), "runs": len(points)})


def describe(spec: dict[str, Any] | None) -> str:
    """A one-line summary of a stored sweep definition (for messages)."""
    if not isinstance(spec, dict):
        return "unknown"
    steps = ((spec.get("base") or {}).get("train") or {}).get("max_steps")
    return (f"archs {','.join(spec.get('archs', []))}, shapes {','.join(spec.get('shapes', []))}, lrs "
            f"{','.join(f'{lr:g}' for lr in spec.get('lrs', []))}, seeds {','.join(map(str, spec.get('seeds', [])))}"
            + (f", {steps} steps" if steps else "") + (f", overrides {spec['overrides']}" if spec.get("overrides")
                                                       else ""))
