"""``depthbench.bench.memory``: each model's training run measured in a fresh child of the memory worker
(``python -m depthbench.bench.memory --memory-worker``): the exact tensor peak and the RSS growth.

    python -m pytest tests/bench/test_memory.py -q
"""

from __future__ import annotations

import pytest

from depthbench.bench.memory import measure_peak_memory
from depthbench.bench.settings import BenchSettings


@pytest.mark.slow  # 12-32 s on 2 cores: the default suite stays near 10 minutes
def test_benchmark_memory_is_the_exact_tensor_peak():
    """``depthbench bench``'s CPU memory: tensor peak (ratios' basis) and RSS growth, each model in a fresh child."""
    settings = BenchSettings(shape="d64-L2", batch_size=2, seq_len=32, threads=1)
    results = measure_peak_memory(["pre_ln", "lns", "hc"], settings)
    for result in results.values():
        assert result["peak_mem_method"].startswith("peak live tensor bytes"), result
        assert result["peak_rss_bytes"] is not None
    # LayerNorm Scaling keeps exactly Pre-LN's tensors; HC keeps its n = 4 streams on top
    assert results["lns"]["peak_mem_bytes"] == results["pre_ln"]["peak_mem_bytes"]
    assert results["hc"]["peak_mem_bytes"] > results["pre_ln"]["peak_mem_bytes"]
