"""The study beside a sweep: the ``## Beside the study`` part of a sweep's ``report.md``.

A report is sent around on its own, so it carries the context a reader needs to weigh it: the study's result at its
400M budget for the architectures the sweep trained (arXiv 2609.32534, Fig. 2: the validation losses of
``depthbench/hub/published_figures.json``), each architecture's change from the shallowest to the deepest shape here
beside the study's, and what separates the two: the aspect ratios d/L, the parameter count, the tokens per parameter,
the learning rates, the data. Every number about the sweep comes from its own rows; every number about the study from
the published figures, the ``400m`` shape grid (:mod:`depthbench.shapes`) and the study's recipe as shipped
(``configs/400m.yaml``). Nothing here trains, reads a run folder or plots.
"""

from __future__ import annotations

from typing import Any

from depthbench.sweeps.results import best_points, loss_changes, metric_label

STUDY_GRID = "400m"
"""The study's budget whose published validation losses are shown beside a sweep (its main result)."""
STUDY_RECIPE = "400m.yaml"
"""The study's training recipe as shipped with the package (its token count gives the study's tokens/parameter)."""
MARKS = {"lower": "beyond", "higher": "beyond", "within": "within", "one seed": "one seed"}
"""How a change's seed-spread verdict is marked in the table (the words are under the loss changes)."""


def study_reference(archs: list[str]) -> dict[str, Any] | None:
    """The study's 400M points for ``archs`` (those it published): the shallowest and deepest depth every one of
    them has, per architecture its label, both losses and the change, the two shapes' d/L and widths, its
    deepest published shape, and its tokens per parameter. ``None`` when the study published none of ``archs`` at
    two common depths."""
    from depthbench.config import read_config_file
    from depthbench.hub.catalogue import load_published
    from depthbench.shapes import get_shape

    published = load_published()
    table = published["validation_loss"]["grids"].get(STUDY_GRID, {})
    shown = [a for a in archs if a in table]
    if not shown:
        return None
    depths = sorted(set.intersection(*({int(k) for k in table[a]} for a in shown)))
    if len(depths) < 2:
        return None
    low, high = depths[0], depths[-1]
    deepest = max(int(k) for a in shown for k in table[a])
    shapes = {L: get_shape(f"{STUDY_GRID}-L{L}") for L in (low, high, deepest)}
    recipe = read_config_file(STUDY_RECIPE)
    tokens = int(recipe["train"]["max_tokens"])
    params = [shapes[L].parameter_counts(a)["total"] for a in shown for L in (low, high)]
    points = {a: {"label": published.get("labels", {}).get(a, a), "shallow": table[a][str(low)],
                  "deep": table[a][str(high)], "change": table[a][str(high)] - table[a][str(low)]} for a in shown}
    return {"low": low, "high": high, "points": points,
            "aspect": (shapes[low].aspect_ratio, shapes[high].aspect_ratio), "width_deep": shapes[high].hidden_size,
            "deepest": (deepest, shapes[deepest].aspect_ratio, shapes[deepest].hidden_size),
            "params": (min(params), max(params)), "tokens": tokens,
            "tokens_per_param": (tokens / max(params), tokens / min(params))}


def _range(low: float, high: float, fmt: str) -> str:
    a, b = format(low, fmt), format(high, fmt)
    return a if a == b else f"{a}-{b}"


def _params(n: float) -> str:
    return f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e3 else f"{n:.0f}"


def _ratio(x: float) -> str:
    """``5,200`` / ``3.9`` / ``1.2``: a ratio written for a sentence."""
    return f"{float(f'{x:.2g}'):,.0f}" if x >= 100 else f"{x:.2g}" if x < 10 else f"{x:.0f}"


def study_section(rows: list[dict[str, Any]], metrics: list[str], spec: dict[str, Any]) -> list[str]:
    """The markdown lines of ``## Beside the study`` (empty when the sweep has no finished point the study can be set
    beside: none of its architectures published at 400M, or fewer than two shapes)."""
    finished = [r for r in rows if r["status"] == "finished"]
    changes = loss_changes(rows, metrics)
    archs = sorted({c["arch"] for c in changes})
    study = study_reference(archs) if archs else None
    if study is None:
        return []
    low, high = study["low"], study["high"]
    a_low, a_high = study["aspect"]
    first = changes[0]
    ours_low, ours_high = first["shallow"], first["deep"]
    lines = ["", "## Beside the study", "",
             f"The study (arXiv 2609.32534, Fig. 2) trains these architectures at its {STUDY_GRID.upper()} budget, "
             f"each point at its best learning rate; its validation loss from L{low} to L{high} (d/L "
             f"{a_low:.0f} to {a_high:.0f}) beside the change from L{ours_low['num_layers']} to "
             f"L{ours_high['num_layers']} (d/L {ours_low['aspect_ratio']:.3g} to {ours_high['aspect_ratio']:.3g}) "
             "here. Negative = deeper is better; *beyond* / *within*: against the seed spread (the rule is under "
             "the loss changes).", ""]
    head = [f"here: {metric_label(m)}" for m in metrics]
    lines += ["| arch | the study: " + f"L{low} \u2192 L{high} | change | " + " | ".join(head)
              + " | same direction as the study |",
              "|---|---:|---:|" + "---:|" * len(metrics) + "---|"]
    for arch in archs:
        s = study["points"].get(arch)
        if s is None:
            continue
        mine = {c["metric"]: c for c in changes if c["arch"] == arch}
        cells = [f"{mine[m]['change']:+.4f} ({MARKS[mine[m]['verdict']]})" if m in mine else "" for m in metrics]
        same = [metric_label(m) for m in metrics if m in mine and (mine[m]["change"] < 0) == (s["change"] < 0)]
        agree = ("on every metric" if len(same) == len(mine) else "on " + ", ".join(same) if same else "no")
        lines.append(f"| {arch} ({s['label']}) | {s['shallow']:.3f} \u2192 {s['deep']:.3f} | {s['change']:+.3f} | "
                     + " | ".join(cells) + f" | {agree} |")
    lines += ["", "What separates the two:", "", *_gaps(finished, rows, metrics, spec, study)]
    return lines


def _gaps(finished: list[dict[str, Any]], rows: list[dict[str, Any]], metrics: list[str], spec: dict[str, Any],
          study: dict[str, Any]) -> list[str]:
    """The list under the table: shapes, scale, tokens, learning rates, data, and what follows from them."""
    a_low, a_high = study["aspect"]
    aspects = sorted({r["aspect_ratio"] for r in finished if r.get("aspect_ratio")})
    inside = [a for a in aspects if a_high <= a <= a_low]
    deepest_L, deepest_a, deepest_d = study["deepest"]
    widths = sorted({r["hidden_size"] for r in finished if r.get("hidden_size")})
    params = [r["params_total"] for r in finished if r.get("params_total")]
    tpp = [r["tokens_per_param"] for r in finished if r.get("tokens_per_param")]
    lrs = sorted({r["lr"] for r in finished if r.get("lr") is not None})
    seeds = max((p["seeds"] for pts in best_points(rows, metrics[-1]).values() for p in pts), default=1)
    out = []
    if aspects:
        where = ("none of them within the study's range" if not inside else
                 f"{len(inside)} of {len(aspects)} within the study's range")
        out.append(f"- **Shapes.** d/L {aspects[-1]:.3g} to {aspects[0]:.3g} here ({where}), {a_low:.0f} to "
                   f"{a_high:.0f} in the study (down to {deepest_a:.2g} at its deepest, L{deepest_L}); the narrowest "
                   f"model here is d = {widths[0]}, the study's narrowest d = {deepest_d}.")
    scale = None
    if params:
        scale = sum(study["params"]) / 2 / (sum(params) / len(params))
        out.append(f"- **Scale.** {_params(min(params))}-{_params(max(params))} parameters here, "
                   f"{_params(study['params'][0])}-{_params(study['params'][1])} in the study"
                   + (f": about 1/{_ratio(scale)} of its size." if scale >= 1.5 else "."))
    if tpp:
        t_low, t_high = study["tokens_per_param"]
        ratio = (sum(tpp) / len(tpp)) / ((t_low + t_high) / 2)
        out.append(f"- **Tokens.** {_range(min(tpp), max(tpp), '.2g')} tokens per parameter here, "
                   f"{_range(t_low, t_high, '.1f')} in the study ({study['tokens'] / 1e9:.1f}B tokens): "
                   f"{_ratio(ratio) + ' times' if ratio >= 1 else 'about ' + _fraction(ratio)} its tokens per "
                   "parameter.")
    if lrs:
        out.append("- **Learning rates.** " + (f"one ({lrs[0]:g}) for every run here" if len(lrs) == 1 else
                                                 f"{len(lrs)} here ({', '.join(f'{lr:g}' for lr in lrs)}), each "
                                                 "point at its best")
                   + "; the study reports each point at its best learning rate.")
    splits = [m for m in metrics if m != "eval_loss"] or metrics
    out.append("- **Data.** The losses here are on this sweep's own held-out data ("
               + ", ".join(f"`{m}`" for m in splits) + "), the study's on held-out FineWeb-Edu text: their levels do "
               "not compare, only the direction and size of the changes.")
    far = not inside or (scale is not None and scale >= 100)
    if far:
        spreads = [p["max"] - p["min"] for pts in best_points(rows, metrics[-1]).values() for p in pts
                   if p["seeds"] > 1]
        out += ["", "**What this sweep cannot show.** With shapes and a scale this far from the study's, it can "
                "neither confirm nor refute the study's result: a difference between the two has the gaps above "
                "as explanations enough, and whether the deep shapes here are simply too narrow is not tested. "
                "What it shows is the pipeline end to end, and how large a change must be to stand out of "
                + (f"{seeds} seeds' spread (a point's seeds spread over {min(spreads):.3g}-{max(spreads):.3g} "
                   "nats here, on the mean of the eval splits)." if spreads else "the seeds' spread (one seed "
                                                                               "here: no spread).")]
    return out


def _fraction(x: float) -> str:
    """0.26 -> ``a quarter of``-style words for a ratio below 1 (``1/4``), else its decimal."""
    inverse = 1 / x
    return f"1/{inverse:.0f} of" if inverse >= 1.5 else f"{x:.2g} of"
