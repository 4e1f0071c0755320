"""Tests of ``depthbench.training.layer_stats``: moments against direct computation, accumulation, batch-size
independence,
multi-stream and tuple streams, hook lifetime, activation checkpointing and the cross-rank reduction.

Run: ``python -m pytest tests/training/test_layer_stats.py -q``
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from depthbench.registry import arch_ids, build_model
from depthbench.training.layer_stats import LayerStats

TINY = {"vocab_size": 128, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3,
        "num_attention_heads": 4, "max_position_embeddings": 64}


def tiny(arch: str = "pre_ln") -> nn.Module:
    torch.manual_seed(0)
    return build_model(arch, **TINY).float()


def ids(batch: int = 2, seq: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(seed))


def block_outputs(model: nn.Module, input_ids: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Block outputs (with retained grads) of one forward + backward, observed with plain hooks."""
    outs: list[torch.Tensor] = []

    def keep(module, args, out) -> None:
        out.retain_grad()
        outs.append(out)

    handles = [layer.register_forward_hook(keep) for layer in model.model.layers]
    loss = model(input_ids=input_ids, labels=input_ids, use_cache=False).loss
    loss.backward()
    for h in handles:
        h.remove()
    return outs, loss


def expected(x: torch.Tensor) -> dict[str, float]:
    x = x.detach().double()
    return {"mean": x.mean().item(), "variance": x.var(unbiased=False).item(), "mean_abs": x.abs().mean().item(),
            "rms": x.square().mean().sqrt().item()}


def test_moments_match_direct_computation():
    model = tiny()
    x = ids()
    outs, _ = block_outputs(model, x)
    model.zero_grad()
    stats = LayerStats(model)
    with stats.capture():
        model(input_ids=x, labels=x, use_cache=False).loss.backward()
    metrics = stats.metrics()
    assert len([k for k in metrics if k.endswith("/forward/rms")]) == TINY["num_hidden_layers"]
    for i, out in enumerate(outs):
        for direction, tensor in (("forward", out), ("backward", out.grad)):
            for name, value in expected(tensor).items():
                got = metrics[f"layer_stats/block_{i:02d}/{direction}/{name}"]
                assert got == pytest.approx(value, rel=1e-5, abs=1e-12), (i, direction, name)
    assert metrics["layer_stats/block_00/backward/rms"] > 0


def test_accumulates_over_micro_batches_and_rms_is_batch_size_independent():
    model = tiny()
    x = ids(batch=2)
    seq = x.shape[1]
    one = LayerStats(model, grad_scale=2 * (seq - 1))  # tokens of the per-token loss mean
    with one.capture():
        model(input_ids=x, labels=x, use_cache=False).loss.backward()
    model.zero_grad()
    doubled = LayerStats(model, grad_scale=4 * (seq - 1))  # the same sequences twice in one batch
    with doubled.capture():
        model(input_ids=torch.cat([x, x]), labels=torch.cat([x, x]), use_cache=False).loss.backward()
    model.zero_grad()
    micro = LayerStats(model, grad_scale=2 * 2 * (seq - 1))  # two micro-batches of an accumulated step
    with micro.capture():
        for _ in range(2):
            (model(input_ids=x, labels=x, use_cache=False).loss / 2).backward()
    a, b, c = one.metrics(), doubled.metrics(), micro.metrics()
    assert set(a) == set(b) == set(c)
    for key in a:
        assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-10), key
        assert c[key] == pytest.approx(a[key], rel=1e-4, abs=1e-10), key
    # the raw count doubles while every reported statistic stays the same
    assert float(doubled.forward[0][0, 3]) == 2 * float(one.forward[0][0, 3])


def test_hooks_only_inside_capture_and_nothing_counted_outside():
    model = tiny()
    stats = LayerStats(model)
    x = ids()
    with stats.capture():
        assert all(len(layer._forward_hooks) == 1 for layer in model.model.layers)
        model(input_ids=x, labels=x, use_cache=False).loss.backward()
    assert all(len(layer._forward_hooks) == 0 for layer in model.model.layers)
    before = [m.clone() for m in stats.forward]
    model(input_ids=x, labels=x, use_cache=False).loss.backward()
    assert all(torch.equal(a, b) for a, b in zip(before, stats.forward))
    stats.reset()
    assert stats.metrics() == {}
    with pytest.raises(RuntimeError), stats.capture():  # hooks are removed on error too
        raise RuntimeError("boom")
    assert all(len(layer._forward_hooks) == 0 for layer in model.model.layers)


def test_activation_checkpointing_counts_each_block_once():
    x = ids()
    plain = tiny()
    stats_plain = LayerStats(plain)
    with stats_plain.capture():
        plain(input_ids=x, labels=x, use_cache=False).loss.backward()
    ckpt = tiny()
    ckpt.gradient_checkpointing_enable()
    ckpt.train()
    stats_ckpt = LayerStats(ckpt)
    with stats_ckpt.capture():
        ckpt(input_ids=x, labels=x, use_cache=False).loss.backward()
    for a, b in zip(stats_plain.forward + stats_plain.backward, stats_ckpt.forward + stats_ckpt.backward):
        assert a is not None and b is not None
        assert float(a[0, 3]) == float(b[0, 3])  # same element count: the recomputation was not counted
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-9)


def test_all_reduce_sums_raw_moments():
    model = tiny()
    x = ids()
    stats = LayerStats(model)
    with stats.capture():
        model(input_ids=x, labels=x, use_cache=False).loss.backward()
    single = stats.metrics()
    count = float(stats.forward[1][0, 3])
    calls = []

    def two_identical_ranks(t: torch.Tensor) -> torch.Tensor:
        calls.append(t.shape)
        return t * 2

    stats.all_reduce(two_identical_ranks)
    assert len(calls) == 1  # one collective for every block and direction
    assert float(stats.forward[1][0, 3]) == 2 * count
    reduced = stats.metrics()
    for key, value in single.items():
        assert reduced[key] == pytest.approx(value, rel=1e-12), key


class _StreamBlock(nn.Module):
    """Fake block: multiplies the stream by a learnable per-stream scale."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 2.0, shape[0]).reshape(shape))

    def forward(self, x):
        return x * self.scale


class _TupleBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(1.5))

    def forward(self, stream):
        x, bank = stream
        return (x * self.w, bank + x)


class _Readout:
    def readout(self, stream):
        return stream[0] + stream[1]


class _Fake(nn.Module):
    def __init__(self, layers, wiring=None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.wiring = wiring


def test_multi_stream_moments_per_stream_and_aggregate():
    n, d = 3, 5
    model = _Fake([_StreamBlock((n, 1)), _StreamBlock((n, 1))])
    x = torch.randn(2, 4, n, d, generator=torch.Generator().manual_seed(0), requires_grad=True)
    stats = LayerStats(model)
    with stats.capture():
        h = x
        outs = []
        for layer in model.layers:
            h = layer(h)
            h.retain_grad()
            outs.append(h)
        (h.square().sum() * 0.5).backward()
    metrics = stats.metrics()
    for i, out in enumerate(outs):
        for s in range(n):
            ref_f, ref_b = expected(out[:, :, s]), expected(out.grad[:, :, s])
            for name in ref_f:
                assert metrics[f"layer_stats/block_{i:02d}/stream_{s}/forward/{name}"] == pytest.approx(ref_f[name])
                assert metrics[f"layer_stats/block_{i:02d}/stream_{s}/backward/{name}"] == pytest.approx(ref_b[name])
        assert metrics[f"layer_stats/block_{i:02d}/forward/rms"] == pytest.approx(expected(out)["rms"])
    # the streams really differ (the per-stream split is not a copy of the aggregate)
    assert metrics["layer_stats/block_00/stream_0/forward/rms"] < metrics["layer_stats/block_00/stream_2/forward/rms"]


def test_tuple_stream_uses_readout_forward_and_first_tensor_gradient():
    model = _Fake([_TupleBlock()], wiring=_Readout())
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)
    bank = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1))
    stats = LayerStats(model)
    with stats.capture():
        out = model.layers[0]((x, bank))
        out[0].retain_grad()
        (out[0].sum() * 3 + out[1].sum()).backward()
    metrics = stats.metrics()
    ref = expected(out[0] + out[1])
    for name, value in ref.items():
        assert metrics[f"layer_stats/block_00/forward/{name}"] == pytest.approx(value, rel=1e-6)
    assert metrics["layer_stats/block_00/backward/mean"] == pytest.approx(3.0)
    assert metrics["layer_stats/block_00/backward/variance"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("arch_id", arch_ids())
def test_every_registered_architecture_gives_finite_stats(arch_id):
    model = tiny(arch_id)
    model.train()
    x = ids()
    stats = LayerStats(model)
    with stats.capture():
        model(input_ids=x, labels=x, use_cache=False).loss.backward()
    stats.all_reduce(lambda t: t)
    metrics = stats.metrics()
    for i in range(TINY["num_hidden_layers"]):
        for direction in ("forward", "backward"):
            key = f"layer_stats/block_{i:02d}/{direction}/rms"
            if direction == "backward" and key not in metrics:
                continue  # a stream whose tensors the loss does not reach in this block (checked below)
            assert key in metrics, key
            assert math.isfinite(metrics[key]) and metrics[key] >= 0
    assert any(k.endswith("/backward/rms") for k in metrics)
