"""The study's released checkpoints as a catalogue: which ``aspect-ratio-scaling`` repositories exist, with their
architecture, shape, peak learning rate and steps, and the figures the study published for them.

Two data files ship with the package (read with ``importlib.resources``; every value carries the file of the study
it was read from):

* ``released_catalogue.json``: the released runs by tier, as the study's README (keyu-wang-2002/DepthBench,
  "Checkpoints") lists them: 400M L16-L32 for the ten architectures of the study's comparison, the deep L36/L42/L70
  runs of HC, mHC and Full AttnRes, 1.6B Pre-LN/HC/Full AttnRes, the 300M fixed-backbone HC/mHC runs and the
  200M/300M/500M ladders. A repository's name carries its learning rate
  (``<arch>-lr<lr>-llama-<size>-L<layers>-pretrain``); where no file of the study states the LR, the entry has
  ``lr = None``, no repository name and a note saying so (the LR is never guessed).
* ``published_figures.json``: the study's held-out validation losses (arXiv 2609.32534, Figure 2) and its
  completion NLL by domain (Figure 4), as its project site gives them, keyed by shape grid and depth.

Shapes are never stored: each entry's shape is ``depthbench.shapes``' grid shape (``400m-L24``: d, L, d/L and the
exact parameter count follow from the study's design rule). ``depthbench released list`` prints the catalogue;
``depthbench released eval`` (:mod:`depthbench.sweeps.released`) re-measures a selection.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from depthbench.registry import ARCHITECTURES
from depthbench.repo_names import REPO_ARCH_NAMES, format_lr

CATALOGUE_FILE = "released_catalogue.json"
PUBLISHED_FILE = "published_figures.json"


class CatalogueError(ValueError):
    """A selection names an architecture, size, tier or depth the catalogue does not hold (the message lists what
    exists), or a catalogue file is malformed."""


@dataclass(frozen=True)
class Release:
    """One released run: a repository of the ``aspect-ratio-scaling`` organisation (``repo`` is ``None`` when its
    name is not known: its LR is stated nowhere), at one shape of a ``depthbench.shapes`` grid."""

    arch: str
    tier: str
    size: str | None
    grid: str
    depth: int
    name: str
    lr: float | None
    repo: str | None
    steps: tuple[int, ...]
    final_step: int | None
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    notes: tuple[str, ...] = ()

    @property
    def shape(self) -> str:
        """The ``depthbench.shapes`` name of the shape, e.g. ``400m-L24``."""
        return f"{self.grid}-L{self.depth}"

    def shape_info(self) -> dict[str, Any]:
        """``{d, L, d_over_L, params_total}`` from the study's design rule (``depthbench.shapes``; the count is the
        architecture's own, its extra parameters included)."""
        from depthbench.shapes import get_grid

        shape = get_grid(self.grid).shape(self.depth)
        counts = shape.parameter_counts(self.arch)
        return {"d": shape.hidden_size, "L": shape.num_layers, "d_over_L": round(shape.aspect_ratio, 2),
                "params_total": counts["total"]}

    def record(self) -> dict[str, Any]:
        """The entry as a JSON-ready dict (what ``depthbench released list --json`` prints)."""
        return {"repo": self.repo, "arch": self.arch, "tier": self.tier, "size": self.size, "shape": self.shape,
                **self.shape_info(), "lr": self.lr, "steps": list(self.steps), "final_step": self.final_step,
                "sources": dict(self.sources), "notes": list(self.notes)}


def _read_package_json(name: str) -> dict[str, Any]:
    return json.loads(resources.files("depthbench.hub").joinpath(name).read_text(encoding="utf-8"))


def repo_name(org: str, pattern: str, name: str, lr: float, size: str, depth: int) -> str:
    """A release's repository id from the catalogue's name pattern (the LR spelled as the organisation does)."""
    return pattern.format(org=org, name=name, lr=format_lr(lr), size=size, depth=depth)


def _group_releases(group: dict[str, Any], top: dict[str, Any]) -> list[Release]:
    out = []
    for arch, spec in group["archs"].items():
        lr, size = spec.get("lr"), group.get("size")
        sources = {"release": group["source"], "lr": spec["lr_source"], "name": spec["name_source"],
                   "steps": group.get("steps_source", "")}
        notes = tuple(group.get("notes", [])) + ((spec["note"],) if spec.get("note") else ())
        for depth in group["depths"]:
            out.append(Release(arch=arch, tier=group["tier"], size=size, grid=group["grid"], depth=depth,
                               name=spec["name"], lr=lr,
                               repo=(repo_name(top["org"], top["name_pattern"], spec["name"], lr, size, depth)
                                     if lr is not None and size else None),
                               steps=tuple(group.get("steps", [])), final_step=group.get("final_step"),
                               sources=sources, notes=notes))
    return out


@dataclass(frozen=True)
class Catalogue:
    """Every release of a catalogue file, plus its top-level facts (``seed``, the training ``batch``, with
    sources)."""

    releases: tuple[Release, ...]
    facts: dict[str, Any]

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> Catalogue:
        """The packaged catalogue (``released_catalogue.json``), or the file ``path`` in the same format."""
        try:
            if path is None:
                data = _read_package_json(CATALOGUE_FILE)
            else:
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
            releases = [r for group in data["groups"] for r in _group_releases(group, data)]
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise CatalogueError(f"catalogue {path or CATALOGUE_FILE} is malformed: {type(exc).__name__}: {exc}"
                                 ) from None
        facts = {k: v for k, v in data.items() if k != "groups"}
        return cls(tuple(releases), facts)

    def find(self, arch: str, size: str | None, depth: int) -> Release | None:
        """The release of ``arch`` at ``size`` (a name's budget label) and ``depth``, if catalogued."""
        return next((r for r in self.releases if (r.arch, r.size, r.depth) == (arch, size, depth)), None)

    def select(self, archs: list[str] | None = None, sizes: list[str] | None = None,
               depths: list[int] | None = None, tiers: list[str] | None = None) -> list[Release]:
        """The releases matching every filter given (``None``: no filter), in catalogue order.

        Architectures may be registry ids (``pre_ln``) or the organisation's spellings (``preln``, ``base``).
        Raises :class:`CatalogueError` for a value the catalogue does not hold, or a combination that matches
        nothing, listing what exists.
        """
        chosen = list(self.releases)
        if archs is not None:
            archs = [self._arch_id(a) for a in archs]
            chosen = [r for r in chosen if r.arch in archs]
        for values, key, what in ((tiers, "tier", "--tier"), (sizes, "size", "--size")):
            if values is not None:
                known = unique(v for r in self.releases if (v := getattr(r, key)) is not None)
                wanted = {v.lower(): v for v in values}
                bad = [v for k, v in wanted.items() if k not in {str(x).lower() for x in known}]
                if bad:
                    raise CatalogueError(f"{what} {', '.join(bad)}: not in the catalogue; {what} is one of "
                                         f"{', '.join(map(str, known))}")
                chosen = [r for r in chosen if str(getattr(r, key)).lower() in wanted]
        if depths is not None:
            known = sorted({r.depth for r in chosen})
            bad = [d for d in depths if d not in known]
            if bad:
                raise CatalogueError(f"--depth {', '.join(map(str, bad))}: no release at that depth in this "
                                     f"selection; depths: {', '.join(map(str, known)) or 'none'}")
            chosen = [r for r in chosen if r.depth in depths]
        if not chosen:
            raise CatalogueError("no release matches this selection; " + self.describe(archs))
        return chosen

    def _arch_id(self, name: str) -> str:
        arch = name if name in ARCHITECTURES else REPO_ARCH_NAMES.get(name.lower())
        catalogued = unique(r.arch for r in self.releases)
        if arch in catalogued:
            return arch
        why = (f"{name!r} is a registered architecture, but the study's releases of it are not catalogued"
               if arch else f"{name!r} is not an architecture")
        raise CatalogueError(f"--arch: {why}; catalogued architectures: {', '.join(catalogued)}")

    def describe(self, archs: list[str] | None = None) -> str:
        """What exists per tier (for error messages): ``400M (L16, L20, ...): pre_ln, hc, ...``."""
        parts = []
        for tier in unique(r.tier for r in self.releases):
            rs = [r for r in self.releases if r.tier == tier and (archs is None or r.arch in archs)]
            if rs:
                parts.append(f"{tier} (L{', L'.join(map(str, unique(r.depth for r in rs)))}): "
                             + ", ".join(unique(r.arch for r in rs)))
        return "catalogued: " + "; ".join(parts)


def unique(values) -> list:
    """``values`` without repeats, in first-seen order."""
    out: list = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


# ================================================================================================ published figures
def load_published(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The study's published figures (``published_figures.json``, or ``path`` in the same format)."""
    if path is None:
        return _read_package_json(PUBLISHED_FILE)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def published_loss(published: dict[str, Any], arch: str, grid: str | None, depth: int | None) -> float | None:
    """The study's validation loss for ``arch`` at ``grid``-L``depth`` (``None`` when it published none)."""
    table = (published.get("validation_loss") or {}).get("grids", {}).get(grid or "", {})
    return (table.get(arch) or {}).get(str(depth))


def published_nll(published: dict[str, Any], arch: str, grid: str | None, depth: int | None) -> dict[str, float]:
    """The study's completion NLL per domain (``{"coding": ..., "stem": ..., "math": ...}``, only those published)."""
    domains = (published.get("completion_nll") or {}).get("grids", {}).get(grid or "", {})
    return {dom: v for dom, table in domains.items() if (v := (table.get(arch) or {}).get(str(depth))) is not None}


# ================================================================================================ listing
LIST_COLUMNS = ("repo", "arch", "tier", "shape", "d", "L", "d_over_L", "params_total", "lr", "final_step")


def format_listing(releases: list[Release]) -> str:
    """The terminal table of ``depthbench released list`` (one line per release; notes below)."""
    rows = []
    for r in releases:
        rec = r.record()
        rec["repo"] = r.repo or f"(name unknown: {r.name}-lr?-llama-{r.size or '?'}-L{r.depth}-pretrain)"
        rec["params_total"] = f"{rec['params_total'] / 1e6:.1f}M"
        rec["lr"] = "?" if r.lr is None else format_lr(r.lr)
        rec["final_step"] = "?" if r.final_step is None else r.final_step
        rows.append({k: str(rec[k]) for k in LIST_COLUMNS})
    header = {k: k for k in LIST_COLUMNS}
    widths = {k: max(len(row[k]) for row in [header, *rows]) for k in LIST_COLUMNS}
    lines = ["  ".join(row[k].ljust(widths[k]) for k in LIST_COLUMNS).rstrip() for row in [header, *rows]]
    notes = unique(n for r in releases for n in r.notes)
    if notes:
        lines += ["", "notes:", *(f"- {n}" for n in notes)]
    return "\n".join(lines)
