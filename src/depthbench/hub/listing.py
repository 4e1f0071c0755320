"""The organisation's Hub listing as a local overlay of the release catalogue: ``depthbench released sync``.

The study (arXiv 2609.32534) announces 160+ released checkpoints; its files state the names of only some of them
(a name carries the peak LR, which most tiers never state). :func:`sync` reads what the Hub itself says, through
huggingface_hub: the organisation's repositories (``list_models(author=...)``), each repository's files
(``list_repo_tree``, recursive, with sizes) and main commit (``list_repo_refs``), and the small ``config.json`` of
each checkpoint (width, depth and heads, so an entry is matched by its shape, not by its name alone). For every
repository it records the name, what the name says (architecture, variant, size label, depth, LR), how the
checkpoint is stored (``step<N>/`` folders, or one final checkpoint at the repository root), the steps, and the
bytes of each step's ``model_and_optim/``. Names that do not parse and repositories without a checkpoint are kept
in the listing with the reason, never dropped.

The overlay is a JSON file in the Hugging Face cache (``$HF_HOME/depthbench/hub_listing/<org>.json``, never in the
package), written only after the whole listing was read (atomically: a network failure in the middle leaves the
previous overlay as it was). ``depthbench released list`` / ``eval`` merge it with the shipped catalogue
(:meth:`depthbench.hub.catalogue.Catalogue.with_listing`), every fact it contributes marked "from the Hub listing"
with the date of the sync; without a network they use the last sync.
"""

from __future__ import annotations

import datetime
import os
import re
from typing import Any

from depthbench import atomic
from depthbench.errors import Failed
from depthbench.repo_names import ORG, parse_repo_name

LISTING_FORMAT = 1
STEP_FILE_RE = re.compile(r"^step(\d+)/(.*)$")


class ListingError(Failed):
    """The Hub listing could not be read (endpoint down, a request failed in the middle); the previous overlay
    is unchanged."""


class ListingFileError(ValueError):
    """An overlay file is malformed or of another format."""


def listing_path(org: str = ORG, root: str | None = None) -> str:
    """Where the overlay of ``org`` lives: ``<root or $HF_HOME>/depthbench/hub_listing/<org>.json`` (``HF_HOME``
    read when called)."""
    from huggingface_hub import constants

    return os.path.join(root or constants.HF_HOME, "depthbench", "hub_listing", f"{org}.json")


def load_listing(path: str | None = None, org: str = ORG) -> dict[str, Any] | None:
    """The last sync of ``org`` (``None`` when there was none). Raises :class:`ListingFileError` when the file is
    not an overlay of this format."""
    path = path or listing_path(org)
    try:
        data = atomic.read_json(path)
    except ValueError as exc:
        raise ListingFileError(f"{path} is not a valid Hub listing ({exc}); run `depthbench released sync` "
                               "again") from None
    if data is None:
        return None
    if not isinstance(data, dict) or data.get("format_version") != LISTING_FORMAT or "repos" not in data:
        raise ListingFileError(f"{path} is not a Hub listing of format {LISTING_FORMAT}; run `depthbench released "
                               "sync` again")
    return data


# ================================================================================================ one repository
def checkpoint_layout(files: dict[str, int]) -> dict[str, Any]:
    """How a repository stores its checkpoints, from its files (``{path: size}``): ``storage`` ``"steps"``
    (``step<N>/config.json`` + ``step<N>/model_and_optim/.metadata``), ``"root"`` (``config.json`` +
    ``model_and_optim/.metadata`` at the root: one final checkpoint) or ``None`` (no checkpoint); ``steps``, and
    ``bytes`` per step (``"root"`` for a root-stored one) of ``model_and_optim/``."""
    steps: dict[int, int] = {}
    complete: set[int] = set()
    for path, size in files.items():
        match = STEP_FILE_RE.match(path)
        if match and match[2].startswith("model_and_optim/"):
            steps[int(match[1])] = steps.get(int(match[1]), 0) + size
            if match[2] == "model_and_optim/.metadata" and f"step{match[1]}/config.json" in files:
                complete.add(int(match[1]))
    if complete:
        return {"storage": "steps", "steps": sorted(complete), "bytes": {str(s): steps[s] for s in sorted(complete)}}
    if "model_and_optim/.metadata" in files and "config.json" in files:
        total = sum(size for path, size in files.items() if path.startswith("model_and_optim/"))
        return {"storage": "root", "steps": [], "bytes": {"root": total}}
    return {"storage": None, "steps": [], "bytes": {}}


def config_shape(config: dict[str, Any]) -> dict[str, Any]:
    """``{d, L, heads, final_step}`` from an experiment ``config.json`` (``None`` for what it does not say;
    ``final_step``: ``trainer.max_duration`` when given in steps)."""
    model = config.get("model") if isinstance(config.get("model"), dict) else config
    block = model.get("block") if isinstance(model.get("block"), dict) else {}
    attention = block.get("attention") or block.get("sequence_mixer") or {}
    duration = (config.get("trainer") or {}).get("max_duration") if isinstance(config.get("trainer"), dict) else None
    final = duration.get("value") if isinstance(duration, dict) and duration.get("unit") == "steps" else None
    return {"d": model.get("d_model"), "L": model.get("n_layers"),
            "heads": attention.get("n_heads") if isinstance(attention, dict) else None,
            "final_step": int(final) if isinstance(final, int) else None}


def describe_repo(repo_id: str, files: dict[str, int], private: bool, sha: str | None,
                  config: dict[str, Any] | None) -> dict[str, Any]:
    """The listing's record of one repository (see the module docstring)."""
    entry: dict[str, Any] = {"repo": repo_id, "private": private, "sha": sha,
                             "tokenizer": any(p.startswith("tokenizer/") for p in files),
                             "total_bytes": sum(files.values()), **checkpoint_layout(files)}
    try:
        parsed = parse_repo_name(repo_id)
    except ValueError as exc:
        entry["parse_error"] = str(exc)
    else:
        entry.update({k: parsed[k] for k in ("arch", "variant", "lr", "depth")}, size=parsed["budget"],
                     name=parsed["name"], suffix=parsed["suffix"])
    shape = config_shape(config) if config else {}
    entry["config"] = shape or None
    if entry["storage"] == "root":
        entry["final_step"] = shape.get("final_step")
    else:
        entry["final_step"] = entry["steps"][-1] if entry["steps"] else None
    return entry


# ================================================================================================ the sync
def _network_errors() -> tuple[type[BaseException], ...]:
    from huggingface_hub.errors import HfHubHTTPError

    try:  # the HTTP client of this huggingface_hub (httpx2, earlier httpx)
        import httpx2 as http
    except ImportError:
        import httpx as http
    return (HfHubHTTPError, http.HTTPError, OSError, ValueError)


def _read_repo(api, model, endpoint_label: str) -> dict[str, Any]:

    from huggingface_hub.hf_api import RepoFile

    refs = api.list_repo_refs(model.id)
    sha = next((b.target_commit for b in refs.branches if b.name == "main"), None)
    files = {f.path: f.size for f in api.list_repo_tree(model.id, recursive=True, revision=sha)
             if isinstance(f, RepoFile)}
    layout = checkpoint_layout(files)
    config = None
    if layout["storage"]:
        name = "config.json" if layout["storage"] == "root" else f"step{layout['steps'][-1]}/config.json"
        try:
            config = atomic.read_json(api.hf_hub_download(model.id, name, revision=sha))
        except ValueError:  # not valid JSON: described without a config
            config = None
    return describe_repo(model.id, files, bool(getattr(model, "private", False)), sha,
                         config if isinstance(config, dict) else None)


def sync(endpoint: str | None = None, org: str = ORG, token: str | bool | None = None, path: str | None = None,
         log=print, today: str | None = None) -> dict[str, Any]:
    """Read the whole listing of ``org`` from ``endpoint`` (default ``HF_ENDPOINT`` / huggingface.co) and write it
    to ``path`` (default :func:`listing_path`); returns the listing. Raises :class:`ListingError` when anything
    could not be read (the previous overlay is then left as it was; nothing is written)."""
    from huggingface_hub import HfApi
    from tqdm.auto import tqdm

    api = HfApi(endpoint=endpoint, token=token)
    label = api.endpoint
    path = path or listing_path(org)
    previous = _previous(path)
    errors = _network_errors()
    try:
        models = list(api.list_models(author=org))
    except errors as exc:
        raise ListingError(f"could not list the repositories of {org} on {label} ({_short(exc)}); {previous}"
                           ) from None
    repos = []
    with tqdm(models, desc=f"reading {len(models)} repositories of {org}", unit="repo", dynamic_ncols=True) as bar:
        for k, model in enumerate(bar, 1):
            try:
                repos.append(_read_repo(api, model, label))
            except errors as exc:
                raise ListingError(f"reading {model.id} ({k} of {len(models)}) on {label} failed ({_short(exc)}); "
                                   f"{previous}") from None
    listing = {"format_version": LISTING_FORMAT, "org": org, "endpoint": label,
               "synced": today or datetime.date.today().isoformat(), "authenticated": bool(api.token),
               "repos": sorted(repos, key=lambda r: r["repo"])}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic.write_json(path, listing)
    log(summary_line(listing) + f" -> {path}")
    return listing


def _previous(path: str) -> str:
    try:
        old = load_listing(path)
    except ListingFileError:
        old = None
    return (f"the previous listing ({path}, synced {old['synced']}) is unchanged" if old
            else "no listing was written")


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def summary_line(listing: dict[str, Any]) -> str:
    """``N repositories of ORG on ENDPOINT (synced DATE): a parsed, b root-stored, c without a checkpoint, d names
    that do not parse``."""
    repos = listing["repos"]
    parsed = [r for r in repos if "parse_error" not in r]
    return (f"{len(repos)} repositories of {listing['org']} on {listing['endpoint']} (synced {listing['synced']}): "
            f"{len(parsed)} named as the study names its runs, "
            f"{sum(r['storage'] == 'root' for r in repos)} storing the final checkpoint at the root, "
            f"{sum(r['storage'] is None for r in repos)} without any checkpoint, "
            f"{len(repos) - len(parsed)} names that do not parse"
            + (f", {sum(r['private'] for r in repos)} private" if any(r["private"] for r in repos) else ""))


def source_note(listing: dict[str, Any]) -> str:
    """How a fact from the listing is cited: ``from the Hub listing of ORG on ENDPOINT, DATE``."""
    return f"from the Hub listing of {listing['org']} on {listing['endpoint']}, {listing['synced']}"
