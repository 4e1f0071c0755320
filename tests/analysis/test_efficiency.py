"""``depthbench.analysis.efficiency``: the config's and the measured KV cache agree.

Run with ``python -m pytest tests/analysis/test_efficiency.py -q``.
"""

from __future__ import annotations

from tests.analysis.helpers import (
    build,
    run,
)


def test_efficiency_config_and_measured_kv_cache_agree():
    model = build("pre_ln")
    r = run(model, "efficiency", seq_len=32)
    kv = r.values["measured"]["kv_cache_bytes"] * 2 // r.values["measured"]["kv_cache_dtype_bytes"]
    assert kv == r.values["config"]["kv_cache_bytes"]
    assert 0.8 < r.values["measured"]["prefill_flops"] / r.values["config"]["prefill_flops"] < 1.25
