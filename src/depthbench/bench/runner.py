"""A benchmark run: memory, interleaved train-step timing and decode timing of every requested architecture plus
``pre_ln`` and Llama at one shape, as one result dict per model with its ratios to both references; the same at
every shape of a grid (:func:`run_shapes`); and the op-group profile (:func:`run_profile`)."""

from __future__ import annotations

import gc
import platform
from collections.abc import Callable
from dataclasses import asdict, replace

import torch

from depthbench.bench.memory import measure_peak_memory
from depthbench.bench.models import build_models, shape_fields
from depthbench.bench.settings import LLAMA, REFERENCE, BenchSettings
from depthbench.bench.shapes import BenchShape
from depthbench.bench.summary import summarize
from depthbench.bench.timing import Trainer, interleave, median, paired, random_batch, time_decode


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else round(a / b, 4)


def _memory(names: list[str], settings: BenchSettings) -> dict[str, dict]:
    if settings.memory:
        return measure_peak_memory(names, settings)
    return {name: {"peak_mem_bytes": None, "peak_mem_method": "skipped (--no-memory)"} for name in names}


def _trainers(models: dict[str, torch.nn.Module], settings: BenchSettings, batch: torch.Tensor) -> dict:
    """``{(name, compiled): Trainer}``: every model eager, and with ``settings.compile`` a compiled second copy."""
    trainers = {(name, False): Trainer(model, settings, batch) for name, model in models.items()}
    if settings.compile:
        for name, model in build_models(list(models), settings).items():
            trainers[(name, True)] = Trainer(model, settings, batch, compiled=True)
    return trainers


def _compiled_row(name: str, trainers: dict, times: dict) -> dict:
    compiled = times[(name, True)]
    return {
        "train_step_s_median": median(compiled),
        "train_step_s": [round(t, 6) for t in compiled],
        "first_loss": trainers[(name, True)].losses[0],
        "speedup_vs_eager": paired(times[(name, False)], compiled),
        "train_time_ratio_paired_vs_pre_ln": paired(compiled, times[(REFERENCE, True)]),
        "train_time_ratio_paired_vs_llama": paired(compiled, times[(LLAMA, True)]),
    }


def _result_row(name: str, model: torch.nn.Module, trainers: dict, times: dict,
                decode_times: dict[int, list[float]], memory: dict, settings: BenchSettings) -> dict:
    """One model's result: its step times, decode tokens/s and peak memory (ratios are added later)."""
    step_times = times[(name, False)]
    step_median = median(step_times)
    losses = trainers[(name, False)].losses
    tokens = settings.batch_size * settings.seq_len
    row = {
        "bench": "depthbench",
        "model": name,
        "kind": "transformers.LlamaForCausalLM" if name == LLAMA else f"depthbench.{name}",
        "shape": settings.shape,
        "params": sum(p.numel() for p in model.parameters()),
        "first_loss": losses[0] if losses else None,
        "train_step_s_median": step_median,
        "train_step_s_min": min(step_times) if step_times else None,
        "train_step_s": [round(t, 6) for t in step_times],
        "train_tokens_per_s": None if not step_median else round(tokens / step_median, 1),
        "decode_tokens_per_s": {str(bs): round(bs * settings.decode_tokens / median(ts), 2)
                                for bs, ts in decode_times.items()},
        **memory,
        "settings": asdict(settings),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    if settings.compile:
        row["compiled"] = _compiled_row(name, trainers, times)
    return row


def _add_ratios(results: list[dict]) -> None:
    """Every result's train-time, decode-speed and memory ratios to ``pre_ln`` and to Llama, in place."""
    by_name = {r["model"]: r for r in results}
    for r in results:
        for ref in (REFERENCE, LLAMA):
            other = by_name[ref]
            r[f"train_time_ratio_vs_{ref}"] = _ratio(r["train_step_s_median"], other["train_step_s_median"])
            # Noise-robust companions: the median of per-step ratios (timed step i of both models ran back to
            # back) and the ratio of the fastest steps.
            r[f"train_time_ratio_paired_vs_{ref}"] = paired(r["train_step_s"], other["train_step_s"])
            r[f"train_time_ratio_min_vs_{ref}"] = _ratio(r["train_step_s_min"], other["train_step_s_min"])
            r[f"decode_speed_ratio_vs_{ref}"] = {bs: _ratio(v, other["decode_tokens_per_s"].get(bs))
                                                  for bs, v in r["decode_tokens_per_s"].items()}
            r[f"peak_mem_ratio_vs_{ref}"] = _ratio(r["peak_mem_bytes"], other["peak_mem_bytes"])
            r[f"peak_rss_ratio_vs_{ref}"] = _ratio(r.get("peak_rss_bytes"), other.get("peak_rss_bytes"))


def run_benchmark(archs: list[str], settings: BenchSettings) -> list[dict]:
    """Benchmark ``archs`` plus ``pre_ln`` and Llama; returns one result dict per model (reference models first).

    With ``settings.compile`` every model also runs compiled (a second copy with the same init, compiled in place by
    :func:`depthbench.training.compiled.compile_model`), interleaved with the eager ones; ``result["compiled"]``
    holds its step times, its ratios to compiled ``pre_ln`` and its speed-up over eager.
    """
    from depthbench.registry import resolve_archs

    if settings.threads:
        torch.set_num_threads(settings.threads)
    settings.threads = torch.get_num_threads()
    names = [REFERENCE, LLAMA] + [a for a in resolve_archs(archs) if a != REFERENCE]
    vocab = shape_fields(settings)["vocab_size"]

    # Memory first: CPU children are forked from a clean server, and nothing else is resident on CUDA yet.
    memory = _memory(names, settings)

    models = build_models(names, settings)
    trainers = _trainers(models, settings, random_batch(settings, vocab, settings.batch_size, settings.seq_len))
    times = interleave(trainers, settings.steps, settings.warmup)
    decode_times = time_decode(models, settings, vocab)
    results = [_result_row(name, models[name], trainers, times, decode_times[name], memory[name], settings)
               for name in names]
    _add_ratios(results)
    return results


def run_shapes(archs: list[str], shapes: list[BenchShape], settings: BenchSettings,
               on_shape: Callable[[BenchShape, list[dict]], None] | None = None) -> tuple[list[list[dict]], list[dict]]:
    """:func:`run_benchmark` at every shape (each shape's models built, measured and freed in turn); returns the
    per-shape results and :func:`summarize` of them. ``on_shape(shape, results)`` is called after each shape."""
    per_shape = []
    for shape in shapes:
        results = run_benchmark(archs, replace(settings, shape=shape.name, batch_size=shape.batch_size,
                                               seq_len=shape.seq_len))
        per_shape.append(results)
        if on_shape is not None:
            on_shape(shape, results)
        gc.collect()
    return per_shape, summarize(per_shape)


def run_profile(archs: list[str], settings: BenchSettings) -> dict[str, dict[str, dict[str, float]]]:
    """``{model: op-group rows}`` (:func:`depthbench.bench.profile.profile_steps`) for ``pre_ln`` and ``archs`` at
    ``settings.shape``: after ``settings.warmup`` unprofiled steps each, ``settings.steps`` rounds in which every
    model runs one profiled step (interleaved in a rotated order, as the timing benchmark, so a noisy machine slows
    every model alike); each figure is the mean over the rounds."""
    from depthbench.bench.profile import element_size, mean_rows, profile_steps
    from depthbench.registry import resolve_archs

    names = [REFERENCE] + [a for a in resolve_archs(archs) if a != REFERENCE]
    models = build_models(names, settings)
    batch = random_batch(settings, shape_fields(settings)["vocab_size"], settings.batch_size, settings.seq_len)
    trainers = {name: Trainer(models[name], settings, batch) for name in names}
    for _ in range(settings.warmup):
        for trainer in trainers.values():
            trainer.step()
    rounds: dict[str, list] = {name: [] for name in names}
    for r in range(settings.steps):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            rounds[name].append(profile_steps(trainers[name].step, 1, element_size(settings.dtype)))
    return {name: mean_rows(rounds[name]) for name in names}
