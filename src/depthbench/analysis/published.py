"""The study's published layer figures beside ours, for a released model of the study.

When ``depthbench analyze`` runs on a converted release (a ``depthbench convert`` folder, ``from_released``'s cache
entry, a run of a ``depthbench released eval`` folder, or a model whose card names the release as its
``base_model``), the release is identified from the conversion record ``depthbench_conversion.json`` (else the
card), its name parsed (``depthbench.repo_names``) and matched to the catalogue by the model's config (width, depth,
heads: :meth:`~depthbench.hub.catalogue.Catalogue.match_shape`), which gives the study's shape (e.g. ``400m-L32``).
For each metric the study published a number for (``published_figures.json`` ``layer_analyses``: the late-layer
fractions at L = 32 of Figure 6, the HC / mHC transport effective rank of Figure 10, the prefill FLOPs of Figure 11,
arXiv 2609.32534), the metric's JSON gets a ``published`` entry (the study's value, ours, whether the settings
agree, the source), and ``published.json`` in the output folder lists them all; where the study published nothing
for the metric at that shape, the entry says so. A model that is not a release gets no entry.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from depthbench import atomic
from depthbench.hub.convert import CONVERSION_RECORD

logger = logging.getLogger(__name__)

SUMMARY_FILE = "published.json"


# ================================================================================================ which release
def _local_source(folder: str) -> tuple[str, str] | None:
    record = atomic.read_json(os.path.join(folder, CONVERSION_RECORD))
    if isinstance(record, dict) and record.get("source_repo"):
        return str(record["source_repo"]), f"{CONVERSION_RECORD} (source_repo)"
    card = os.path.join(folder, "README.md")
    if os.path.isfile(card):
        from huggingface_hub import ModelCard

        try:
            base = ModelCard.load(card).data.to_dict().get("base_model")
        except (ValueError, OSError):
            base = None
        base = base[0] if isinstance(base, list) and len(base) == 1 else base
        if isinstance(base, str) and base:
            return base, "model card (base_model)"
    return None


def _hub_source(repo_id: str) -> tuple[str, str] | None:
    """The release named by a Hub model's conversion record or card (``None`` when it has neither)."""
    import tempfile

    from huggingface_hub import hf_hub_download

    for name in (CONVERSION_RECORD, "README.md"):
        try:
            path = hf_hub_download(repo_id, name)
        except Exception:  # noqa: BLE001  (absent file, offline, gated: the model is then not known as a release)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            os.symlink(path, os.path.join(tmp, name))
            found = _local_source(tmp)
        if found:
            return found
    return None


def release_of(target: str, model, *, catalogue=None) -> dict[str, Any] | None:
    """What release of the study ``model`` (loaded from ``target``) is: ``{"repo", "arch", "grid", "depth",
    "shape", "found_in"}`` (``grid`` ``None`` and ``why`` when its config matches none of the study's shapes of that
    architecture), or ``None`` when nothing names a release of the study's naming."""
    from depthbench.repo_names import parse_repo_name
    from depthbench.runs import model_dir

    try:
        path = model_dir(target)
    except ValueError:
        return None
    found = _local_source(path) if os.path.isdir(path) else _hub_source(path)
    if found is None:
        return None
    repo, found_in = found
    try:
        parsed = parse_repo_name(repo)
    except ValueError:
        return None
    cfg = model.config
    width, depth = getattr(cfg, "hidden_size", None), getattr(cfg, "num_hidden_layers", None)
    heads = getattr(cfg, "num_attention_heads", None)
    out = {"repo": repo, "arch": parsed["arch"], "depth": depth, "found_in": found_in, "grid": None, "shape": None}
    model_type = str(getattr(cfg, "model_type", ""))
    if model_type.startswith("depthbench_") and model_type != f"depthbench_{parsed['arch']}":
        return {**out, "why": f"the model is {model_type}, the release name says {parsed['arch']}"}
    catalogue = catalogue if catalogue is not None else _catalogue()
    grids = sorted({r.grid for r in catalogue.match_shape(parsed["arch"], width, depth, heads) if r.grid})
    if len(grids) != 1:
        return {**out, "why": (f"its config (d={width}, L={depth}, {heads} heads) is "
                               + ("none of the study's shapes of " + parsed["arch"] if not grids else
                                  "the shape of several of the study's grids (" + ", ".join(grids) + ")"))}
    return {**out, "grid": grids[0], "shape": f"{grids[0]}-L{depth}"}


def _catalogue():
    from depthbench.hub.catalogue import Catalogue
    from depthbench.hub.listing import ListingError, load_listing

    shipped = Catalogue.load()
    try:
        return shipped.with_listing(load_listing())
    except (ListingError, ValueError):
        return shipped


# ================================================================================================ the figures
def _ours(metric: str, values: dict[str, Any], spec: dict[str, Any]) -> tuple[Any, list[str]]:
    """Our value that stands beside the published one, and why the two are not comparable (empty: they are)."""
    differs = []
    if metric in ("causal", "permutation"):
        if values.get("threshold") != spec["threshold"]:
            differs.append(f"threshold {values.get('threshold')} here, {spec['threshold']} in the study")
        if metric == "permutation" and values.get("anchors"):
            differs.append("only pairs with --anchor-layer were scored here")
        return values.get("late_fraction_above"), differs
    if metric == "hc_transport":
        return values.get("product_erank"), differs
    if values.get("seq_len") != spec["seq_len"]:
        differs.append(f"T = {values.get('seq_len')} here, {spec['seq_len']} in the study")
    return (values.get("measured") or {}).get("prefill_flops"), differs


def comparison(metric: str, values: dict[str, Any], release: dict[str, Any], published: dict[str, Any]
               ) -> dict[str, Any] | None:
    """The ``published`` entry of ``metric``'s JSON for ``release`` (``None``: the study has no such figure)."""
    from depthbench.hub.catalogue import LAYER_FIGURES, published_layer_figure

    if metric not in LAYER_FIGURES:
        return None
    head = {"release": release["repo"], "shape": release.get("shape")}
    if release.get("grid") is None:
        return {**head, "published": None, "why": f"no figure of the study is set beside it: {release['why']}"}
    spec = published_layer_figure(published, metric, release["arch"], release["grid"], release["depth"])
    if spec.get("published") is None:
        return {**head, **spec}
    ours, differs = _ours(metric, values, spec)
    entry = {**head, **spec, "ours": ours, "comparable": not differs}
    if differs:
        entry["not_comparable"] = differs
    if spec.get("range") and ours is not None:
        entry["within_range"] = spec["published"][0] <= ours <= spec["published"][1]
    return entry


def describe(metric: str, entry: dict[str, Any]) -> str:
    """One line for the terminal: ours beside the study's figure and its source (or why there is none)."""
    if entry.get("published") is None:
        return f"{metric}: the study's figure: none ({entry['why']})"
    pub, ours, about = entry["published"], entry.get("ours"), "≈" if entry.get("approximate") else ""
    if metric in ("causal", "permutation"):
        text = (f"late pairs > {entry['threshold']}: ours {_pct(ours)}, the study {about}{_pct(pub)}")
    elif metric == "hc_transport":
        text = f"transport effective rank: ours {_num(ours)}, the study {pub[0]}–{pub[1]} (range)"
    else:
        text = f"prefill FLOPs at T = {entry['seq_len']}: ours {_num(ours, 'e')}, the study {about}{pub:.1e}"
    if entry.get("not_comparable"):
        text += f" [not comparable: {'; '.join(entry['not_comparable'])}]"
    return f"{metric}: {text} ({entry['source'].split(';')[0]})"


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.0f} %" if abs(100 * v - round(100 * v)) < 1e-9 else f"{100 * v:.1f} %"


def _num(v, fmt: str = "f") -> str:
    return "n/a" if v is None else (f"{v:.2e}" if fmt == "e" else f"{v:.2f}")


def annotate(out_dir: str, metric: str, release: dict[str, Any], published: dict[str, Any] | None = None,
             log=print) -> dict[str, Any] | None:
    """Add the ``published`` entry to ``out_dir/<metric>.json`` and ``published.json``; log its line. Returns the
    entry (``None``: no figure of the study corresponds to ``metric``, nothing written)."""
    from depthbench.hub.catalogue import load_published

    path = os.path.join(out_dir, f"{metric}.json")
    payload = atomic.read_json(path)
    if not isinstance(payload, dict):
        return None
    entry = comparison(metric, payload.get("values") or {}, release,
                       load_published() if published is None else published)
    if entry is None:
        return None
    payload["published"] = entry
    atomic.write_json(path, payload)
    summary_path = os.path.join(out_dir, SUMMARY_FILE)
    summary = atomic.read_json(summary_path)
    if not isinstance(summary, dict) or summary.get("release", {}).get("repo") != release["repo"]:
        summary = {"release": release, "metrics": {}}
    summary["metrics"][metric] = entry
    atomic.write_json(summary_path, summary)
    log(describe(metric, entry))
    return entry
