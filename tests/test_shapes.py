"""Tests of the shape calculator (``depthbench.shapes``): the study's tables, the design rule, exact counts, errors.

    python -m pytest tests/test_shapes.py -q
"""

from __future__ import annotations

import pytest
import torch

from depthbench.registry import ARCHITECTURES, build_config, build_model
from depthbench.shapes import (
    FFN_RULES,
    GRIDS,
    Grid,
    Shape,
    get_shape,
    grid_shapes,
    param_table,
    shape_for_budget,
    shape_names,
)

# Every row of every shape table of the study (its released model configurations):
# (grid, L, d, f, head_dim, backbone M, total M).
STUDY_TABLES = [
    # 400M fixed-total series
    ("400m", 16, 1216, 3248, 76, 284.3, 406.5), ("400m", 20, 1120, 2992, 70, 301.5, 414.1),
    ("400m", 24, 1024, 2736, 64, 302.4, 405.4), ("400m", 26, 992, 2656, 62, 307.9, 407.7),
    ("400m", 28, 960, 2560, 60, 309.7, 406.2), ("400m", 30, 928, 2480, 58, 310.5, 403.8),
    ("400m", 32, 896, 2400, 56, 309.3, 399.4), ("400m", 36, 864, 2304, 54, 322.5, 409.4),
    ("400m", 42, 800, 2144, 50, 323.7, 404.2), ("400m", 50, 736, 1968, 46, 325.7, 399.7),
    ("400m", 56, 704, 1888, 44, 334.4, 405.2), ("400m", 62, 672, 1792, 42, 336.1, 403.6),
    ("400m", 70, 640, 1712, 40, 344.9, 409.2),
    # 300M fixed-backbone series
    ("300m-backbone", 16, 1248, 3328, 78, 299.1, 424.6), ("300m-backbone", 24, 1024, 2736, 64, 302.4, 405.4),
    ("300m-backbone", 32, 896, 2400, 56, 309.3, 399.4), ("300m-backbone", 42, 768, 2048, 48, 297.3, 374.6),
    ("300m-backbone", 56, 672, 1792, 42, 303.5, 371.1), ("300m-backbone", 70, 608, 1632, 38, 312.0, 373.1),
    ("300m-backbone", 84, 544, 1456, 34, 299.1, 353.8),
    # multi-scale ladder
    ("200m", 12, 896, 2400, 56, 116.0, 206.1), ("200m", 18, 768, 2048, 48, 127.4, 204.7),
    ("200m", 24, 672, 1792, 42, 130.1, 197.7), ("300m", 14, 1056, 2816, 66, 187.4, 293.6),
    ("300m", 21, 896, 2400, 56, 202.9, 293.1), ("300m", 28, 800, 2144, 50, 215.8, 296.3),
    ("500m", 17, 1344, 3584, 84, 368.5, 503.7), ("500m", 26, 1120, 2992, 70, 391.9, 504.5),
    ("500m", 34, 992, 2656, 62, 402.6, 502.4),
    # 1.6B, GQA 16 query / 8 KV heads, f = 3d
    ("1.6b", 28, 2048, 6144, 128, 1409.4, 1615.3), ("1.6b", 40, 1728, 5184, 108, 1433.4, 1607.2),
    ("1.6b", 54, 1504, 4512, 94, 1465.9, 1617.2),
]


@pytest.mark.parametrize("grid", sorted({row[0] for row in STUDY_TABLES}))
def test_grids_reproduce_every_study_table_row(grid):
    expected = [row for row in STUDY_TABLES if row[0] == grid]
    assert list(GRIDS[grid].depths) == [row[1] for row in expected]  # the grid has exactly the table's rows
    rows = param_table(grid)
    assert len(rows) == len(expected)
    for row, (_, L, d, f, hd, backbone_m, total_m) in zip(rows, expected):
        got = (row["L"], row["d"], row["f"], row["head_dim"], round(row["backbone"] / 1e6, 1),
               round(row["total"] / 1e6, 1))
        assert got == (L, d, f, hd, backbone_m, total_m), row["shape"]
        assert row["heads"] == 16
        assert row["kv_heads"] == (8 if grid == "1.6b" else 16)
        assert row["d/L"] == round(d / L, 2)


def test_study_grid_budgets_are_their_anchor_shapes():
    assert GRIDS["400m"].budget == get_shape("400m-L24").parameter_counts()["total"] == 405_406_720
    assert GRIDS["300m-backbone"].budget == get_shape("400m-L24").parameter_counts()["backbone"]
    assert GRIDS["1.6b"].budget == get_shape("1.6b-L40").parameter_counts()["total"]
    # The anchor rule, not a lookup: with the nominal 400M the rule would pick d=1088 at L20 (394.2M).
    assert shape_for_budget(400_000_000, 20).hidden_size == 1088
    assert shape_for_budget(GRIDS["400m"].budget, 20).hidden_size == 1120


@pytest.mark.parametrize("grid", list(GRIDS))
def test_every_grid_shape_follows_the_rule_and_is_the_closest(grid):
    g = GRIDS[grid]
    for shape in grid_shapes(grid):
        assert shape.head_dim % 2 == 0
        assert shape.hidden_size == g.heads * shape.head_dim
        assert shape.num_attention_heads == g.heads
        assert shape.num_key_value_heads == (g.kv_heads or g.heads)
        assert shape.intermediate_size == FFN_RULES[g.ffn](shape.hidden_size)
        assert shape.vocab_size == g.vocab_size
        assert shape.name == f"{grid}-L{shape.num_layers}"
        assert get_shape(shape.name) == shape

        def held(hd, layers=shape.num_layers):
            s = Shape(grid, layers, g.heads * hd, FFN_RULES[g.ffn](g.heads * hd), g.heads,
                      g.kv_heads or g.heads, hd, g.vocab_size)
            return s.parameter_counts()[g.count]

        chosen = abs(held(shape.head_dim) - g.budget)
        assert chosen <= abs(held(shape.head_dim + 2) - g.budget)
        if shape.head_dim > 2:
            assert chosen <= abs(held(shape.head_dim - 2) - g.budget)
        assert chosen / g.budget < 0.035  # the study's +/-3 % design target (its own tables reach 3.4 %)


def test_ffn_rule_rounds_8_3_up_to_a_multiple_of_16():
    rule = FFN_RULES["8/3"]
    assert rule(1024) == 2736  # 2730.7 -> 2736
    assert rule(768) == 2048  # exact multiple stays
    assert rule(1344) == 3584
    for d in range(16, 4096, 16):
        f = rule(d)
        assert f % 16 == 0 and 8 * d / 3 <= f < 8 * d / 3 + 16


def test_cpu_grids_are_small():
    for shape in grid_shapes("tiny"):
        assert 1e6 <= shape.parameter_counts()["total"] <= 5e6
        assert shape.vocab_size == 1024
    assert [s.num_layers for s in grid_shapes("tiny")][0] == 2 and max(GRIDS["tiny"].depths) == 16
    for shape in grid_shapes("bench"):
        assert 15e6 <= shape.parameter_counts()["total"] <= 25e6
        assert shape.vocab_size == 8192


def test_shape_api():
    shape = get_shape("400m-L24")
    assert shape == Shape("400m", 24, 1024, 2736, 16, 16, 64, 50280)
    assert shape.name == "400m-L24"
    assert shape.aspect_ratio == pytest.approx(1024 / 24)
    fields = shape.config_fields()
    assert fields == {"vocab_size": 50280, "hidden_size": 1024, "intermediate_size": 2736, "num_hidden_layers": 24,
                      "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 64}
    assert build_config("pre_ln", **fields).parameter_counts()["total"] == 405_406_720
    assert grid_shapes("400m", [32, 16]) == [get_shape("400m-L32"), get_shape("400m-L16")]
    assert len(grid_shapes("400m")) == 13
    assert "tiny-L4" in shape_names() and shape_names("200m") == ["200m-L12", "200m-L18", "200m-L24"]


def test_shape_for_budget():
    shape = shape_for_budget(GRIDS["400m"].budget, 28, grid="mine")
    assert (shape.name, shape.hidden_size, shape.intermediate_size) == ("mine-L28", 960, 2560)
    backbone = shape_for_budget(300_000_000, 42, count="backbone")
    assert backbone.hidden_size == 768
    gqa = shape_for_budget(1_600_000_000, 28, kv_heads=8, ffn="3")
    assert (gqa.hidden_size, gqa.intermediate_size, gqa.num_key_value_heads) == (2048, 6144, 8)
    mini = Grid("mini", 3_000_000, "total", [2, 4], anchor=2, vocab_size=512, heads=4)  # a user-defined grid
    assert [s.name for s in mini.shapes()] == ["mini-L2", "mini-L4"]
    assert abs(mini.shapes()[1].parameter_counts()["total"] / mini.budget - 1) < 0.05
    small = shape_for_budget(10, 2, vocab_size=16, heads=2)  # a tiny budget still returns the smallest shape
    assert small.head_dim == 2


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: Shape("g", 4, 60, 160, 4, 4, 15, 128), "head_dim"),  # odd head_dim
        (lambda: Shape("g", 4, 66, 176, 4, 4, 16, 128), "hidden_size"),  # d not divisible by heads
        (lambda: Shape("g", 4, 64, 176, 4, 4, 8, 128), "head_dim"),  # d != heads * head_dim
        (lambda: Shape("g", 4, 64, 176, 4, 3, 16, 128), "num_key_value_heads"),
        (lambda: Shape("g", 0, 64, 176, 4, 4, 16, 128), "num_layers"),
        (lambda: get_shape("nope-L4"), "grid"),
        (lambda: get_shape("400m-L25"), "depth"),
        (lambda: get_shape("400m"), "shape"),
        (lambda: grid_shapes("400m", []), "depths"),
        (lambda: grid_shapes("400m", [16, 17]), "depth"),
        (lambda: grid_shapes("huge"), "grid"),
        (lambda: Grid("empty", 10**6, "total", (), anchor=2), "depths"),
        (lambda: Grid("bad", 10**6, "weights", (2,), anchor=2), "count"),
        (lambda: shape_for_budget(10**6, 4, ffn="9/4"), "ffn"),
        (lambda: shape_for_budget(10**6, 4, count="embedding"), "count"),
        (lambda: shape_for_budget(10**6, 4, heads=16, kv_heads=5), "kv_heads"),
        (lambda: param_table([]), "grid_or_shapes"),
    ],
)
def test_bad_shapes_name_the_field(call, field):
    with pytest.raises(ValueError, match=rf"^{field}=") as info:
        call()
    assert "must be" in str(info.value)


def test_error_messages_list_valid_values():
    with pytest.raises(ValueError, match="400m") as info:
        get_shape("nope-L4")
    assert all(name in str(info.value) for name in GRIDS)
    with pytest.raises(ValueError, match=r"16, 20, 24"):
        get_shape("400m-L25")
    with pytest.raises(ValueError, match="pre_ln"):
        param_table("tiny", arch="not_an_arch")


def test_param_table_adds_architecture_extras():
    base = param_table("400m", "pre_ln")
    assert all(r["extra"] == 0 for r in base)
    assert base[2]["shape"] == "400m-L24" and base[2]["diff_pct"] == 0.0
    assert base[1]["diff_pct"] == pytest.approx(100 * (414_114_240 - 405_406_720) / 405_406_720, abs=0.01)
    for arch in ARCHITECTURES:
        rows = param_table(grid_shapes("tiny", [2, 4]), arch)
        for row, shape in zip(rows, grid_shapes("tiny", [2, 4])):
            counts = build_config(arch, **shape.config_fields()).parameter_counts()
            assert (row["backbone"], row["extra"], row["total"]) == (counts["backbone"], counts["extra"],
                                                                     counts["total"])
    custom = param_table([shape_for_budget(10**6, 2, vocab_size=256, heads=4)])
    assert custom[0]["budget"] is None and custom[0]["diff_pct"] is None
    backbone = param_table("300m-backbone")
    assert backbone[0]["count"] == "backbone"
    assert backbone[0]["diff_pct"] == pytest.approx(100 * (backbone[0]["backbone"] / GRIDS["300m-backbone"].budget - 1),
                                                    abs=0.01)


# Shapes at which every architecture's config count must equal its built model's count: CPU grids, a study shape,
# and the GQA 1.6B shape (built on the meta device, so no memory is allocated).
COUNT_SHAPES = ["tiny-L2", "tiny-L4", "tiny-L6", "bench-L8", "400m-L24", "1.6b-L28"]


@pytest.mark.parametrize("arch_id", list(ARCHITECTURES))
def test_parameter_counts_match_the_built_model(arch_id):
    checked = 0
    for spec in COUNT_SHAPES:
        fields = get_shape(spec).config_fields()
        try:
            config = build_config(arch_id, **fields)
        except ValueError as exc:  # an architecture may reject a shape (e.g. GQA); say so, don't hide it
            print(f"{arch_id} rejects {spec}: {exc}")
            continue
        with torch.device("meta"):
            model = build_model(arch_id, config=config)
        real = sum(p.numel() for p in model.parameters())
        counts = config.parameter_counts()
        assert counts["total"] == real, f"{arch_id} at {spec}: config says {counts['total']}, model has {real}"
        assert counts["total"] - counts["extra"] == get_shape(spec).parameter_counts()["total"]
        checked += 1
    assert checked >= 4, f"{arch_id} rejected most shapes"
