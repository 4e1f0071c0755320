"""``depthbench.bench.shapes``: ad-hoc and named benchmark shapes, and the speed grids of ``--shapes``.

    python -m pytest tests/bench/test_shapes.py -q
"""

from __future__ import annotations

import pytest

from depthbench.bench.shapes import BENCH_GRIDS, parse_bench_shape, resolve_bench_shapes


def test_adhoc_and_named_shapes():
    shape = parse_bench_shape("d384-L6-b8-s256")
    assert (shape.batch_size, shape.seq_len) == (8, 256)
    assert shape.fields == {"vocab_size": 8192, "hidden_size": 384, "intermediate_size": 1024,
                            "num_hidden_layers": 6, "num_attention_heads": 6, "num_key_value_heads": 6,
                            "head_dim": 64}  # the reported shape: 6 heads of 64, f = 1024
    assert parse_bench_shape("d256-L4", batch_size=2, seq_len=64).name == "d256-L4-b2-s64"
    named = parse_bench_shape("bench-L8-s128", batch_size=4)
    assert named.name == "bench-L8-b4-s128" and named.fields["num_hidden_layers"] == 8
    for bad in ("d100-L4", "d384-L0", "x384", "bench-L3", "d384-L6-b0"):
        with pytest.raises(ValueError):
            parse_bench_shape(bad)


def test_speed_grid_covers_the_target_range():
    shapes = resolve_bench_shapes("speed")
    widths = {s.fields["hidden_size"] for s in shapes}
    depths = {s.fields["num_hidden_layers"] for s in shapes}
    assert min(widths) == 256 and max(widths) == 1024 and min(depths) == 4 and max(depths) == 16
    assert {s.batch_size for s in shapes} >= {1, 8} and {s.seq_len for s in shapes} >= {128, 1024}
    quick = resolve_bench_shapes("speed", quick=True)
    assert [s.name for s in quick] == BENCH_GRIDS["speed-quick"] and len(quick) < len(shapes)
    assert [s.name for s in resolve_bench_shapes("bench", batch_size=2, seq_len=32)] == [
        f"bench-L{depth}-b2-s32" for depth in (4, 8, 12, 16)]
    with pytest.raises(ValueError, match="speed"):
        resolve_bench_shapes(" , ")
