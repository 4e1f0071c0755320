"""Model shapes: the study's width/depth design rule, its named grids and exact parameter tables.

Every model in the study is a Llama-style decoder whose shape follows one rule (the study's design rule):
``H`` heads of an even width ``hd`` give ``d = H * hd``; the SwiGLU width is ``f = 8d/3`` rounded *up* to a
multiple of 16; for each depth ``L`` the head width is the one whose parameter count lands closest to the budget.
This module computes shapes from that rule instead of enumerating them, and names each one ``<grid>-L<depth>``::

    depthbench shapes 400m                    # the 400M fixed-total series with exact counts
    depthbench shapes 400m --arch mhc         # ... with mHC's extra parameters in the total
    depthbench shapes 300m-backbone --depths 16,42 --csv
    depthbench shapes --budget 120m --depths 8,16,32 --vocab-size 32000

    >>> from depthbench.shapes import get_shape
    >>> get_shape("400m-L24").config_fields()["hidden_size"]
    1024

**How a grid fixes its budget (anchor rule).** A grid names a nominal budget (e.g. 400M total) and an *anchor* depth
(the study's base shape, aspect ratio d/L ~ 43). The anchor gets the head width closest to the nominal budget; the
exact count of that anchor shape is then the budget every other depth of the grid is matched to. This reproduces
every shape table of the study (its released model configurations) row by row. Matching the nominal budget directly
reproduces all rows but two: 400M-L20 (d=1120 gives 414.1M, +3.5 % of 400M, while d=1088 gives 394.2M, -1.5 %; the
study used 1120, which is +2.1 % of the 405.4M base shape) and 200M-L12 (d=896 at 206.1M vs d=864 at 194.4M; the
study used 896, which is +0.7 % of the 204.7M L18 anchor). No row needs a hand-written exception.

Parameter counts always come from the architecture's own config (``parameter_counts()``), so a table for ``hc`` or
``mhc`` includes their connector parameters; shapes themselves are chosen on the Pre-LN backbone, as in the study
(every architecture is trained at the same shapes).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

COUNTS = ("total", "backbone")
"""What a budget holds fixed: the whole model or the transformer blocks only (no embedding, LM head, final norm)."""

FFN_RULES: dict[str, Callable[[int], int]] = {
    "8/3": lambda d: -(-8 * d // 48) * 16,  # ceil(8d/3 / 16) * 16: the study's SwiGLU width
    "3": lambda d: 3 * d,  # the 1.6B tier (Qwen3-1.7B-like)
    "4": lambda d: 4 * d,
}
"""SwiGLU width rules: name -> ``f(d)``."""


def _check(ok: bool, field: str, value, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{field}={value!r} is not allowed: {field} must be {allowed}.")


def _is_int(value, minimum: int = 1) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


# ================================================================================================ shapes
@dataclass(frozen=True)
class Shape:
    """One model shape of a grid (MHA when ``num_key_value_heads == num_attention_heads``).

    Invariants (checked at construction): positive sizes, even ``head_dim`` (RoPE rotates pairs),
    ``hidden_size == num_attention_heads * head_dim`` (the design rule), and ``num_key_value_heads`` divides
    ``num_attention_heads``.
    """

    grid: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int

    def __post_init__(self) -> None:
        for field in ("num_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                      "num_key_value_heads", "head_dim", "vocab_size"):
            _check(_is_int(getattr(self, field)), field, getattr(self, field), "an integer >= 1")
        _check(self.head_dim % 2 == 0, "head_dim", self.head_dim, "even (rotary embeddings rotate pairs)")
        _check(self.hidden_size % self.num_attention_heads == 0, "hidden_size", self.hidden_size,
               f"divisible by num_attention_heads={self.num_attention_heads}")
        _check(self.hidden_size == self.num_attention_heads * self.head_dim, "head_dim", self.head_dim,
               f"hidden_size / num_attention_heads = {self.hidden_size // self.num_attention_heads}")
        _check(self.num_attention_heads % self.num_key_value_heads == 0, "num_key_value_heads",
               self.num_key_value_heads, f"a divisor of num_attention_heads={self.num_attention_heads}")

    @property
    def name(self) -> str:
        """``<grid>-L<depth>``, e.g. ``"400m-L24"`` (what :func:`get_shape` parses)."""
        return f"{self.grid}-L{self.num_layers}"

    @property
    def aspect_ratio(self) -> float:
        """Width over depth, d/L."""
        return self.hidden_size / self.num_layers

    def config_fields(self) -> dict[str, int]:
        """Keyword arguments for ``depthbench.registry.build_config(arch, **fields)`` (includes ``vocab_size``)."""
        return {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
        }

    def parameter_counts(self, arch: str | None = None) -> dict[str, int]:
        """Exact counts (``embedding``, ``backbone``, ``lm_head``, ``final_norm``, ``extra``, ``total``) at this
        shape, from a config alone (no model is built): of the shared backbone config the design rule counts
        (``arch=None``, ``extra`` = 0), or of registered architecture ``arch`` at its config defaults (the
        registry's plain-Python ``extra`` count, equal to ``build_config(arch, **fields).parameter_counts()``)."""
        counts = dict(_backbone_counts(**self.config_fields()))
        if arch is not None:
            from depthbench.registry import get  # the registry table itself imports no model code

            counts["extra"] = get(arch).extra(self.hidden_size, self.num_layers,
                                              self.num_key_value_heads * self.head_dim)
            counts["total"] += counts["extra"]
        return counts


@functools.lru_cache(maxsize=4096)
def _backbone_counts(**fields: int) -> dict[str, int]:
    """``DepthBenchConfig(**fields).parameter_counts()`` (the Pre-LN backbone, untied head), in plain Python so that
    ``depthbench shapes`` answers without importing transformers; ``tests/test_cli_latency.py`` checks that the two
    agree on every shape of every grid."""
    d, f, hd = fields["hidden_size"], fields["intermediate_size"], fields["head_dim"]
    q_width, kv_width = fields["num_attention_heads"] * hd, fields["num_key_value_heads"] * hd
    per_block = 2 * d * q_width + 2 * d * kv_width + 3 * d * f + 2 * d  # q, o, k, v; SwiGLU; two norms
    counts = {"embedding": fields["vocab_size"] * d, "backbone": fields["num_hidden_layers"] * per_block,
              "lm_head": fields["vocab_size"] * d, "final_norm": d, "extra": 0}
    counts["total"] = sum(counts.values())
    return counts


def _held(counts: dict[str, int], count: str) -> int:
    """The count a budget holds fixed; an architecture's extra parameters count toward both kinds."""
    return counts["total"] if count == "total" else counts["backbone"] + counts["extra"]


def shape_for_budget(
    budget: int,
    num_layers: int,
    *,
    vocab_size: int = 50280,
    heads: int = 16,
    kv_heads: int | None = None,
    ffn: str = "8/3",
    count: str = "total",
    grid: str = "custom",
) -> Shape:
    """The design-rule shape of depth ``num_layers`` whose ``count`` is closest to ``budget``.

    ``d = heads * hd`` over even ``hd``, ``f = FFN_RULES[ffn](d)``; the Pre-LN parameter count is increasing in
    ``hd``, so the search walks ``hd = 2, 4, ...`` until it passes the budget and keeps the closer of the last two
    (the smaller one on a tie).

    Args:
        budget: Parameter count to match (of the whole model or of the blocks, see ``count``).
        num_layers: Depth L.
        vocab_size: Vocabulary size (untied embedding and LM head).
        heads: Query heads H.
        kv_heads: Key/value heads (GQA); ``None`` means ``heads`` (MHA).
        ffn: SwiGLU width rule, a key of :data:`FFN_RULES`.
        count: ``"total"`` or ``"backbone"``: which count is held fixed.
        grid: Grid name stored in the returned shape (its ``name`` is ``<grid>-L<num_layers>``).
    """
    kv_heads = heads if kv_heads is None else kv_heads
    _check(_is_int(budget), "budget", budget, "an integer >= 1")
    _check(_is_int(num_layers), "num_layers", num_layers, "an integer >= 1")
    _check(_is_int(heads), "heads", heads, "an integer >= 1")
    _check(_is_int(kv_heads) and heads % kv_heads == 0, "kv_heads", kv_heads, f"a divisor of heads={heads}")
    _check(ffn in FFN_RULES, "ffn", ffn, f"one of {list(FFN_RULES)}")
    _check(count in COUNTS, "count", count, f"one of {list(COUNTS)}")

    def make(hd: int) -> tuple[Shape, int]:
        d = heads * hd
        shape = Shape(grid, num_layers, d, FFN_RULES[ffn](d), heads, kv_heads, hd, vocab_size)
        return shape, _held(shape.parameter_counts(), count)

    best, best_count = make(2)
    hd = 2
    while best_count < budget:
        hd += 2
        candidate, candidate_count = make(hd)
        if abs(candidate_count - budget) < abs(best_count - budget):
            best, best_count = candidate, candidate_count
        if candidate_count >= budget:
            break
    return best


# ================================================================================================ grids
@dataclass(frozen=True)
class Grid:
    """A named family of shapes at one parameter budget (a torchtitan-style "flavor" list).

    Attributes:
        name: Grid name; shapes are named ``<name>-L<depth>``.
        nominal: Headline budget (e.g. 400M). The exact budget is :attr:`budget` (anchor rule, module docstring).
        count: ``"total"`` or ``"backbone"``: which count is held fixed across depths.
        depths: The depths of the grid.
        anchor: Depth whose closest-to-``nominal`` shape fixes the exact budget (the study's base shape).
        vocab_size: Vocabulary size.
        heads: Query heads.
        kv_heads: Key/value heads (``None`` = MHA).
        ffn: SwiGLU width rule (key of :data:`FFN_RULES`).
        description: One line for tables and ``--help``.
    """

    name: str
    nominal: int
    count: str
    depths: tuple[int, ...]
    anchor: int
    vocab_size: int = 50280
    heads: int = 16
    kv_heads: int | None = None
    ffn: str = "8/3"
    description: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.depths, (list, range)):
            object.__setattr__(self, "depths", tuple(self.depths))  # hashable (grids key the shape caches)
        _check(bool(re.fullmatch(r"[A-Za-z0-9_.]+(-[A-Za-z0-9_.]+)*", self.name)) and "-L" not in self.name,
               "name", self.name, "letters, digits, '.', '_' and '-' (without '-L')")
        _check(len(self.depths) > 0, "depths", self.depths, "a non-empty tuple of depths")
        _check(all(_is_int(x) for x in self.depths) and len(set(self.depths)) == len(self.depths), "depths",
               self.depths, "distinct integers >= 1")
        _check(_is_int(self.anchor), "anchor", self.anchor, "an integer >= 1")
        _check(self.count in COUNTS, "count", self.count, f"one of {list(COUNTS)}")
        _check(self.ffn in FFN_RULES, "ffn", self.ffn, f"one of {list(FFN_RULES)}")

    @property
    def budget(self) -> int:
        """Exact count held fixed: ``count`` of the anchor shape (closest to ``nominal`` at depth ``anchor``)."""
        return _grid_budget(self)

    def shape(self, num_layers: int) -> Shape:
        """The shape of depth ``num_layers`` (any depth; :func:`get_shape` only accepts the listed ones)."""
        return _grid_shape(self, num_layers)

    def shapes(self) -> list[Shape]:
        return [self.shape(depth) for depth in self.depths]


def _rule_kwargs(grid: Grid) -> dict:
    return {"vocab_size": grid.vocab_size, "heads": grid.heads, "kv_heads": grid.kv_heads, "ffn": grid.ffn,
            "count": grid.count, "grid": grid.name}


@functools.cache
def _grid_budget(grid: Grid) -> int:
    anchor = shape_for_budget(grid.nominal, grid.anchor, **_rule_kwargs(grid))
    return _held(anchor.parameter_counts(), grid.count)


@functools.cache
def _grid_shape(grid: Grid, num_layers: int) -> Shape:
    return shape_for_budget(grid.budget, num_layers, **_rule_kwargs(grid))


_M = 1_000_000
GRIDS: dict[str, Grid] = {
    g.name: g
    for g in (
        # The study's grids (its shape tables). Anchors are each tier's base shape (d/L ~ 43).
        Grid("400m", 400 * _M, "total", (16, 20, 24, 26, 28, 30, 32, 36, 42, 50, 56, 62, 70), anchor=24,
             description="400M fixed-total series (main sweep L16-L32, deep L36-L70)"),
        Grid("300m-backbone", 300 * _M, "backbone", (16, 24, 32, 42, 56, 70, 84), anchor=24,
             description="~300M fixed-backbone series (blocks held fixed, embedding excluded)"),
        Grid("200m", 200 * _M, "total", (12, 18, 24), anchor=18, description="200M multi-scale ladder"),
        Grid("300m", 300 * _M, "total", (14, 21, 28), anchor=21, description="300M multi-scale ladder"),
        Grid("500m", 500 * _M, "total", (17, 26, 34), anchor=26, description="500M multi-scale ladder"),
        Grid("1.6b", 1600 * _M, "total", (28, 40, 54), anchor=40, kv_heads=8, ffn="3",
             description="1.6B Qwen3-1.7B-like tier: GQA 16 query / 8 KV heads, f = 3d"),
        # CPU-sized grids. 16 heads would force head widths of 4-12 at these widths, so they use fewer heads.
        Grid("tiny", 2 * _M, "total", (2, 4, 6, 8, 12, 16), anchor=4, vocab_size=1024, heads=4,
             description="~2M-parameter CPU grid for tests and demos (4 heads, vocab 1024)"),
        Grid("bench", 20 * _M, "total", (4, 8, 12, 16), anchor=8, vocab_size=8192, heads=8,
             description="~20M-parameter CPU grid for `depthbench bench` (8 heads, vocab 8192)"),
        # The demo's budget: small enough for 27 runs at 5 tokens/parameter in minutes on 2 cores. At d ~ 20-50 the
        # width steps (2 heads: d in steps of 4; f in steps of 16) are coarse, so the grid lists only the depths whose
        # rule-chosen shape lands within 3.5 % of the budget (L3, L4, L6, L7, L9, L10 miss it by 4-13 %).
        Grid("micro", 80_000, "total", (1, 2, 5, 8, 11), anchor=5, vocab_size=512, heads=2,
             description="~78k-parameter CPU grid of the demo (2 heads, vocab 512)"),
    )
}
"""Named grids: name -> :class:`Grid`."""


def get_grid(name: str) -> Grid:
    """The named grid; an unknown name raises ``ValueError`` listing the valid ones."""
    try:
        return GRIDS[name]
    except KeyError:
        raise ValueError(f"grid={name!r} is not allowed: grid must be one of {list(GRIDS)}.") from None


def _check_depths(grid: Grid, depths: Iterable[int]) -> list[int]:
    depths = list(depths)
    _check(len(depths) > 0, "depths", depths, f"a non-empty subset of {list(grid.depths)}")
    for depth in depths:
        _check(depth in grid.depths, "depth", depth, f"one of {list(grid.depths)} for grid {grid.name!r}")
    return depths


def grid_shapes(grid: str, depths: list[int] | None = None) -> list[Shape]:
    """The shapes of grid ``grid`` (all its depths, or the listed subset, in the order given)."""
    g = get_grid(grid)
    return [g.shape(depth) for depth in (_check_depths(g, depths) if depths is not None else g.depths)]


def get_shape(spec: str) -> Shape:
    """Parse ``"<grid>-L<depth>"`` (e.g. ``"400m-L24"``, ``"tiny-L4"``) into its :class:`Shape`."""
    match = re.fullmatch(r"(.+)-L(\d+)", spec.strip()) if isinstance(spec, str) else None
    _check(match is not None, "shape", spec, f"'<grid>-L<depth>' with grid one of {list(GRIDS)}")
    grid = get_grid(match.group(1))
    return grid.shape(_check_depths(grid, [int(match.group(2))])[0])


def shape_names(grid: str | None = None) -> list[str]:
    """Every named shape (of one grid, or of all grids)."""
    grids = [get_grid(grid)] if grid is not None else list(GRIDS.values())
    return [f"{g.name}-L{depth}" for g in grids for depth in g.depths]


# ================================================================================================ tables
def param_table(
    grid_or_shapes: str | Sequence[Shape],
    arch: str | None = None,
    *,
    budget: int | None = None,
    count: str | None = None,
) -> list[dict]:
    """One row per shape: L, d, f, heads, kv_heads, head_dim, d/L, backbone, extra, total and the difference from
    the budget in percent.

    Args:
        grid_or_shapes: A grid name or a list of shapes.
        arch: Registered architecture whose parameter counts are reported (``extra`` = what it adds to Pre-LN), or
            ``None`` (default): the shared backbone the design rule counts (Pre-LN's counts, computed without
            loading any model code, so ``depthbench shapes`` answers at once); rows then say ``"pre_ln"``, whose
            counts these are (Pre-LN adds nothing to the backbone; ``tests/test_shapes.py`` checks it).
        budget: Budget for ``diff_pct``; defaults to the shape's grid budget (``None`` for ad-hoc shapes).
        count: What ``budget`` holds fixed (``"total"``/``"backbone"``); defaults to the grid's.

    ``diff_pct`` compares the held count (total, or backbone + extra for fixed-backbone grids) with the budget.
    """
    if isinstance(grid_or_shapes, str):
        shapes = grid_shapes(grid_or_shapes)
    else:
        shapes = list(grid_or_shapes)
        _check(len(shapes) > 0 and all(isinstance(s, Shape) for s in shapes), "grid_or_shapes", grid_or_shapes,
               f"a grid name (one of {list(GRIDS)}) or a non-empty list of Shape")
    _check(count is None or count in COUNTS, "count", count, f"one of {list(COUNTS)}")
    if arch is not None:
        from depthbench.registry import get

        get(arch)  # unknown ids raise, listing the valid ones
    rows = []
    for shape in shapes:
        grid = GRIDS.get(shape.grid)
        row_count = count or (grid.count if grid is not None else "total")
        row_budget = budget if budget is not None else (grid.budget if grid is not None else None)
        counts = shape.parameter_counts(arch)
        held = _held(counts, row_count)
        rows.append({
            "shape": shape.name,
            "arch": arch or "pre_ln",
            "L": shape.num_layers,
            "d": shape.hidden_size,
            "f": shape.intermediate_size,
            "heads": shape.num_attention_heads,
            "kv_heads": shape.num_key_value_heads,
            "head_dim": shape.head_dim,
            "d/L": round(shape.aspect_ratio, 2),
            "backbone": counts["backbone"],
            "extra": counts["extra"],
            "total": counts["total"],
            "count": row_count,
            "budget": row_budget,
            "diff_pct": None if row_budget is None else round(100.0 * (held - row_budget) / row_budget, 2),
        })
    return rows


def millions(n: int | None) -> str:
    """A parameter count as the tables print it: ``405_406_720`` -> ``"405.4M"``, ``None`` -> ``"-"``."""
    if n is None:
        return "-"
    return f"{n / 1e6:.1f}M" if abs(n) >= 950_000 else f"{n / 1e3:.1f}k" if n else "0"


def format_table(rows: list[dict]) -> str:
    """Human-readable table of :func:`param_table` rows (counts in millions, as the study prints them)."""
    header = ["shape", "L", "d", "f", "heads", "head_dim", "d/L", "backbone", "extra", "total", "diff"]
    body = []
    for r in rows:
        heads = str(r["heads"]) if r["kv_heads"] == r["heads"] else f"{r['heads']}/{r['kv_heads']}kv"
        diff = "-" if r["diff_pct"] is None else f"{r['diff_pct']:+.1f}%"
        body.append([r["shape"], str(r["L"]), str(r["d"]), str(r["f"]), heads, str(r["head_dim"]),
                     f"{r['d/L']:.2f}", millions(r["backbone"]), millions(r["extra"]), millions(r["total"]), diff])
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
             for line in [header, *body]]
    return "\n".join(lines)


def parse_count(text: str) -> int:
    """``"400m"``, ``"1.6b"``, ``"20M"``, ``"2e6"``, ``"123456"`` -> an integer parameter count."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbg]?)\s*", text.lower())
    _check(match is not None, "budget", text, "a number with an optional k/m/b suffix, e.g. 400m or 1.6b")
    scale = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9}[match.group(2)]
    return int(round(float(match.group(1)) * scale))


def parse_depths(text: str) -> list[int]:
    try:
        depths = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        depths = []
    _check(len(depths) > 0 and all(x >= 1 for x in depths), "--depths", text,
           "a comma-separated list of positive integers, e.g. 16,24")
    return depths
