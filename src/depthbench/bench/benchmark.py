"""Speed and memory benchmark: depthbench architectures vs ``pre_ln`` vs transformers' ``LlamaForCausalLM``.

    depthbench bench --arch pre_ln --shape bench-L8
    depthbench bench --arch hc,mhc --shape bench-L8 --steps 20 --json-out bench.json
    depthbench bench --arch all --shape tiny-L4 --steps 3 --warmup 1 --decode-tokens 8

One command measures, for every requested architecture plus ``pre_ln`` and a ``LlamaForCausalLM`` of the same shape
holding ``pre_ln``'s state dict (so the two compute identical logits; the first-step losses are printed as a check):

* **train step**: wall time of forward + backward + ``AdamW.step`` + ``zero_grad`` on a fixed random batch
  (``--batch-size`` x ``--seq-len``), after ``--warmup`` untimed steps; the median of ``--steps`` timed steps.
  All models live in this process and are *interleaved*: timed step i runs every model once, in an order rotated by
  i, so machine noise hits all models alike. ``--dtype bfloat16`` means bf16 autocast over fp32 weights (our
  training recipe); ``--compile`` wraps the training forward in ``torch.compile``.
* **decode**: greedy ``generate()`` with the KV cache from a ``--prompt-len`` random prompt for exactly
  ``--decode-tokens`` new tokens (no EOS), for each ``--decode-batch-sizes``; tokens/s = batch x new tokens / wall
  time (prefill included); median over ``--decode-repeats`` interleaved repeats after one untimed warmup call.
* **peak memory** of a training run (model, gradients, AdamW state, activations, allocator caches) in isolation:
  on CUDA ``torch.cuda.max_memory_allocated`` minus the memory allocated before the model was built; on CPU each
  model runs in a fresh process, forked from a worker (``python -m depthbench.bench.benchmark --memory-worker``)
  that has
  imported everything but never run a torch kernel (forking after OpenMP has run can deadlock). The child builds the
  model and AdamW and runs 2 train steps twice. ``peak_mem_bytes`` (the ratios' basis) is the peak of live tensor
  bytes of the second run, counted exactly by :class:`depthbench.bench.tensor_peak.TensorPeak` (parameters, gradients,
  AdamW state, saved activations and temporaries; deterministic, CUDA's ``max_memory_allocated`` without the
  allocator's rounding). ``peak_rss_bytes`` is what the first run added to the process: the peak RSS (``VmHWM``,
  reset through ``/proc/self/clear_refs``) minus the RSS before the build, which also holds the C heap's
  fragmentation and varies by several percent between identical runs (a tiny untimed run of the same architecture
  first pages in the libraries' code, so that is not counted). Without ``/proc`` the child reports its
  ``ru_maxrss`` growth instead (without ``os.fork``, one fresh worker process per model).

Ratios: ``train_time_ratio_vs_*`` = median step time / reference median step time (> 1 is slower), with two
noise-robust companions, ``train_time_ratio_paired_vs_*`` (median over i of step_i / reference step_i, the two steps
having run back to back) and ``train_time_ratio_min_vs_*`` (fastest step / reference fastest step);
``decode_speed_ratio_vs_*`` = tokens/s / reference tokens/s (< 1 is slower); ``peak_mem_ratio_vs_*`` = peak /
reference peak (``peak_rss_ratio_vs_*`` the same for the RSS growth on CPU). The table goes to stdout, followed by
one JSON object per model on its own line (``grep '^{'``), and ``--json-out`` writes them all.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import gc
import json
import math
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import torch

from depthbench.bench.tensor_peak import TensorPeak
from depthbench.config import COMPILE_SCOPES

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


def _now(settings: BenchSettings) -> float:
    """The benchmark clock: wall time, or with ``clock="cpu"`` this process's CPU time (all its threads), which on
    an oversubscribed machine measures the work done rather than the time spent waiting for a core (CPU only)."""
    return time.process_time() if settings.clock == "cpu" else time.perf_counter()


# ================================================================================================ shapes
HEAD_DIM = 64
"""Head width of ad-hoc benchmark shapes ``d<width>-L<depth>`` (heads = width / 64, f = 8/3 d rounded up to 16)."""

_ADHOC = re.compile(r"d(\d+)-L(\d+)((?:-[bs]\d+)*)")
_NAMED = re.compile(r"(.+?-L\d+)((?:-[bs]\d+)*)")

SPEED_GRID = [f"d{d}-L{depth}-b{b}-s{t}" for d in (256, 1024) for depth in (4, 16)
              for b, t in ((1, 128), (8, 128), (1, 1024), (8, 1024))] + ["d384-L6-b8-s256", "d512-L8-b4-s512"]
BENCH_GRIDS: dict[str, list[str]] = {
    # Corners of the range the speed targets hold over (d 256-1024, L 4-16, batch 1-8, sequence 128-1024), plus
    # its centre and the shape users reported (d=384, L=6, batch 8 x 256).
    "speed": SPEED_GRID,
    # A subset that runs in minutes on 2 CPU cores: both widths' cheapest corners, depth 16, long sequence, the
    # reported shape and a mid shape.
    "speed-quick": ["d256-L4-b1-s128", "d256-L16-b8-s128", "d256-L4-b1-s1024", "d384-L6-b8-s256",
                    "d512-L8-b4-s256", "d1024-L4-b1-s128"],
}
"""Benchmark grids for ``--shapes``: name -> shape specs ``d<width>-L<depth>-b<batch>-s<seq>``. Every shape grid of
``depthbench shapes`` (``bench``, ``tiny``, ...) is accepted too, at ``--batch-size`` x ``--seq-len``."""


@dataclass
class BenchShape:
    """One benchmarked point: model config fields and the training batch."""

    name: str
    fields: dict
    batch_size: int
    seq_len: int


def _batch_and_seq(suffix: str, batch_size: int, seq_len: int) -> tuple[int, int]:
    for part in filter(None, suffix.split("-")):
        value = int(part[1:])
        if value < 1:
            raise ValueError(f"{part!r}: batch size and sequence length must be >= 1")
        batch_size, seq_len = (value, seq_len) if part[0] == "b" else (batch_size, value)
    return batch_size, seq_len


def parse_bench_shape(spec: str, batch_size: int = 8, seq_len: int = 256, vocab_size: int = 8192) -> BenchShape:
    """``d384-L6-b8-s256`` (ad-hoc: heads of 64, f = 8/3 d rounded up to 16, ``vocab_size``) or a named shape
    ``bench-L8`` (optionally ``bench-L8-b1-s1024``); ``-b``/``-s`` default to ``batch_size``/``seq_len``."""
    from depthbench.shapes import FFN_RULES, get_shape

    spec = spec.strip()
    adhoc = _ADHOC.fullmatch(spec)
    if adhoc:
        width, depth = int(adhoc.group(1)), int(adhoc.group(2))
        if width < HEAD_DIM or width % HEAD_DIM or depth < 1:
            raise ValueError(f"shape {spec!r} is not allowed: the width must be a positive multiple of {HEAD_DIM} "
                             "and the depth >= 1 (e.g. d384-L6-b8-s256)")
        fields = {"vocab_size": vocab_size, "hidden_size": width, "intermediate_size": FFN_RULES["8/3"](width),
                  "num_hidden_layers": depth, "num_attention_heads": width // HEAD_DIM,
                  "num_key_value_heads": width // HEAD_DIM, "head_dim": HEAD_DIM}
        b, t = _batch_and_seq(adhoc.group(3), batch_size, seq_len)
        return BenchShape(f"d{width}-L{depth}-b{b}-s{t}", fields, b, t)
    named = _NAMED.fullmatch(spec)
    if named is None:
        raise ValueError(f"shape {spec!r} is not allowed: use d<width>-L<depth>[-b<batch>][-s<seq>] (e.g. "
                         "d384-L6-b8-s256) or a named shape <grid>-L<depth> (e.g. bench-L8)")
    fields = get_shape(named.group(1)).config_fields()
    b, t = _batch_and_seq(named.group(2), batch_size, seq_len)
    return BenchShape(f"{named.group(1)}-b{b}-s{t}", fields, b, t)


def resolve_bench_shapes(spec: str, batch_size: int = 8, seq_len: int = 256, vocab_size: int = 8192,
                         quick: bool = False) -> list[BenchShape]:
    """``--shapes``: a benchmark grid name (:data:`BENCH_GRIDS`; ``quick`` picks ``<name>-quick``), a shape grid
    of ``depthbench shapes``, or a comma-separated list of shapes (see :func:`parse_bench_shape`)."""
    from depthbench.shapes import GRIDS, grid_shapes

    spec = spec.strip()
    if quick and f"{spec}-quick" in BENCH_GRIDS:
        spec = f"{spec}-quick"
    if spec in BENCH_GRIDS:
        items = BENCH_GRIDS[spec]
    elif spec in GRIDS:
        items = [s.name for s in grid_shapes(spec)]
    else:
        items = [item for item in spec.split(",") if item.strip()]
    if not items:
        raise ValueError(f"--shapes={spec!r} is not allowed: give shapes separated by commas or a grid name "
                         f"(one of {sorted([*BENCH_GRIDS, *GRIDS])})")
    return [parse_bench_shape(item, batch_size, seq_len, vocab_size) for item in items]


# ================================================================================================ models
def _shape_fields(settings: BenchSettings) -> dict:
    fields = dict(parse_bench_shape(settings.shape, settings.batch_size, settings.seq_len,
                                    settings.vocab_size).fields)
    fields["max_position_embeddings"] = max(settings.seq_len, settings.prompt_len + settings.decode_tokens)
    return fields


def _llama_from(config) -> torch.nn.Module:
    """A ``LlamaForCausalLM`` with the same shape, norm eps, RoPE base and attention backend as ``config``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    llama_config = LlamaConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads, head_dim=config.head_dim,
        max_position_embeddings=config.max_position_embeddings, rms_norm_eps=config.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": float(config.rope_theta)},
        tie_word_embeddings=config.tie_word_embeddings, hidden_act=config.hidden_act, attention_bias=False,
        mlp_bias=False, initializer_range=config.initializer_range, bos_token_id=None, eos_token_id=None,
        pad_token_id=None, attn_implementation=config._attn_implementation,
    )
    return LlamaForCausalLM(llama_config)


def build_models(names: list[str], settings: BenchSettings, share_weights: bool = True) -> dict[str, torch.nn.Module]:
    """``{name: model}`` on ``settings.device``, each built from ``settings.seed``. ``"llama"`` gets ``pre_ln``'s
    state dict (``share_weights``; a temporary ``pre_ln`` is built when it is not in ``names``). Architectures keep
    their own init."""
    from depthbench.registry import build_config, build_model

    fields = _shape_fields(settings)
    models: dict[str, torch.nn.Module] = {}
    for name in names:
        torch.manual_seed(settings.seed)
        if name == LLAMA:
            config = build_config(REFERENCE, attn_implementation=settings.attn_implementation, **fields)
            model = _llama_from(config)
            if share_weights:
                reference = models.get(REFERENCE) or build_model(REFERENCE, config=config)
                model.load_state_dict(reference.state_dict(), strict=True)
        else:
            model = build_model(name, attn_implementation=settings.attn_implementation, **fields)
        models[name] = model.to(settings.device)
    return models


def _autocast(settings: BenchSettings):
    if settings.dtype == "float32":
        return contextlib.nullcontext()
    device_type = torch.device(settings.device).type
    return torch.autocast(device_type=device_type, dtype=getattr(torch, settings.dtype))


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


class _Trainer:
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
        _sync(self.settings.device)
        start = _now(self.settings)
        with _autocast(self.settings):
            loss = self.forward(input_ids=self.batch, labels=self.batch, use_cache=False).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        _sync(self.settings.device)
        elapsed = _now(self.settings) - start
        self.losses.append(float(loss.detach()))
        return elapsed


def _batch(settings: BenchSettings, vocab_size: int, batch_size: int, seq_len: int, offset: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(settings.seed + 1 + offset)
    return torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator).to(settings.device)


@torch.no_grad()
def _decode_once(model: torch.nn.Module, prompt: torch.Tensor, settings: BenchSettings) -> float:
    model.eval()
    _sync(settings.device)
    start = _now(settings)
    with _autocast(settings):
        out = model.generate(
            input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=settings.decode_tokens,
            do_sample=False, use_cache=True, pad_token_id=0, eos_token_id=None,
        )
    _sync(settings.device)
    elapsed = _now(settings) - start
    if out.shape[1] != prompt.shape[1] + settings.decode_tokens:
        raise RuntimeError(f"generate() returned {out.shape[1] - prompt.shape[1]} new tokens, "
                           f"expected {settings.decode_tokens}")
    return elapsed


# ================================================================================================ memory
def _proc_status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS (Linux >= 4.0); False if unavailable."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return _proc_status_kb("VmHWM") is not None
    except OSError:
        return False


def _release_free_memory() -> None:
    """Return freed heap pages to the OS (glibc ``malloc_trim``), so they cannot hide the next run's growth."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)


def _ru_maxrss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # bytes on macOS, KiB on Linux


def _train_memory_run(name: str, settings: BenchSettings) -> None:
    """Build ``name`` + AdamW and run warmup + 2 train steps (what the memory measurement observes)."""
    model = build_models([name], settings, share_weights=False)[name]
    trainer = _Trainer(model, settings, _batch(settings, model.config.vocab_size, settings.batch_size,
                                               settings.seq_len))
    for _ in range(2):  # the second step holds parameters, gradients, AdamW state and activations at once
        trainer.step()


def _measure_here(name: str, settings_dict: dict) -> dict:
    """Peak RSS growth of one model's training run in *this* process (a fresh child of the memory worker)."""
    try:
        settings = BenchSettings(**settings_dict)
        if settings.threads:
            torch.set_num_threads(settings.threads)
        # Page in the kernels' code and one-off buffers (MKL, oneDNN, autograd) with a tiny run of the same
        # architecture, so the measurement is the model's memory rather than library loading.
        _train_memory_run(name, replace(settings, shape="tiny-L2", batch_size=1, seq_len=8, warmup=0, compile=False))
        gc.collect()
        _release_free_memory()
        if _reset_peak_rss():
            method, baseline = "VmHWM after clear_refs minus VmRSS", _proc_status_kb("VmRSS") * 1024
            _train_memory_run(name, settings)
            peak = _proc_status_kb("VmHWM") * 1024
        else:
            method, baseline = "ru_maxrss growth over the post-import value", _ru_maxrss_bytes()
            _train_memory_run(name, settings)
            peak = _ru_maxrss_bytes()
        result = {"peak_rss_bytes": peak - baseline, "peak_rss_method": f"cpu child process: {method}"}
        if settings.compile:  # the dispatch mode cannot watch inside compiled graphs
            return {**result, "peak_mem_bytes": None, "peak_mem_method": "not measured with --compile"}
        gc.collect()
        with TensorPeak() as tensors:  # built inside the mode: parameters, gradients and AdamW state count too
            _train_memory_run(name, settings)
        return {**result, "peak_mem_bytes": tensors.peak_bytes,
                "peak_mem_method": "peak live tensor bytes (depthbench.bench.tensor_peak.TensorPeak)"}
    except Exception as exc:  # report the failure in the result instead of dying silently
        return {"peak_mem_bytes": None, "peak_mem_method": f"failed: {type(exc).__name__}: {exc}",
                "peak_rss_bytes": None}


def _memory_worker(forking: bool) -> None:
    """``python -m depthbench.bench.benchmark --memory-worker``: read one JSON request per stdin line, answer one JSON
    line.

    The worker imports depthbench but never runs a torch kernel, so it can ``fork`` safely (forking a process whose
    OpenMP pool has run deadlocks the child); each request is measured in a fresh fork. Without ``os.fork`` the
    worker measures a single request itself and exits (the parent starts one worker per model).
    """
    import transformers.models.llama.modeling_llama  # noqa: F401  (import once here, not in every child)

    import depthbench.registry  # noqa: F401  (likewise: loaded once before the children fork)
    import depthbench.shapes  # noqa: F401

    out = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        if not forking:
            out.write(json.dumps(_measure_here(request["name"], request["settings"])) + "\n")
            out.flush()
            return
        pid = os.fork()
        if pid == 0:  # child: measure, answer, leave without running the parent's cleanup
            code = 1
            try:
                out.write(json.dumps(_measure_here(request["name"], request["settings"])) + "\n")
                out.flush()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            out.write(json.dumps({"peak_mem_bytes": None,
                                  "peak_mem_method": f"failed: child exited with status {status}"}) + "\n")
            out.flush()


class _MemoryWorker:
    """Parent side of :func:`_memory_worker` (one worker process per benchmark run, or per model without fork)."""

    def __init__(self):
        self.forking = hasattr(os, "fork")
        self.process: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "depthbench.bench.benchmark", "--memory-worker"]
        cmd += [] if self.forking else ["--no-fork"]
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def measure(self, name: str, settings: BenchSettings) -> dict:
        if self.process is None or self.process.poll() is not None:
            self.process = self._start()
        self.process.stdin.write(json.dumps({"name": name, "settings": asdict(settings)}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not self.forking:
            self.close()
        if not line:
            return {"peak_mem_bytes": None, "peak_mem_method": "failed: the memory worker exited without a result"}
        return json.loads(line)

    def close(self) -> None:
        if self.process is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            self.process.wait(timeout=60)
            self.process = None


def measure_peak_memory(names: list[str], settings: BenchSettings) -> dict[str, dict]:
    """``{name: {"peak_mem_bytes", "peak_mem_method"}}``: each model's training run measured in isolation."""
    results = {}
    if torch.device(settings.device).type == "cuda":
        for name in names:
            gc.collect()
            torch.cuda.empty_cache()
            baseline = torch.cuda.memory_allocated(settings.device)
            torch.cuda.reset_peak_memory_stats(settings.device)
            _train_memory_run(name, settings)
            peak = torch.cuda.max_memory_allocated(settings.device)
            results[name] = {"peak_mem_bytes": peak - baseline,
                             "peak_mem_method": "cuda max_memory_allocated minus baseline"}
        gc.collect()
        torch.cuda.empty_cache()
        return results
    worker = _MemoryWorker()
    try:
        for name in names:
            results[name] = worker.measure(name, settings)
    finally:
        worker.close()
    return results


# ================================================================================================ benchmark
def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else round(a / b, 4)


def _interleave(trainers: dict, steps: int, warmup: int) -> dict[str, list[float]]:
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


def _paired(a: list[float], b: list[float]) -> float | None:
    """Median over i of a_i / b_i (steps i of both ran in the same round, back to back)."""
    pairs = [x / y for x, y in zip(a, b) if y > 0]
    return round(_median(pairs), 4) if pairs else None


def run_benchmark(archs: list[str], settings: BenchSettings) -> list[dict]:
    """Benchmark ``archs`` plus ``pre_ln`` and Llama; returns one result dict per model (reference models first).

    With ``settings.compile`` every model also runs compiled (a second copy with the same init, compiled in place by
    :func:`depthbench.training.compiled.compile_model`), interleaved with the eager ones; ``result["compiled"]``
    holds its step
    times, its ratios to compiled ``pre_ln`` and its speed-up over eager.
    """
    from depthbench.registry import resolve_archs

    if settings.threads:
        torch.set_num_threads(settings.threads)
    settings.threads = torch.get_num_threads()
    names = [REFERENCE, LLAMA] + [a for a in resolve_archs(archs) if a != REFERENCE]
    fields = _shape_fields(settings)

    # Memory first: CPU children are forked from a clean server, and nothing else is resident on CUDA yet.
    if settings.memory:
        memory = measure_peak_memory(names, settings)
    else:
        memory = {name: {"peak_mem_bytes": None, "peak_mem_method": "skipped (--no-memory)"} for name in names}

    models = build_models(names, settings)
    vocab = fields["vocab_size"]
    batch = _batch(settings, vocab, settings.batch_size, settings.seq_len)
    trainers = {(name, False): _Trainer(model, settings, batch) for name, model in models.items()}
    if settings.compile:
        for name, model in build_models(names, settings).items():
            trainers[(name, True)] = _Trainer(model, settings, batch, compiled=True)
    times = _interleave(trainers, settings.steps, settings.warmup)
    step_times = {name: times[(name, False)] for name in names}

    order = list(names)
    decode_times: dict[str, dict[int, list[float]]] = {name: {} for name in names}
    for bs_index, bs in enumerate(settings.decode_batch_sizes):
        prompt = _batch(settings, vocab, bs, settings.prompt_len, offset=100 + bs_index)
        for name in names:  # untimed warmup
            _decode_once(models[name], prompt, settings)
        for r in range(settings.decode_repeats):
            shift = r % len(order)
            for name in order[shift:] + order[:shift]:
                decode_times[name].setdefault(bs, []).append(_decode_once(models[name], prompt, settings))

    results = []
    for name in names:
        model = models[name]
        median = _median(step_times[name])
        decode = {str(bs): round(bs * settings.decode_tokens / _median(times), 2)
                  for bs, times in decode_times[name].items()}
        results.append({
            "bench": "depthbench",
            "model": name,
            "kind": "transformers.LlamaForCausalLM" if name == LLAMA else f"depthbench.{name}",
            "shape": settings.shape,
            "params": sum(p.numel() for p in model.parameters()),
            "first_loss": trainers[(name, False)].losses[0] if trainers[(name, False)].losses else None,
            "train_step_s_median": median,
            "train_step_s_min": min(step_times[name]) if step_times[name] else None,
            "train_step_s": [round(t, 6) for t in step_times[name]],
            "train_tokens_per_s": None if not median else round(settings.batch_size * settings.seq_len / median, 1),
            "decode_tokens_per_s": decode,
            **memory[name],
            "settings": asdict(settings),
            "torch": torch.__version__,
            "platform": platform.platform(),
        })
        if settings.compile:
            compiled = times[(name, True)]
            results[-1]["compiled"] = {
                "train_step_s_median": _median(compiled),
                "train_step_s": [round(t, 6) for t in compiled],
                "first_loss": trainers[(name, True)].losses[0],
                "speedup_vs_eager": _paired(step_times[name], compiled),
                "train_time_ratio_paired_vs_pre_ln": _paired(compiled, times[(REFERENCE, True)]),
                "train_time_ratio_paired_vs_llama": _paired(compiled, times[(LLAMA, True)]),
            }
    by_name = {r["model"]: r for r in results}
    for r in results:
        for ref in (REFERENCE, LLAMA):
            other = by_name[ref]
            r[f"train_time_ratio_vs_{ref}"] = _ratio(r["train_step_s_median"], other["train_step_s_median"])
            # Noise-robust companions: the median of per-step ratios (timed step i of both models ran back to
            # back) and the ratio of the fastest steps.
            r[f"train_time_ratio_paired_vs_{ref}"] = _paired(r["train_step_s"], other["train_step_s"])
            r[f"train_time_ratio_min_vs_{ref}"] = _ratio(r["train_step_s_min"], other["train_step_s_min"])
            r[f"decode_speed_ratio_vs_{ref}"] = {bs: _ratio(v, other["decode_tokens_per_s"].get(bs))
                                                  for bs, v in r["decode_tokens_per_s"].items()}
            r[f"peak_mem_ratio_vs_{ref}"] = _ratio(r["peak_mem_bytes"], other["peak_mem_bytes"])
            r[f"peak_rss_ratio_vs_{ref}"] = _ratio(r.get("peak_rss_bytes"), other.get("peak_rss_bytes"))
    return results


def format_results(results: list[dict]) -> str:
    """The human-readable table: step time, decode speed and peak memory with ratios vs pre_ln and Llama."""
    def num(x, spec):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)

    sizes = list(results[0]["decode_tokens_per_s"]) if results else []
    header = ["model", "params", "step ms", "vs pre_ln", "vs llama", "paired vs llama", "train tok/s"]
    header += [f"dec tok/s bs{bs}" for bs in sizes] + [f"vs pre_ln bs{bs}" for bs in sizes]
    header += ["peak MB", "mem vs pre_ln", "rss vs pre_ln", "first loss"]
    compiled = bool(results) and "compiled" in results[0]
    header += ["compiled ms", "compiled vs pre_ln", "compile speed-up", "compiled first loss"] if compiled else []
    body = []
    for r in results:
        median = r["train_step_s_median"]
        line = [r["model"], f"{r['params'] / 1e6:.2f}M", num(None if median is None else 1e3 * median, ".1f"),
                num(r["train_time_ratio_vs_pre_ln"], ".3f"), num(r["train_time_ratio_vs_llama"], ".3f"),
                num(r["train_time_ratio_paired_vs_llama"], ".3f"), num(r["train_tokens_per_s"], ".0f")]
        line += [num(r["decode_tokens_per_s"].get(bs), ".1f") for bs in sizes]
        line += [num(r["decode_speed_ratio_vs_pre_ln"].get(bs), ".3f") for bs in sizes]
        mem = r["peak_mem_bytes"]
        line += [num(None if mem is None else mem / 2**20, ".0f"), num(r["peak_mem_ratio_vs_pre_ln"], ".3f"),
                 num(r.get("peak_rss_ratio_vs_pre_ln"), ".3f"), num(r["first_loss"], ".4f")]
        if compiled:
            c = r["compiled"]
            line += [num(None if c["train_step_s_median"] is None else 1e3 * c["train_step_s_median"], ".1f"),
                     num(c["train_time_ratio_paired_vs_pre_ln"], ".3f"), num(c["speedup_vs_eager"], ".3f"),
                     num(c["first_loss"], ".4f")]
        body.append(line)
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     for row in [header, *body])


# ================================================================================================ grids of shapes
TRAIN_TIME_TARGETS: dict[str, float] = {
    LLAMA: 1.03,  # the llama row holds pre_ln's time / Llama's: pre_ln within 1.03x of LlamaForCausalLM
    "hc": 1.20, "mhc": 1.30, "attnres": 1.20, "block_attnres": 1.10, "moda": 1.40, "denseformer": 1.08,
}
"""Eager train-step targets (time / ``pre_ln``'s, at every shape of the range; the norm family and any other
architecture: :data:`DEFAULT_TRAIN_TIME_TARGET`)."""
DEFAULT_TRAIN_TIME_TARGET = 1.08
COMPILED_TARGET = 1.15
"""Compiled train-step target for every architecture, relative to compiled ``pre_ln``."""


def _worst_and_median(values: list[float | None]) -> tuple[float | None, float | None]:
    values = [v for v in values if v is not None]
    return (max(values), round(statistics.median(values), 4)) if values else (None, None)


def summarize(per_shape: list[list[dict]]) -> list[dict]:
    """Per model, over shapes: worst and median paired train-step ratio vs ``pre_ln`` (for ``llama``: pre_ln's
    ratio vs Llama), worst decode-speed ratio per batch size, worst peak-memory ratio, and the compiled figures."""
    rows: dict[str, dict] = {}
    for results in per_shape:
        for r in results:
            rows.setdefault(r["model"], {"model": r["model"], "shapes": [], "ratios": [], "decode": {}, "mem": [],
                                         "compiled": [], "speedup": []})
            row = rows[r["model"]]
            row["shapes"].append(r["shape"])
            if r["model"] == LLAMA:  # the Llama row reports pre_ln's overhead over Llama
                pre_ln = next(x for x in results if x["model"] == REFERENCE)
                row["ratios"].append(pre_ln["train_time_ratio_paired_vs_llama"])
            else:
                row["ratios"].append(r["train_time_ratio_paired_vs_pre_ln"])
            for bs, value in r["decode_speed_ratio_vs_pre_ln"].items():
                row["decode"].setdefault(bs, []).append(value)
            row["mem"].append(r["peak_mem_ratio_vs_pre_ln"])
            if "compiled" in r:
                row["compiled"].append(r["compiled"]["train_time_ratio_paired_vs_pre_ln"])
                row["speedup"].append(r["compiled"]["speedup_vs_eager"])
    out = []
    for name, row in rows.items():
        worst, median = _worst_and_median(row["ratios"])
        target = TRAIN_TIME_TARGETS.get(name, DEFAULT_TRAIN_TIME_TARGET)
        summary = {
            "summary": True, "model": name, "shapes": row["shapes"],
            "train_time_ratio_vs_pre_ln_worst": worst, "train_time_ratio_vs_pre_ln_median": median,
            "train_time_ratios": row["ratios"], "train_time_target": None if name == REFERENCE else target,
            "decode_speed_ratio_vs_pre_ln_worst": {bs: min((v for v in vs if v is not None), default=None)
                                                   for bs, vs in row["decode"].items()},
            "peak_mem_ratio_vs_pre_ln_worst": _worst_and_median(row["mem"])[0],
        }
        if name == LLAMA:
            summary["note"] = "train-time ratios of pre_ln vs LlamaForCausalLM (target <= 1.03)"
        if name == REFERENCE:
            summary["train_time_ratio_vs_pre_ln_worst"] = summary["train_time_ratio_vs_pre_ln_median"] = 1.0
        if row["compiled"]:
            summary["compiled_ratio_vs_pre_ln_worst"], summary["compiled_ratio_vs_pre_ln_median"] = \
                _worst_and_median(row["compiled"])
            summary["compile_speedup_median"] = _worst_and_median(row["speedup"])[1]
            summary["compiled_target"] = None if name in (REFERENCE, LLAMA) else COMPILED_TARGET
        if summary["train_time_target"] is not None and worst is not None:
            summary["train_time_target_met"] = worst <= summary["train_time_target"]
        out.append(summary)
    return out


def format_summary(summaries: list[dict]) -> str:
    """The across-shapes table: worst / median train-step ratio, worst decode and memory ratios, compiled."""
    def num(x, spec=".3f"):
        return "-" if x is None else format(x, spec)

    sizes = sorted({bs for s in summaries for bs in s["decode_speed_ratio_vs_pre_ln_worst"]}, key=int)
    compiled = any("compiled_ratio_vs_pre_ln_worst" in s for s in summaries)
    header = ["model", "shapes", "worst", "median", "target", "met"]
    header += [f"decode bs{bs} worst" for bs in sizes] + ["mem worst"]
    header += ["compiled worst", "compiled median", "compile speed-up"] if compiled else []
    body = []
    for s in summaries:
        met = s.get("train_time_target_met")
        line = [s["model"] + (" (pre_ln vs llama)" if s["model"] == LLAMA else ""), str(len(s["shapes"])),
                num(s["train_time_ratio_vs_pre_ln_worst"]), num(s["train_time_ratio_vs_pre_ln_median"]),
                num(s["train_time_target"], ".2f"), "-" if met is None else ("yes" if met else "NO")]
        line += [num(s["decode_speed_ratio_vs_pre_ln_worst"].get(bs)) for bs in sizes]
        line += [num(s["peak_mem_ratio_vs_pre_ln_worst"])]
        if compiled:
            line += [num(s.get("compiled_ratio_vs_pre_ln_worst")), num(s.get("compiled_ratio_vs_pre_ln_median")),
                     num(s.get("compile_speedup_median"))]
        body.append(line)
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     for row in [header, *body])


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
    batch = _batch(settings, _shape_fields(settings)["vocab_size"], settings.batch_size, settings.seq_len)
    trainers = {name: _Trainer(models[name], settings, batch) for name in names}
    for _ in range(settings.warmup):
        for trainer in trainers.values():
            trainer.step()
    rounds: dict[str, list] = {name: [] for name in names}
    for r in range(settings.steps):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            rounds[name].append(profile_steps(trainers[name].step, 1, element_size(settings.dtype)))
    return {name: mean_rows(rounds[name]) for name in names}


# ================================================================================================ CLI
def _int_list(text: str) -> list[int]:
    values = [int(x) for x in text.split(",") if x.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma-separated list of positive integers")
    return values


def _cmd_bench(args: argparse.Namespace) -> int:
    from depthbench.registry import resolve_archs

    archs = resolve_archs(args.arch)  # unknown ids raise ValueError listing the valid ones
    quick = {"steps": 3, "warmup": 1, "decode_repeats": 1}
    for name, default in {"steps": 10, "warmup": 2, "decode_repeats": 3}.items():
        if getattr(args, name) is None:
            setattr(args, name, quick[name] if args.quick else default)
    for name in ("batch_size", "seq_len", "steps", "decode_tokens", "prompt_len", "decode_repeats"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)} is not allowed: it must be >= 1.")
    if args.warmup < 0 or args.threads < 0:
        raise ValueError("--warmup and --threads must be >= 0.")
    if args.compile and args.warmup < 1:
        raise ValueError("--warmup=0 is not allowed with --compile: the first step compiles (use --warmup 1 or more).")
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.clock == "cpu" and torch.device(args.device).type != "cpu":
        raise ValueError("--clock=cpu is not allowed on CUDA: GPU work is not process CPU time (use --clock wall).")
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device={args.device!r} is not allowed: CUDA is not available here (use cpu).")
    if args.shapes is not None:
        shapes = resolve_bench_shapes(args.shapes, args.batch_size, args.seq_len, args.vocab_size, quick=args.quick)
    else:
        shapes = [parse_bench_shape(args.shape, args.batch_size, args.seq_len, args.vocab_size)]
    if args.profile and (len(shapes) != 1 or args.compile):
        raise ValueError("--profile takes one --shape and no --compile (it profiles eager training steps).")
    settings = BenchSettings(
        shape=args.shape, batch_size=args.batch_size, seq_len=args.seq_len, steps=args.steps, warmup=args.warmup,
        dtype=args.dtype, device=args.device, compile=args.compile, compile_scope=args.compile_scope,
        decode_tokens=args.decode_tokens,
        decode_batch_sizes=args.decode_batch_sizes, prompt_len=args.prompt_len, decode_repeats=args.decode_repeats,
        threads=args.threads, attn_implementation=args.attn_implementation, memory=not args.no_memory,
        seed=args.seed, vocab_size=args.vocab_size, clock=args.clock,
    )
    if settings.threads:
        torch.set_num_threads(settings.threads)
    print(f"# depthbench bench: {len(shapes)} shape(s) ({', '.join(s.name for s in shapes)}), "
          f"{settings.steps} timed steps after {settings.warmup} warmup, dtype {settings.dtype}, "
          f"device {settings.device}, torch threads {torch.get_num_threads()} (torch.set_num_threads), "
          f"interop threads {torch.get_num_interop_threads()}, attention {settings.attn_implementation}, "
          f"compile {settings.compile and settings.compile_scope}, clock {settings.clock}, "
          f"torch {torch.__version__}", flush=True)
    if args.profile:
        from depthbench.bench.profile import format_profile

        shape = shapes[0]
        profiles = run_profile(archs, replace(settings, shape=args.shape, batch_size=shape.batch_size,
                                              seq_len=shape.seq_len))
        print(format_profile(profiles, REFERENCE))
        for name, rows in profiles.items():
            print(json.dumps({"model": name, "shape": shape.name, "profile": rows}))
        if args.json_out:
            with open(args.json_out, "w") as handle:
                json.dump(profiles, handle, indent=1)
        return 0
    if args.shapes is None:
        shape = shapes[0]
        results = run_benchmark(archs, replace(settings, shape=args.shape, batch_size=shape.batch_size,
                                               seq_len=shape.seq_len))
        print(format_results(results))
        for r in results:
            print(json.dumps(r, sort_keys=False))
        if args.json_out:
            with open(args.json_out, "w") as handle:
                json.dump(results, handle, indent=1)
        return 0

    from tqdm.auto import tqdm

    bar = tqdm(total=len(shapes), desc="bench shapes", unit="shape", file=sys.stderr, disable=args.quiet)

    def on_shape(shape: BenchShape, results: list[dict]) -> None:
        print(f"\n## {shape.name}: d={shape.fields['hidden_size']}, L={shape.fields['num_hidden_layers']}, "
              f"batch {shape.batch_size} x {shape.seq_len}", flush=True)
        print(format_results(results))
        for r in results:
            print(json.dumps(r, sort_keys=False), flush=True)
        bar.update(1)

    per_shape, summaries = run_shapes(archs, shapes, settings, on_shape)
    bar.close()
    print(f"\n## across {len(shapes)} shapes: paired train-step ratio vs pre_ln (worst = max over shapes), "
          "decode and memory ratios (worst = min speed / max memory)")
    print(format_summary(summaries))
    for summary in summaries:
        print(json.dumps(summary, sort_keys=False))
    if args.json_out:
        with open(args.json_out, "w") as handle:
            json.dump({"shapes": per_shape, "summary": summaries}, handle, indent=1)
    return 0


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``depthbench bench``."""
    p = subparsers.add_parser(
        "bench",
        help="train-step time, decode speed and peak memory vs pre_ln and LlamaForCausalLM",
        description="Benchmark architectures against pre_ln and transformers' LlamaForCausalLM (same shape, same "
        "state dict as pre_ln) in one process, interleaving the models; see "
        "`python -m pydoc depthbench.bench.benchmark`.",
    )
    p.add_argument("--arch", default=REFERENCE, help="architecture id(s): one id, a comma-separated list, or 'all'")
    p.add_argument("--shape", default="bench-L8",
                   help="one shape: a named shape <grid>-L<depth> (default bench-L8, ~20M params) or "
                   "d<width>-L<depth>[-b<batch>][-s<seq>]")
    p.add_argument("--shapes", help="many shapes: a comma-separated list (as --shape) or a grid name: "
                   f"{', '.join(BENCH_GRIDS)} or a `depthbench shapes` grid; prints worst/median ratios over them")
    p.add_argument("--quick", action="store_true",
                   help="the grid's quick subset (speed -> speed-quick) and 3 steps / 1 warmup / 1 decode repeat")
    p.add_argument("--batch-size", type=int, default=8, help="training batch size (default 8)")
    p.add_argument("--seq-len", type=int, default=256, help="training sequence length (default 256)")
    p.add_argument("--vocab-size", type=int, default=8192, help="vocabulary of d<width>-L<depth> shapes (8192)")
    p.add_argument("--steps", type=int, help="timed training steps per model (default 10; --quick 3)")
    p.add_argument("--warmup", type=int, help="untimed warmup steps per model (default 2; --quick 1)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="float32, or bfloat16 autocast over fp32 weights (default float32)")
    p.add_argument("--device", default=None, help="torch device (default cuda if available, else cpu)")
    p.add_argument("--compile", action="store_true",
                   help="also run every model compiled (depthbench.training.compiled.compile_model, the trainer's "
                   "model.compile=true path) and report its ratio to compiled pre_ln and its speed-up over eager")
    p.add_argument("--compile-scope", choices=COMPILE_SCOPES, default="layers",
                   help="with --compile: compile each decoder block on its own (default; one graph per distinct "
                   "block, fast to compile at any depth) or the whole forward as one graph (the trainer's "
                   "model.compile_scope)")
    p.add_argument("--decode-tokens", type=int, default=32, help="new tokens per generate() call (default 32)")
    p.add_argument("--decode-batch-sizes", type=_int_list, default=[1, 8], help="decode batch sizes (default 1,8)")
    p.add_argument("--prompt-len", type=int, default=16, help="decode prompt length (default 16)")
    p.add_argument("--decode-repeats", type=int,
                   help="timed generate() calls per batch size (default 3; --quick 1)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default 0: keep torch's default)")
    p.add_argument("--attn-implementation", default="sdpa", choices=["sdpa", "eager"], help="attention backend")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    p.add_argument("--seed", type=int, default=0, help="init and data seed")
    p.add_argument("--json-out", help="also write all results to this JSON file")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall time (default), or process CPU time: on a shared, oversubscribed CPU it measures the "
                   "work instead of the waiting (use with --threads 1)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--profile", action="store_true",
                   help="instead of timing, profile --steps training steps of each model at one --shape and print "
                   "time, FLOPs, bytes read and aten calls per op group (`python -m pydoc depthbench.bench.profile`)")
    p.set_defaults(func=_cmd_bench)


if __name__ == "__main__":
    if "--memory-worker" in sys.argv:
        _memory_worker(forking="--no-fork" not in sys.argv)
    else:
        sys.exit("usage: depthbench bench ... (this module's own entry point only serves the memory worker)")
