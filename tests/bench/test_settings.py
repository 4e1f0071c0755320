"""Tests of ``depthbench.bench.settings``: the benchmark clock (wall time or this process's CPU time, told apart by
a sleep, which takes wall time and no CPU time) and the recorded settings.

Run: ``python -m pytest tests/bench/test_settings.py -q``
"""

from __future__ import annotations

import dataclasses
import json
import time

from depthbench.bench.settings import LLAMA, REFERENCE, BenchSettings, now


def test_the_wall_clock_counts_a_sleep_and_the_cpu_clock_does_not():
    wall, cpu = BenchSettings(clock="wall"), BenchSettings(clock="cpu")
    w0, c0 = now(wall), now(cpu)
    time.sleep(0.3)
    assert now(wall) - w0 >= 0.3
    assert now(cpu) - c0 < 0.1
    for settings, clock in ((wall, time.perf_counter), (cpu, time.process_time)):  # read between two readings
        before = clock()
        reading = now(settings)
        assert before <= reading <= clock()

def test_settings_are_plain_json_and_each_instance_has_its_own_lists():
    a, b = BenchSettings(), BenchSettings()
    a.decode_batch_sizes.append(32)
    assert b.decode_batch_sizes == [1, 8]
    record = json.loads(json.dumps(dataclasses.asdict(b)))
    assert record["shape"] == "bench-L8" and record["clock"] == "wall" and record["dtype"] == "float32"
    assert (LLAMA, REFERENCE) == ("llama", "pre_ln")
