"""HC / mHC keep the n-stream input of every k-th sublayer only and rebuild the others in backward.

``hc_keep_stream_every`` / ``mhc_keep_stream_every`` (``stream_saver`` in ``modeling/hc_stream_memory.py``) change what
autograd keeps for the backward pass, never the math: losses and every parameter gradient must be bitwise those of
``keep_every = 1`` (which keeps every stream, the plain autograd path), for any k, under bf16 autocast too; the
saving must be there (exact tensor bytes, :class:`depthbench.bench.tensor_peak.TensorPeak`); and the plain path must be
taken without autograd, under activation checkpointing (both modes) and when the stream was changed in place.
"""

from __future__ import annotations

import pytest
import torch
from depthbench.modeling.hc_stream_memory import RecomputedStream, StreamSaver

from depthbench.bench.tensor_peak import TensorPeak
from depthbench.registry import build_config
from tests.helpers import TINY, random_ids, tiny_model

FIELD = {"hc": "hc_keep_stream_every", "mhc": "mhc_keep_stream_every"}
ARCHS = pytest.mark.parametrize("arch", list(FIELD))
SAVER = f"{StreamSaver.__module__}.StreamSaver"
NUM_SUBLAYERS = 2 * TINY["num_hidden_layers"]  # 8


def _model(arch: str, keep_every: int, **overrides) -> torch.nn.Module:
    """A tiny model with its parameters moved off the init (at init all n streams are equal and the dynamic
    connection weights are zero), so every stream, map and gradient differs between sublayers."""
    model = tiny_model(arch, **{FIELD[arch]: keep_every}, **overrides).train()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    return model


def _loss_and_grads(model, ids, autocast: bool = False, hook=None):
    handle = model.model.layers[0].register_forward_hook(hook) if hook is not None else None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    if handle is not None:
        handle.remove()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _assert_bitwise(got, want):
    (loss, grads), (want_loss, want_grads) = got, want
    assert torch.equal(loss, want_loss), (loss, want_loss)
    assert grads.keys() == want_grads.keys() and len(grads) > 0
    for name, grad in want_grads.items():
        assert torch.equal(grads[name], grad), name


@pytest.fixture
def rebuilds(monkeypatch):
    """Counts the streams rebuilt in backward (calls of ``RecomputedStream.get`` that compute)."""
    count = {"n": 0}
    get = RecomputedStream.get

    def counted(self):
        count["n"] += self.value is None
        return get(self)

    monkeypatch.setattr(RecomputedStream, "get", counted)
    return count


# ------------------------------------------------------------------------------------------------ config
@ARCHS
def test_config_field_default_validation_serialisation_and_parameter_count(arch):
    field = FIELD[arch]
    config = build_config(arch, **TINY)
    assert getattr(config, field) == 8
    assert getattr(type(config).from_dict(build_config(arch, **TINY, **{field: 3}).to_dict()), field) == 3
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=field):
            build_config(arch, **TINY, **{field: bad})
    counts = {k: sum(p.numel() for p in tiny_model(arch, **{field: k}).parameters()) for k in (1, 4)}
    assert counts[1] == counts[4]


# ------------------------------------------------------------------------------------------------ gradients
@ARCHS
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_gradients_bitwise_equal_keeping_every_stream(arch, autocast, rebuilds):
    ids = random_ids(2, 12, seed=3)
    want = _loss_and_grads(_model(arch, 1), ids, autocast)
    assert rebuilds["n"] == 0
    # k > number of sublayers: only the first sublayer's input is kept, the 7 others are rebuilt from it
    for keep_every, rebuilt in ((2, 4), (3, 5), (4, 6), (NUM_SUBLAYERS + 5, NUM_SUBLAYERS - 1)):
        rebuilds["n"] = 0
        _assert_bitwise(_loss_and_grads(_model(arch, keep_every), ids, autocast), want)
        assert rebuilds["n"] == rebuilt, keep_every  # the streams really were rebuilt, once each


@ARCHS
def test_second_backward_with_retained_graph_is_bitwise_equal(arch):
    ids = random_ids(2, 8, seed=4)
    grads = {}
    for keep_every in (1, 3):
        model = _model(arch, keep_every)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward(retain_graph=True)
        loss.backward()  # accumulates a second, identical gradient from the same saved (or rebuilt) streams
        grads[keep_every] = [p.grad for p in model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(grads[1], grads[3]))


def test_mhc_static_variant_bitwise_equal(rebuilds):
    ids = random_ids(2, 8, seed=5)
    want = _loss_and_grads(_model("mhc", 1, mhc_dynamic=False), ids)
    _assert_bitwise(_loss_and_grads(_model("mhc", 4, mhc_dynamic=False), ids), want)
    assert rebuilds["n"] == 6


@ARCHS
def test_stream_changed_in_place_is_kept_not_rebuilt(arch, rebuilds):
    """A forward hook that edits block 0's output stream in place: the next sublayer (index 2) must not rebuild its
    input from block 0's update (that would miss the edit) but keep it."""

    def shift(module, args, output):
        output.add_(0.5)

    ids = random_ids(2, 8, seed=6)
    want = _loss_and_grads(_model(arch, 1), ids, hook=shift)
    rebuilds["n"] = 0
    _assert_bitwise(_loss_and_grads(_model(arch, NUM_SUBLAYERS), ids, hook=shift), want)
    assert rebuilds["n"] == NUM_SUBLAYERS - 2  # 1 and 3..7: index 2 was kept


# ------------------------------------------------------------------------------------------------ memory
def _saved_after_forward(model, ids) -> tuple[int, int]:
    """(live tensor bytes once the loss is computed, peak bytes of forward + backward)."""
    with TensorPeak() as peak:
        loss = model(input_ids=ids, labels=ids).loss
        after_forward = peak.current_bytes
        loss.backward()
    return after_forward, peak.peak_bytes


@ARCHS
def test_memory_saving_is_the_rebuilt_streams(arch):
    batch, length, n, d = 4, 32, 4, TINY["hidden_size"]
    stream_bytes = batch * length * n * d * 4  # one fp32 [B, T, n, d] stream
    ids = random_ids(batch, length, seed=7)
    kept_all = _saved_after_forward(_model(arch, 1), ids)
    kept_some = _saved_after_forward(_model(arch, 4), ids)
    # sublayers 1, 2, 3, 5, 6, 7 save a recipe (tensors autograd keeps anyway) instead of their input stream
    assert kept_all[0] - kept_some[0] == 6 * stream_bytes
    # backward rebuilds at most the k - 1 streams of one group at a time, after the peak of the forward
    assert kept_all[1] - kept_some[1] >= 3 * stream_bytes


@ARCHS
def test_no_saved_state_left_after_backward(arch):
    """Recipes and rebuilt streams are freed with the saved tensors (no reference cycle waiting for the gc)."""
    import gc

    ids = random_ids(2, 16, seed=8)
    live = {}
    for keep_every in (1, 4):
        model = _model(arch, keep_every)
        gc.disable()
        try:
            with TensorPeak() as peak:
                model(input_ids=ids, labels=ids).loss.backward()
            live[keep_every] = peak.current_bytes  # the gradients only
        finally:
            gc.enable()
    assert live[4] == live[1] > 0


# ------------------------------------------------------------------------------------------------ plain paths
@ARCHS
def test_no_grad_forward_takes_plain_path(arch, monkeypatch):
    built = []
    monkeypatch.setattr(SAVER, lambda *a, **k: built.append(1))
    model = _model(arch, 2)
    with torch.no_grad():
        model(input_ids=random_ids(1, 6, seed=2))
    assert built == []


@ARCHS
@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_activation_checkpointing_bitwise_equal(arch, reentrant, monkeypatch):
    ids = random_ids(2, 10, seed=9)
    want = _loss_and_grads(_model(arch, 1), ids)
    model = _model(arch, 4)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    savers = []
    monkeypatch.setattr(SAVER, lambda *a, **k: savers.append(StreamSaver(*a, **k)) or savers[-1])
    with torch.autocast("cpu", enabled=False):
        loss = model(input_ids=ids, labels=ids).loss
    assert savers == []  # forward: checkpoint's own hooks (non-reentrant) or no autograd (reentrant)
    loss.backward()
    _assert_bitwise((loss.detach(), {name: p.grad for name, p in model.named_parameters()}), want)
