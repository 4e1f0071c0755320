"""``depthbench.bench.tensor_peak.TensorPeak`` counts live tensor bytes exactly (the CPU memory figure of
the benchmark).

    python -m pytest tests/bench/test_tensor_peak.py -q
"""

from __future__ import annotations

import torch

from depthbench.bench.tensor_peak import TensorPeak
from tests.helpers import random_ids, tiny_model

MIB = 2**20


def test_counts_new_storages_and_frees_them():
    base = torch.ones(256, 1024)  # 1 MiB, from before the mode
    with TensorPeak() as peak:
        a = torch.ones(1024, 256)  # +1 MiB
        b = a @ a.t()  # +4 MiB
        view = b[:10]  # a view: no new storage
        b.add_(1)  # in place: no new storage
        del b
        assert peak.current_bytes == 5 * MIB  # ``view`` keeps ``b``'s storage alive
        del view
        assert peak.current_bytes == 1 * MIB
        c = base.t().contiguous()  # +1 MiB; ``base`` itself is not counted
        base.mul_(2)
        del a, c
    assert (peak.peak_bytes, peak.current_bytes) == (5 * MIB, 0)


def _training_peak(arch: str) -> tuple[int, int]:
    with TensorPeak() as peak:
        model = tiny_model(arch)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ids = random_ids(2, 16)
        for _ in range(2):
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return peak.peak_bytes, param_bytes


def test_training_peak_is_exact_and_repeatable():
    first, param_bytes = _training_peak("pre_ln")
    second, _ = _training_peak("pre_ln")
    assert first == second  # deterministic, unlike RSS
    # parameters + gradients + two AdamW moments are live at once in the second step, plus activations
    assert 4 * param_bytes < first < 8 * param_bytes


def test_saved_activations_count():
    model = tiny_model("hc")
    ids = random_ids(4, 64)
    with TensorPeak() as no_grad, torch.no_grad():
        model(input_ids=ids)
    with TensorPeak() as with_grad:
        loss = model(input_ids=ids, labels=ids).loss
    assert with_grad.current_bytes > 2 * no_grad.peak_bytes  # the graph's saved tensors stay alive with ``loss``
    del loss
