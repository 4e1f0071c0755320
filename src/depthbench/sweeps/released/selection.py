"""Which releases ``depthbench released eval`` measures: the catalogue's selection plus repositories named
explicitly (``--repo``), each with its run id in the output folder."""

from __future__ import annotations

from dataclasses import dataclass

from depthbench import runs
from depthbench.hub.catalogue import Catalogue, CatalogueError, Release


@dataclass(frozen=True)
class Target:
    """One release to measure: its repository, what the catalogue (or its name) says about it, and the step."""

    repo: str
    arch: str
    shape: str
    grid: str | None
    depth: int
    lr: float
    step: int | None
    seed: int
    release: Release | None = None

    @property
    def run_id(self) -> runs.RunId:
        return runs.RunId(self.arch, self.shape, self.lr, self.seed)


# ================================================================================================ selection
def select_targets(catalogue: Catalogue, *, archs: list[str] | None = None, sizes: list[str] | None = None,
                   depths: list[int] | None = None, tiers: list[str] | None = None, repos: list[str] | None = None,
                   step: int | None = None, best_lr: bool = False) -> list[Target]:
    """The releases to measure: the catalogue's selection (any filter given, or none and no ``repos``) plus the
    repositories named in ``repos``. Where the catalogue (with its Hub listing) knows several LRs of one
    (architecture, shape), ``best_lr`` measures them all (the report then picks the best, as the study does);
    otherwise only the first, the shipped catalogue's entry where it names one.

    Raises :class:`CatalogueError` for a selected release whose repository name
    is not known (its LR is stated nowhere: pass it with ``repos``)."""
    seed = int(catalogue.facts.get("seed", 0))
    chosen = []
    if repos is None or any(v is not None for v in (archs, sizes, depths, tiers)):
        chosen = catalogue.select(archs=archs, sizes=sizes, depths=depths, tiers=tiers)
        if not best_lr:
            first: dict[tuple, Release] = {}
            for r in chosen:
                first.setdefault((r.arch, r.shape), r)
            chosen = list(first.values())
    unknown = [r for r in chosen if r.repo is None]
    if unknown:
        names = ", ".join(f"{r.arch} {r.tier} L{r.depth}" for r in unknown[:6]) + (" ..." if len(unknown) > 6 else "")
        raise CatalogueError(f"the repository names of {len(unknown)} selected release(s) are not known ({names}): "
                             "their learning rate is stated in none of the study's files (`depthbench released "
                             "list` shows the notes); find them on https://huggingface.co/aspect-ratio-scaling and "
                             "pass --repo NAME")
    targets = [Target(r.repo, r.arch, r.shape, r.grid, r.depth, r.lr,
                      step if step is not None else r.final_step, seed, r) for r in chosen]
    if not best_lr:
        several = sorted({f"{r.arch} {r.shape}" for r in catalogue.releases for t in targets
                          if t.release and (r.arch, r.shape) == (t.arch, t.shape) and r.repo != t.repo})
        if several:
            import logging

            logging.getLogger(__name__).warning(
                "%d selected shape(s) have releases at other LRs too (%s): only one LR each is measured, and the "
                "study's figure is its best-LR run; --best-lr measures them all", len(several),
                ", ".join(several[:6]) + (" ..." if len(several) > 6 else ""))
    for repo in repos or []:
        targets.append(_target_from_name(catalogue, repo, step, seed))
    seen: dict[str, Target] = {}
    for t in targets:
        seen.setdefault(t.repo, t)
    return list(seen.values())


def _target_from_name(catalogue: Catalogue, repo: str, step: int | None, seed: int) -> Target:
    from depthbench.repo_names import ORG, parse_repo_name
    from depthbench.shapes import GRIDS

    repo = repo if "/" in repo else f"{ORG}/{repo}"
    try:
        settings = parse_repo_name(repo)
    except ValueError as exc:
        raise CatalogueError(f"--repo {repo}: {exc}") from None
    arch, depth, size = settings["arch"], settings["depth"], settings["budget"]
    # the Hub listing matched the repository to its entry by config.json (width, depth, heads); else by the name
    entry = catalogue.find_repo(repo) or (catalogue.find(arch, size, depth) if not settings["variant"] else None)
    grid = entry.grid if entry else size.lower() if depth in getattr(GRIDS.get(size.lower()), "depths", ()) else None
    shape = entry.shape if entry else f"{grid}-L{depth}" if grid else f"{size}-L{depth}"
    return Target(repo, arch, shape, grid, depth, settings["lr"],
                  step if step is not None else (entry.final_step if entry else None), seed, entry)


