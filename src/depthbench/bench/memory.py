"""Peak memory of one model's training run (model, gradients, AdamW state, activations), each model in isolation.

On CUDA: ``torch.cuda.max_memory_allocated`` minus the memory allocated before the model was built. On CPU each
model runs in a fresh process forked from a memory worker (``python -m depthbench.bench.memory --memory-worker``)
that has imported everything but never run a torch kernel (forking after OpenMP has run can deadlock); the child
reports the exact peak of live tensor bytes (:class:`depthbench.bench.tensor_peak.TensorPeak`) and the peak RSS
growth (``VmHWM`` after ``/proc/self/clear_refs``, or ``ru_maxrss`` without ``/proc``). Without ``os.fork`` the
parent starts one worker process per model.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import json
import os
import resource
import subprocess
import sys
from dataclasses import asdict, replace

import torch

from depthbench.bench.models import build_models
from depthbench.bench.settings import BenchSettings
from depthbench.bench.tensor_peak import TensorPeak
from depthbench.bench.timing import Trainer, random_batch
from depthbench.procfs import proc_status_kb, reset_peak_rss


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
    trainer = Trainer(model, settings, random_batch(settings, model.config.vocab_size, settings.batch_size,
                                                    settings.seq_len))
    for _ in range(2):  # the second step holds parameters, gradients, AdamW state and activations at once
        trainer.step()


def _rss_growth(name: str, settings: BenchSettings) -> dict:
    """The RSS a training run adds to this process, after a tiny run of the same architecture paged in the code."""
    # Page in the kernels' code and one-off buffers (MKL, oneDNN, autograd) with a tiny run of the same
    # architecture, so the measurement is the model's memory rather than library loading.
    _train_memory_run(name, replace(settings, shape="tiny-L2", batch_size=1, seq_len=8, warmup=0, compile=False))
    gc.collect()
    _release_free_memory()
    if reset_peak_rss():
        method, baseline = "VmHWM after clear_refs minus VmRSS", proc_status_kb("VmRSS") * 1024
        _train_memory_run(name, settings)
        peak = proc_status_kb("VmHWM") * 1024
    else:
        method, baseline = "ru_maxrss growth over the post-import value", _ru_maxrss_bytes()
        _train_memory_run(name, settings)
        peak = _ru_maxrss_bytes()
    return {"peak_rss_bytes": peak - baseline, "peak_rss_method": f"cpu child process: {method}"}


def _measure_here(name: str, settings_dict: dict) -> dict:
    """Peak RSS growth and peak live tensor bytes of one model's training run in *this* process (a fresh child of
    the memory worker)."""
    try:
        settings = BenchSettings(**settings_dict)
        if settings.threads:
            torch.set_num_threads(settings.threads)
        result = _rss_growth(name, settings)
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
    """``python -m depthbench.bench.memory --memory-worker``: read one JSON request per stdin line, answer one JSON
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
        cmd = [sys.executable, "-m", "depthbench.bench.memory", "--memory-worker"]
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


def _measure_on_cuda(names: list[str], settings: BenchSettings) -> dict[str, dict]:
    results = {}
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


def measure_peak_memory(names: list[str], settings: BenchSettings) -> dict[str, dict]:
    """``{name: {"peak_mem_bytes", "peak_mem_method"}}``: each model's training run measured in isolation."""
    if torch.device(settings.device).type == "cuda":
        return _measure_on_cuda(names, settings)
    results = {}
    worker = _MemoryWorker()
    try:
        for name in names:
            results[name] = worker.measure(name, settings)
    finally:
        worker.close()
    return results


if __name__ == "__main__":
    if "--memory-worker" in sys.argv:
        _memory_worker(forking="--no-fork" not in sys.argv)
    else:
        sys.exit("usage: depthbench bench ... (this module's own entry point only serves the memory worker)")
