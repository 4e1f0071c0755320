"""Benchmark shapes: :class:`BenchShape` parsing (ad-hoc ``d<width>-L<depth>[-b<batch>][-s<seq>]`` or a named shape
of ``depthbench shapes``) and the speed grids of ``--shapes``. Plain Python (no torch)."""

from __future__ import annotations

import re
from dataclasses import dataclass

HEAD_DIM = 64
"""Head width of ad-hoc benchmark shapes ``d<width>-L<depth>`` (heads = width / 64, f = 8/3 d rounded up to 16)."""

_ADHOC = re.compile(r"d(\d+)-L(\d+)((?:-[bs]\d+)*)")
_NAMED = re.compile(r"(.+?-L\d+)((?:-[bs]\d+)*)")

SPEED_GRID = [f"d{d}-L{depth}-b{b}-s{t}" for d in (256, 1024) for depth in (4, 16)
              for b, t in ((1, 128), (8, 128), (1, 1024), (8, 1024))] + ["d384-L6-b8-s256", "d512-L8-b4-s512"]
BENCH_GRIDS: dict[str, list[str]] = {
    # Corners of the range the speed targets hold over (d 256-1024, L 4-16, batch 1-8, sequence 128-1024), plus
    # its centre and the shape users reported (d=384, L=6, batch 8 x 256).
    "speed": SPEED_GRID,
    # A subset that runs in minutes on 2 CPU cores: both widths' cheapest corners, depth 16, long sequence, the
    # reported shape and a mid shape.
    "speed-quick": ["d256-L4-b1-s128", "d256-L16-b8-s128", "d256-L4-b1-s1024", "d384-L6-b8-s256",
                    "d512-L8-b4-s256", "d1024-L4-b1-s128"],
}
"""Benchmark grids for ``--shapes``: name -> shape specs ``d<width>-L<depth>-b<batch>-s<seq>``. Every shape grid of
``depthbench shapes`` (``bench``, ``tiny``, ...) is accepted too, at ``--batch-size`` x ``--seq-len``."""


@dataclass
class BenchShape:
    """One benchmarked point: model config fields and the training batch."""

    name: str
    fields: dict
    batch_size: int
    seq_len: int


def _batch_and_seq(suffix: str, batch_size: int, seq_len: int) -> tuple[int, int]:
    for part in filter(None, suffix.split("-")):
        value = int(part[1:])
        if value < 1:
            raise ValueError(f"{part!r}: batch size and sequence length must be >= 1")
        batch_size, seq_len = (value, seq_len) if part[0] == "b" else (batch_size, value)
    return batch_size, seq_len


def _adhoc_shape(spec: str, adhoc: re.Match, batch_size: int, seq_len: int, vocab_size: int) -> BenchShape:
    from depthbench.shapes import FFN_RULES

    width, depth = int(adhoc.group(1)), int(adhoc.group(2))
    if width < HEAD_DIM or width % HEAD_DIM or depth < 1:
        raise ValueError(f"shape {spec!r} is not allowed: the width must be a positive multiple of {HEAD_DIM} "
                         "and the depth >= 1 (e.g. d384-L6-b8-s256)")
    fields = {"vocab_size": vocab_size, "hidden_size": width, "intermediate_size": FFN_RULES["8/3"](width),
              "num_hidden_layers": depth, "num_attention_heads": width // HEAD_DIM,
              "num_key_value_heads": width // HEAD_DIM, "head_dim": HEAD_DIM}
    b, t = _batch_and_seq(adhoc.group(3), batch_size, seq_len)
    return BenchShape(f"d{width}-L{depth}-b{b}-s{t}", fields, b, t)


def parse_bench_shape(spec: str, batch_size: int = 8, seq_len: int = 256, vocab_size: int = 8192) -> BenchShape:
    """``d384-L6-b8-s256`` (ad-hoc: heads of 64, f = 8/3 d rounded up to 16, ``vocab_size``) or a named shape
    ``bench-L8`` (optionally ``bench-L8-b1-s1024``); ``-b``/``-s`` default to ``batch_size``/``seq_len``."""
    from depthbench.shapes import get_shape

    spec = spec.strip()
    adhoc = _ADHOC.fullmatch(spec)
    if adhoc:
        return _adhoc_shape(spec, adhoc, batch_size, seq_len, vocab_size)
    named = _NAMED.fullmatch(spec)
    if named is None:
        raise ValueError(f"shape {spec!r} is not allowed: use d<width>-L<depth>[-b<batch>][-s<seq>] (e.g. "
                         "d384-L6-b8-s256) or a named shape <grid>-L<depth> (e.g. bench-L8)")
    fields = get_shape(named.group(1)).config_fields()
    b, t = _batch_and_seq(named.group(2), batch_size, seq_len)
    return BenchShape(f"{named.group(1)}-b{b}-s{t}", fields, b, t)


def resolve_bench_shapes(spec: str, batch_size: int = 8, seq_len: int = 256, vocab_size: int = 8192,
                         quick: bool = False) -> list[BenchShape]:
    """``--shapes``: a benchmark grid name (:data:`BENCH_GRIDS`; ``quick`` picks ``<name>-quick``), a shape grid
    of ``depthbench shapes``, or a comma-separated list of shapes (see :func:`parse_bench_shape`)."""
    from depthbench.shapes import GRIDS, grid_shapes

    spec = spec.strip()
    if quick and f"{spec}-quick" in BENCH_GRIDS:
        spec = f"{spec}-quick"
    if spec in BENCH_GRIDS:
        items = BENCH_GRIDS[spec]
    elif spec in GRIDS:
        items = [s.name for s in grid_shapes(spec)]
    else:
        items = [item for item in spec.split(",") if item.strip()]
    if not items:
        raise ValueError(f"--shapes={spec!r} is not allowed: give shapes separated by commas or a grid name "
                         f"(one of {sorted([*BENCH_GRIDS, *GRIDS])})")
    return [parse_bench_shape(item, batch_size, seq_len, vocab_size) for item in items]
