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

import os
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

from depthbench import atomic
from depthbench.registry import ARCHITECTURES
from depthbench.repo_names import REPO_ARCH_NAMES, REPO_NAME_VARIANTS, format_lr

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
    grid: str | None
    depth: int
    name: str
    lr: float | None
    repo: str | None
    steps: tuple[int, ...]
    final_step: int | None
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    notes: tuple[str, ...] = ()
    #: ``"post_norm"`` for post-norm MoDA (:data:`~depthbench.repo_names.REPO_NAME_VARIANTS`), else ``None``.
    variant: str | None = None
    #: From the Hub listing (``None`` until ``depthbench released sync`` saw the repository): ``"steps"`` or
    #: ``"root"`` (one final checkpoint at the repository root), the bytes of the final checkpoint's
    #: ``model_and_optim/``, the (d, L, heads) of its ``config.json``, and whether the repository is private.
    storage: str | None = None
    download_bytes: int | None = None
    hub_shape: tuple | None = None
    private: bool = False

    @property
    def shape(self) -> str:
        """The ``depthbench.shapes`` name of the shape, e.g. ``400m-L24`` (``-postnorm`` appended for post-norm
        MoDA; ``<size>-L<depth>`` for a listed release of no grid shape)."""
        base = f"{self.grid}-L{self.depth}" if self.grid else f"{self.size or 'unknown'}-L{self.depth}"
        return base + (f"-{self.variant.replace('_', '')}" if self.variant else "")

    def grid_shape(self):
        """The ``depthbench.shapes.Shape`` of the entry (``None`` for a listed release of no grid shape)."""
        from depthbench.shapes import get_grid

        return get_grid(self.grid).shape(self.depth) if self.grid else None

    def shape_info(self) -> dict[str, Any]:
        """``{d, L, heads, d_over_L, params_total}`` from the study's design rule (``depthbench.shapes``; the count is
        depthbench's own for the architecture, its extra parameters included: no file of the study states it per
        release); for a listed release of no grid shape, the (d, L, heads) of its ``config.json`` and no count."""
        shape = self.grid_shape()
        if shape is None:
            d, L, heads = self.hub_shape or (None, self.depth, None)
            return {"d": d, "L": L, "heads": heads, "d_over_L": round(d / L, 2) if d and L else None,
                    "params_total": None}
        counts = shape.parameter_counts(self.arch)
        return {"d": shape.hidden_size, "L": shape.num_layers, "heads": shape.num_attention_heads,
                "d_over_L": round(shape.aspect_ratio, 2), "params_total": counts["total"]}

    def record(self) -> dict[str, Any]:
        """The entry as a JSON-ready dict (what ``depthbench released list --json`` prints)."""
        return {"repo": self.repo, "arch": self.arch, "variant": self.variant, "tier": self.tier, "size": self.size,
                "shape": self.shape, **self.shape_info(), "lr": self.lr, "steps": list(self.steps),
                "final_step": self.final_step, "storage": self.storage, "download_bytes": self.download_bytes,
                "private": self.private, "sources": dict(self.sources), "notes": list(self.notes)}


def _read_json(path: str | os.PathLike | None, packaged: str) -> Any:
    """The JSON content of ``path``, or of the packaged file ``packaged`` when ``path`` is ``None``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: It is not valid JSON.
    """
    path = resources.files("depthbench.hub").joinpath(packaged) if path is None else path
    data = atomic.read_json(path)
    if data is None:
        raise FileNotFoundError(f"{os.fspath(path)}: no such file")
    return data


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
            data = _read_json(path, CATALOGUE_FILE)
        except ValueError as exc:  # not valid JSON (the message names the file)
            raise CatalogueError(f"catalogue {path or CATALOGUE_FILE} is malformed: {exc}") from None
        try:
            releases = [r for group in data["groups"] for r in _group_releases(group, data)]
        except (KeyError, TypeError) as exc:
            raise CatalogueError(f"catalogue {path or CATALOGUE_FILE} is malformed: {type(exc).__name__}: {exc}"
                                 ) from None
        facts = {k: v for k, v in data.items() if k != "groups"}
        return cls(tuple(releases), facts)

    def find(self, arch: str, size: str | None, depth: int) -> Release | None:
        """The release of ``arch`` at ``size`` (a name's budget label) and ``depth``, if catalogued."""
        return next((r for r in self.releases if (r.arch, r.size, r.depth) == (arch, size, depth)), None)

    def find_repo(self, repo: str) -> Release | None:
        """The entry of repository ``repo`` (``owner/name``), if the catalogue (or its Hub listing) names it."""
        return next((r for r in self.releases if r.repo == repo), None)

    def match_shape(self, arch: str, width: int | None, depth: int, heads: int | None = None,
                    size: str | None = None) -> list[Release]:
        """The entries of ``arch`` whose shape is (``width``, ``depth``, ``heads``): the shape a converted model or
        a release's ``config.json`` has, not the one its name suggests (a fixed-backbone run labelled 400M has the
        300M-backbone width). ``width`` ``None``: matched by ``size`` (the name's label) and depth instead."""
        out = []
        for r in self.releases:
            if r.arch != arch or r.depth != depth:
                continue
            info = r.shape_info()
            if width is None:
                if r.size == size:
                    out.append(r)
            elif info["d"] == width and (heads is None or info["heads"] in (None, heads)):
                out.append(r)
        return out

    def with_listing(self, listing: dict[str, Any] | None) -> Catalogue:
        """This catalogue with the organisation's Hub listing (:mod:`depthbench.hub.listing`) merged in.

        Each listed repository is matched to an entry by architecture and the shape of its ``config.json`` (width,
        depth, heads; by the name's size label when the listing has no config): an entry whose LR no file of the
        study states gets the listed name and LR; the entry of the same LR gets the listed name (the study's
        spelling, e.g. ``prenorm-moda``); another LR of the same shape, a variant (post-norm MoDA) or an
        uncatalogued shape becomes an entry of its own. Steps, storage (per step or at the root) and sizes come
        from the listing. Every fact taken from it is sourced "from the Hub listing of ORG on ENDPOINT, DATE";
        catalogued names the listing does not hold get a note. Names that do not parse and repositories without a
        checkpoint are kept in ``facts["listing"]``."""
        if not listing:
            return self
        from depthbench.hub.listing import source_note

        note = source_note(listing)
        releases = list(self.releases)
        filled: set[int] = set()
        listed_repos = {e["repo"] for e in listing["repos"]}
        for entry in listing["repos"]:
            if "parse_error" in entry or entry.get("storage") is None:
                continue
            releases, filled = self._merge_one(releases, filled, entry, note)
        for i, r in enumerate(releases):
            if i not in filled and r.repo is not None and r.repo not in listed_repos and r.storage is None:
                releases[i] = replace(r, notes=r.notes + (f"{r.repo} is not in the Hub listing ({note})",))
        facts = {**self.facts, "listing": {
            "org": listing["org"], "endpoint": listing["endpoint"], "synced": listing["synced"],
            "repositories": len(listing["repos"]),
            "unparsed": [{"repo": e["repo"], "reason": e["parse_error"]} for e in listing["repos"]
                         if "parse_error" in e],
            "without_checkpoint": [e["repo"] for e in listing["repos"]
                                   if "parse_error" not in e and e.get("storage") is None]}}
        return Catalogue(tuple(releases), facts)

    def _merge_one(self, releases: list[Release], filled: set[int], entry: dict[str, Any], note: str):
        config = entry.get("config") or {}
        width = config.get("d")
        variant = entry.get("variant")
        slots = [i for i, r in enumerate(releases) if i not in filled and r.arch == entry["arch"]
                 and r.depth == entry["depth"] and r.variant == variant and r.storage is None
                 and (r.shape_info()["d"] == width if width else r.size == entry["size"])]
        template = releases[slots[0]] if slots else self._shape_template(entry, width)
        final_bytes = (entry.get("bytes") or {}).get("root" if entry["storage"] == "root" else
                                                      str(entry.get("final_step")))
        lr_source = (f"{template.sources.get('lr')}; {note} (its name: lr{format_lr(entry['lr'])})"
                     if template and template.lr == entry["lr"] and template.sources.get("lr") else
                     f"{note} (the repository name)")
        notes = tuple(n for n in (template.notes if template else ()) if "LR not stated" not in n)
        if entry.get("size") and template and template.size and entry["size"] != template.size:
            notes += (f"{entry['repo']}: named {entry['size']}, its config.json (d={width}) is the {template.tier} "
                      f"shape {template.shape}",)
        if entry["storage"] == "root":
            notes += (f"{entry['repo']} stores one final checkpoint at the repository root ({note})",)
        if entry.get("private"):
            notes += (f"{entry['repo']} is private (listed with your token)",)
        facts = dict(repo=entry["repo"], lr=entry["lr"], name=entry.get("name") or entry["arch"],
                     steps=tuple(entry.get("steps") or ()), final_step=entry.get("final_step"),
                     storage=entry["storage"], download_bytes=final_bytes, variant=variant,
                     hub_shape=(config.get("d"), config.get("L"), config.get("heads")), private=entry.get("private",
                                                                                                       False))
        sources = {**(template.sources if template else {}), "name": note, "lr": lr_source, "steps": note}
        same_lr = [i for i in slots if releases[i].lr in (None, entry["lr"])]
        if same_lr:
            i = same_lr[0]
            old = releases[i]
            extra = ((f"the catalogue's spelling {old.repo} is not the listed one",)
                     if old.repo and old.repo != entry["repo"] else ())
            releases[i] = replace(old, **facts, sources=sources, notes=notes + extra)
            filled.add(i)
        else:
            base = template or Release(arch=entry["arch"], tier=f"{entry.get('size') or '?'} (Hub listing only)",
                                       size=entry.get("size"), grid=None, depth=entry["depth"], name="", lr=None,
                                       repo=None, steps=(), final_step=None)
            if template is None:
                sources["release"] = note
                notes += ("not in the study's checkpoint table; shape from its config.json",)
            releases.append(replace(base, size=entry.get("size") or base.size, **facts, sources=sources,
                                    notes=notes))
            filled.add(len(releases) - 1)
        return releases, filled

    def _shape_template(self, entry: dict[str, Any], width: int | None) -> Release | None:
        """A catalogued entry of the same shape (any architecture), for a listed repository no entry of its own
        architecture matches: its tier, grid and size."""
        for r in self.releases:
            info = r.shape_info()
            if r.depth == entry["depth"] and (info["d"] == width if width else r.size == entry["size"]):
                return replace(r, arch=entry["arch"], sources={"release": r.sources.get("release", "")},
                               notes=(), lr=None, repo=None)
        return None

    def select(self, archs: list[str] | None = None, sizes: list[str] | None = None,
               depths: list[int] | None = None, tiers: list[str] | None = None) -> list[Release]:
        """The releases matching every filter given (``None``: no filter), in catalogue order.

        Architectures may be registry ids (``pre_ln``) or the organisation's spellings (``preln``, ``base``).
        Raises :class:`CatalogueError` for a value the catalogue does not hold, or a combination that matches
        nothing, listing what exists.
        """
        chosen = list(self.releases)
        if archs is not None:
            variants = {REPO_NAME_VARIANTS[a.lower()] for a in archs if a.lower() in REPO_NAME_VARIANTS}
            archs = [self._arch_id(a) for a in archs]
            chosen = [r for r in chosen if r.arch in archs and (not variants or r.variant in variants)]
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
    return _read_json(path, PUBLISHED_FILE)


def published_loss(published: dict[str, Any], arch: str, grid: str | None, depth: int | None) -> float | None:
    """The study's validation loss for ``arch`` at ``grid``-L``depth`` (``None`` when it published none)."""
    table = (published.get("validation_loss") or {}).get("grids", {}).get(grid or "", {})
    return (table.get(arch) or {}).get(str(depth))


def published_nll(published: dict[str, Any], arch: str, grid: str | None, depth: int | None) -> dict[str, float]:
    """The study's completion NLL per domain (``{"coding": ..., "stem": ..., "math": ...}``, only those published)."""
    domains = (published.get("completion_nll") or {}).get("grids", {}).get(grid or "", {})
    return {dom: v for dom, table in domains.items() if (v := (table.get(arch) or {}).get(str(depth))) is not None}


#: The layer figures of ``published_figures.json`` ``layer_analyses``, by the analysis metric they stand beside.
LAYER_FIGURES = {"causal": "late_layer_fractions", "permutation": "late_layer_fractions",
                 "hc_transport": "hc_transport_erank", "efficiency": "prefill_flops"}


def published_layer_figure(published: dict[str, Any], metric: str, arch: str, grid: str | None,
                           depth: int | None) -> dict[str, Any]:
    """The study's published layer figure that stands beside ``metric`` (``causal``, ``permutation``,
    ``hc_transport``, ``efficiency``) of ``arch`` at ``grid``-L``depth``.

    Returns ``{"published": value, ...}`` with the figure's ``source``, ``metric``, ``notes`` and what it needs to be
    comparable (``threshold``, ``seq_len``; ``range`` for the transport rank), or ``{"published": None, "why":
    ...}`` saying what the study published instead. ``KeyError`` for a metric with no published counterpart."""
    key = LAYER_FIGURES[metric]
    spec = (published.get("layer_analyses") or {}).get(key)
    label = (published.get("labels") or {}).get(arch, arch)
    shape = f"{grid}-L{depth}" if grid else f"L{depth}"
    if not spec:
        return {"published": None, "why": f"the figures file holds no {key.replace('_', ' ')}"}
    base = {"figure": key, "metric": spec["metric"], "source": spec["source"], "notes": list(spec.get("notes", [])),
            "approximate": bool(spec.get("approximate"))}
    if key == "late_layer_fractions":
        table = spec["metrics"][metric]
        where = f"{spec['grid']}-L{spec['depth']}"
        archs = ", ".join((published.get("labels") or {}).get(a, a) for a in table["values"])
        if (grid, depth) != (spec["grid"], spec["depth"]) or arch not in table["values"]:
            return {"published": None, "why": f"the study publishes late-layer {metric} fractions for {archs} at "
                                              f"{where} only, none for {label} at {shape}"}
        return {**base, "published": table["values"][arch], "threshold": table["threshold"]}
    if key == "hc_transport_erank":
        archs = ", ".join((published.get("labels") or {}).get(a, a) for a in spec["ranges"])
        if grid != spec["grid"] or arch not in spec["ranges"]:
            return {"published": None, "why": f"the study publishes the transport effective rank of {archs} at "
                                              f"{spec['grid']} only, none for {label} at {shape}"}
        low, high = spec["ranges"][arch]
        return {**base, "published": [low, high], "range": True}
    value = spec["values"].get(str(depth)) if grid == spec["grid"] else None
    if value is None:
        shapes = ", ".join(f"{spec['grid']}-L{d}" for d in spec["values"])
        return {"published": None, "why": f"the study publishes prefill FLOPs at {shapes} only, none at {shape}"}
    return {**base, "published": value, "seq_len": spec["seq_len"]}


# ================================================================================================ listing
LIST_COLUMNS = ("repo", "arch", "tier", "shape", "d", "L", "d_over_L", "params_total", "lr", "final_step", "stored")
#: Which figure of the study (arXiv 2609.32534) each tier's releases reproduce (``released list`` / ``--help``).
TIER_FIGURES = {
    "400M": "Fig. 2 left (validation loss vs d/L, 400M); Fig. 4 with --tasks depthbench_nll",
    "400M-deep": "Fig. 2 left (the L36-L70 points of HC, mHC, Full AttnRes)",
    "300M-backbone": "Fig. 2 right (fixed 300M backbone)",
    "1.6B": "Fig. 3 (scale ladders; no numbers published)",
    "200M": "Fig. 3 (scale ladders; no numbers published)",
    "300M": "Fig. 3 (scale ladders; no numbers published)",
    "500M": "Fig. 3 (scale ladders; no numbers published)",
}


def tier_summary(releases: list[Release], published: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Per tier: entries, named (repository known), unknown (LR, hence name, stated nowhere), entries with a
    published loss, entries from the Hub listing, shapes with more than one LR, and the figure it reproduces."""
    published = load_published() if published is None else published
    out = []
    for tier in unique(r.tier for r in releases):
        rs = [r for r in releases if r.tier == tier]
        shapes: dict[tuple, int] = {}
        for r in rs:
            shapes[(r.arch, r.shape)] = shapes.get((r.arch, r.shape), 0) + 1
        out.append({"tier": tier, "entries": len(rs), "named": sum(r.repo is not None for r in rs),
                    "unknown": sum(r.repo is None for r in rs),
                    "published": sum(published_loss(published, r.arch, r.grid, r.depth) is not None
                                     for r in rs if not r.variant),
                    "listed": sum(r.storage is not None for r in rs),
                    "multi_lr_shapes": sum(n > 1 for n in shapes.values()),
                    "figure": TIER_FIGURES.get(tier, "not in the study's figures")})
    return out


def format_summary(releases: list[Release], facts: dict[str, Any] | None = None) -> str:
    """The per-tier summary that opens ``depthbench released list``, and where the names come from."""
    rows = tier_summary(releases)
    cols = ("tier", "entries", "named", "unknown", "published", "listed", "multi_lr_shapes", "figure")
    head = {"tier": "tier", "entries": "entries", "named": "named", "unknown": "name unknown",
            "published": "published loss", "listed": "on the Hub listing", "multi_lr_shapes": "shapes with >1 LR",
            "figure": "reproduces"}
    table = [head] + [{k: str(r[k]) for k in cols} for r in rows]
    widths = {k: max(len(t[k]) for t in table) for k in cols}
    lines = ["  ".join(t[k].ljust(widths[k]) for k in cols).rstrip() for t in table]
    total = {k: sum(r[k] for r in rows) for k in ("entries", "named", "unknown")}
    lines.append(f"{total['entries']} entries: {total['named']} with a repository name, {total['unknown']} whose "
                 "name is not known (their LR is stated in none of the study's files)")
    listing = (facts or {}).get("listing")
    if listing:
        lines.append(f"merged with the Hub listing of {listing['org']} on {listing['endpoint']} (synced "
                     f"{listing['synced']}, {listing['repositories']} repositories; facts it gave are marked 'from "
                     "the Hub listing')")
    else:
        lines.append("the shipped catalogue only: `depthbench released sync` reads the organisation's Hub listing "
                     "(every repository name, LR, steps and storage)")
    lines.append("params_total: depthbench's count from the study's design rule (depthbench.shapes), not a figure "
                 "of the study")
    return "\n".join(lines)


def format_listing(releases: list[Release], facts: dict[str, Any] | None = None) -> str:
    """The terminal output of ``depthbench released list``: the per-tier summary, one line per release, then the
    listed names that do not parse, the repositories without a checkpoint, and the notes."""
    rows = []
    for r in releases:
        rec = r.record()
        rec["repo"] = r.repo or f"(name unknown: {r.name}-lr?-llama-{r.size or '?'}-L{r.depth}-pretrain)"
        rec["params_total"] = "?" if rec["params_total"] is None else f"{rec['params_total'] / 1e6:.1f}M"
        rec["lr"] = "?" if r.lr is None else format_lr(r.lr)
        rec["final_step"] = "?" if r.final_step is None else r.final_step
        rec["stored"] = {"steps": "per step", "root": "root", None: "?"}[r.storage]
        rows.append({k: str(rec[k]) for k in LIST_COLUMNS})
    header = {k: k for k in LIST_COLUMNS}
    widths = {k: max(len(row[k]) for row in [header, *rows]) for k in LIST_COLUMNS}
    lines = [format_summary(releases, facts), ""]
    lines += ["  ".join(row[k].ljust(widths[k]) for k in LIST_COLUMNS).rstrip() for row in [header, *rows]]
    listing = (facts or {}).get("listing") or {}
    if listing.get("unparsed"):
        lines += ["", f"listed names that do not parse ({len(listing['unparsed'])}; not in the table):",
                  *(f"- {u['repo']}: {u['reason']}" for u in listing["unparsed"])]
    if listing.get("without_checkpoint"):
        lines += ["", f"listed repositories without any checkpoint ({len(listing['without_checkpoint'])}):",
                  *(f"- {repo}" for repo in listing["without_checkpoint"])]
    notes = unique(n for r in releases for n in r.notes)
    if notes:
        lines += ["", "notes:", *(f"- {n}" for n in notes)]
    return "\n".join(lines)
