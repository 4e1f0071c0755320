"""Tests of ``depthbench.bench.timing``: rotated interleaving, paired ratios (medians by hand), the seeded batch
(against ``torch.randint`` with the same generator), autocast, a real training step of a tiny ``LlamaForCausalLM``
and timed greedy decoding of exactly ``decode_tokens`` tokens.

Run: ``python -m pytest tests/bench/test_timing.py -q``
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from depthbench.bench import timing
from depthbench.bench.settings import BenchSettings


class Recorder:
    def __init__(self, name: str, log: list[str], seconds: float):
        self.name, self.log, self.seconds = name, log, seconds

    def step(self) -> float:
        self.log.append(self.name)
        return self.seconds


def test_rounds_rotate_the_order_and_only_timed_steps_are_kept():
    log: list[str] = []
    trainers = {k: Recorder(k, log, s) for k, s in (("a", 1.0), ("b", 2.0), ("c", 3.0))}
    times = timing.interleave(trainers, steps=2, warmup=1)
    assert log == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert times == {"a": [1.0, 1.0], "b": [2.0, 2.0], "c": [3.0, 3.0]}


def test_paired_ratios_are_the_median_of_per_round_ratios():
    assert timing.paired([2.0, 3.0, 10.0], [1.0, 2.0, 2.0]) == 2.0  # ratios 2, 1.5, 5
    assert timing.paired([1.0, 3.0], [2.0, 2.0]) == 1.0  # ratios 0.5, 1.5
    assert timing.paired([1.0, 2.0], [0.0, 3.0]) == round(2 / 3, 4)  # a zero time is left out
    assert timing.paired([], []) is None and timing.median([]) is None


def test_the_batch_is_seeded_and_autocast_only_for_bfloat16():
    settings = BenchSettings(seed=5)
    expected = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(5 + 1 + 3))
    assert torch.equal(timing.random_batch(settings, 50, 2, 7, offset=3), expected)
    assert not torch.equal(timing.random_batch(settings, 50, 2, 7), expected)
    with timing.autocast(BenchSettings(dtype="float32")):
        assert not torch.is_autocast_cpu_enabled()
    with timing.autocast(BenchSettings(dtype="bfloat16")):
        assert torch.is_autocast_cpu_enabled() and torch.get_autocast_cpu_dtype() == torch.bfloat16


def _tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64))


def test_a_training_step_updates_the_model_and_records_its_loss():
    model = _tiny_llama()
    settings = BenchSettings(lr=1e-2)
    batch = timing.random_batch(settings, 64, 2, 8)
    with torch.no_grad():
        initial = model(input_ids=batch, labels=batch).loss.item()
    before = model.model.embed_tokens.weight.detach().clone()
    trainer = timing.Trainer(model, settings, batch)
    assert trainer.step() > 0 and trainer.step() > 0
    assert trainer.losses[0] == pytest.approx(initial, rel=1e-5)  # the step's loss is the model's loss on the batch
    assert trainer.losses[1] < trainer.losses[0]
    assert not torch.equal(model.model.embed_tokens.weight, before)


def test_decoding_generates_exactly_decode_tokens_per_timed_call():
    model = _tiny_llama()
    settings = BenchSettings(decode_tokens=5, decode_batch_sizes=[1, 2], prompt_len=4, decode_repeats=2)
    calls: list[tuple[int, int]] = []
    original = model.generate

    def generate(**kwargs):
        out = original(**kwargs)
        calls.append((kwargs["input_ids"].shape[0], out.shape[1]))
        return out

    model.generate = generate
    times = timing.time_decode({"m": model}, settings, vocab_size=64)
    assert set(times["m"]) == {1, 2} and all(len(v) == 2 and min(v) > 0 for v in times["m"].values())
    assert calls == [(1, 9)] * 3 + [(2, 9)] * 3  # one untimed warm-up + 2 timed per batch size; 4 + 5 tokens
