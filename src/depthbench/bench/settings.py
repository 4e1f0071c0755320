"""What a benchmark run depends on (:class:`BenchSettings`, recorded in every JSON line), the two reference models'
names, and the benchmark clock. Plain Python: ``depthbench bench --help`` loads it without torch."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

LLAMA = "llama"
"""Name of the transformers ``LlamaForCausalLM`` reference in results."""
REFERENCE = "pre_ln"


@dataclass
class BenchSettings:
    """Everything a benchmark run depends on (recorded in every JSON line)."""

    shape: str = "bench-L8"
    batch_size: int = 8
    seq_len: int = 256
    steps: int = 10
    warmup: int = 2
    dtype: str = "float32"
    device: str = "cpu"
    compile: bool = False
    compile_scope: str = "layers"  # one of depthbench.config.COMPILE_SCOPES
    decode_tokens: int = 32
    decode_batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    prompt_len: int = 16
    decode_repeats: int = 3
    threads: int = 0  # 0: keep torch's current setting
    attn_implementation: str = "sdpa"
    memory: bool = True
    seed: int = 0
    lr: float = 1e-4
    vocab_size: int = 8192  # of ad-hoc shapes d<width>-L<depth> (named grid shapes keep their grid's vocabulary)
    clock: str = "wall"  # "wall" (perf_counter) or "cpu" (process CPU time: robust to a shared, oversubscribed CPU)


def now(settings: BenchSettings) -> float:
    """The benchmark clock: wall time, or with ``clock="cpu"`` this process's CPU time (all its threads), which on
    an oversubscribed machine measures the work done rather than the time spent waiting for a core (CPU only)."""
    return time.process_time() if settings.clock == "cpu" else time.perf_counter()
