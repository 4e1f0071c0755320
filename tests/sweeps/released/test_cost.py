"""Tests of ``depthbench.sweeps.released.cost``: the parameters are the built model's own (torch's count), the
forward FLOPs and the estimated download are computed by hand from them, a listed size wins over the estimate,
and a release of no known shape is counted as unknown.

Run: ``python -m pytest tests/sweeps/released/test_cost.py -q``
"""

from __future__ import annotations

import pytest

from depthbench.hub.catalogue import Release
from depthbench.registry import build_model
from depthbench.shapes import get_shape
from depthbench.sweeps.released.cost import format_cost, selection_cost, target_cost
from depthbench.sweeps.released.selection import Target


def target(arch: str, grid: str | None, depth: int, release: Release | None = None) -> Target:
    return Target("org/r", arch, f"{grid}-L{depth}", grid, depth, 1e-3, 10, 0, release)


@pytest.mark.parametrize("arch", ["pre_ln", "hc"])
def test_parameters_flops_and_download_by_hand(arch):
    shape = get_shape("tiny-L2")
    model = build_model(arch, **shape.config_fields())
    params = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    cost = target_cost(target(arch, "tiny", 2), seq_len=64)
    assert cost["params"] == params
    assert cost["flops_per_1e9_tokens"] == pytest.approx(
        (2 * (params - embedding) + 2 * 2 * 64 * shape.hidden_size) * 1e9)
    assert (cost["download_bytes"], cost["download_source"]) == (6 * params, "estimated")


def test_a_listed_size_wins_and_an_unknown_shape_is_counted():
    listed = Release(arch="pre_ln", tier="t", size="2M", grid="tiny", depth=4, name="preln", lr=1e-3, repo="org/r",
                     steps=(10,), final_step=10, download_bytes=1_500_000_000)
    known, unknown = target("pre_ln", "tiny", 4, listed), target("pre_ln", None, 3)
    assert target_cost(known)["download_bytes"] == 1_500_000_000
    assert target_cost(unknown) == {"params": None, "download_bytes": None, "download_source": None,
                                    "flops_per_1e9_tokens": None}
    estimated = target("pre_ln", "tiny", 2)
    total = selection_cost([known, unknown, estimated], seq_len=64)
    small = target_cost(estimated, 64)
    assert (total["releases"], total["estimated"], total["unknown"]) == (3, 1, 1)
    assert total["download_bytes"] == 1_500_000_000 + small["download_bytes"]
    line = format_cost(total)
    assert line.startswith(f"3 release(s): {(1_500_000_000 + small['download_bytes']) / 1e9:.1f} GB to download "
                           "(1 of them estimated at 6 bytes per parameter")
    assert ", 1 of unknown size)" in line and "(64-token windows)" in line
