"""Timing: one model's training step (:class:`Trainer`: model + AdamW + a fixed batch), interleaved rounds of every
model's steps, paired step ratios, and timed greedy ``generate()`` calls with the KV cache."""

from __future__ import annotations

import contextlib
import statistics

import torch

from depthbench.bench.settings import BenchSettings, now


def autocast(settings: BenchSettings):
    """bf16 autocast over fp32 weights for ``dtype="bfloat16"``; nothing for float32."""
    if settings.dtype == "float32":
        return contextlib.nullcontext()
    device_type = torch.device(settings.device).type
    return torch.autocast(device_type=device_type, dtype=getattr(torch, settings.dtype))


def sync(device: str) -> None:
    """Wait for the device's queued work (CUDA), so the clock reads the work's end."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def random_batch(settings: BenchSettings, vocab_size: int, batch_size: int, seq_len: int,
                 offset: int = 0) -> torch.Tensor:
    """Random token ids from ``settings.seed`` (+ 1 + ``offset``) on ``settings.device``."""
    generator = torch.Generator().manual_seed(settings.seed + 1 + offset)
    return torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator).to(settings.device)


class Trainer:
    """One model + AdamW + the fixed batch; ``step()`` runs and returns one timed training step. ``compiled``: the
    model is compiled in place first (:func:`depthbench.training.compiled.compile_model`, the trainer's path)."""

    def __init__(self, model: torch.nn.Module, settings: BenchSettings, batch: torch.Tensor, compiled: bool = False):
        self.model, self.settings, self.batch = model, settings, batch
        if compiled:
            from depthbench.training.compiled import compile_model

            compile_model(model, scope=settings.compile_scope)
        self.forward = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, betas=(0.9, 0.95), weight_decay=0.1)
        self.losses: list[float] = []

    def step(self) -> float:
        self.model.train()
        sync(self.settings.device)
        start = now(self.settings)
        with autocast(self.settings):
            loss = self.forward(input_ids=self.batch, labels=self.batch, use_cache=False).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        sync(self.settings.device)
        elapsed = now(self.settings) - start
        self.losses.append(float(loss.detach()))
        return elapsed


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def interleave(trainers: dict, steps: int, warmup: int) -> dict[str, list[float]]:
    """Run ``warmup + steps`` rounds; round i runs every trainer once, in an order rotated by i. Timed steps only."""
    order = list(trainers)
    times: dict[str, list[float]] = {key: [] for key in order}
    for i in range(warmup + steps):
        shift = i % len(order)
        for key in order[shift:] + order[:shift]:
            elapsed = trainers[key].step()
            if i >= warmup:
                times[key].append(elapsed)
    return times


def paired(a: list[float], b: list[float]) -> float | None:
    """Median over i of a_i / b_i (steps i of both ran in the same round, back to back)."""
    pairs = [x / y for x, y in zip(a, b) if y > 0]
    return round(median(pairs), 4) if pairs else None


@torch.no_grad()
def decode_once(model: torch.nn.Module, prompt: torch.Tensor, settings: BenchSettings) -> float:
    """Time one greedy ``generate()`` of exactly ``settings.decode_tokens`` new tokens (no EOS; prefill included)."""
    model.eval()
    sync(settings.device)
    start = now(settings)
    with autocast(settings):
        out = model.generate(
            input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=settings.decode_tokens,
            do_sample=False, use_cache=True, pad_token_id=0, eos_token_id=None,
        )
    sync(settings.device)
    elapsed = now(settings) - start
    if out.shape[1] != prompt.shape[1] + settings.decode_tokens:
        raise RuntimeError(f"generate() returned {out.shape[1] - prompt.shape[1]} new tokens, "
                           f"expected {settings.decode_tokens}")
    return elapsed


def time_decode(models: dict[str, torch.nn.Module], settings: BenchSettings,
                vocab_size: int) -> dict[str, dict[int, list[float]]]:
    """``{name: {batch size: times}}``: per ``settings.decode_batch_sizes``, one untimed ``generate()`` per model,
    then ``settings.decode_repeats`` rounds in which every model decodes once, in an order rotated by the round."""
    order = list(models)
    decode_times: dict[str, dict[int, list[float]]] = {name: {} for name in order}
    for bs_index, bs in enumerate(settings.decode_batch_sizes):
        prompt = random_batch(settings, vocab_size, bs, settings.prompt_len, offset=100 + bs_index)
        for name in order:  # untimed warmup
            decode_once(models[name], prompt, settings)
        for r in range(settings.decode_repeats):
            shift = r % len(order)
            for name in order[shift:] + order[:shift]:
                decode_times[name].setdefault(bs, []).append(decode_once(models[name], prompt, settings))
    return decode_times
