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
* **peak memory** of a training run (model, gradients, AdamW state, activations, allocator caches) in isolation: on
  CUDA ``torch.cuda.max_memory_allocated`` minus the memory allocated before the model was built; on CPU each model
  runs in a fresh process, forked from a worker (``python -m depthbench.bench.memory --memory-worker``) that has
  imported everything but never run a torch kernel (forking after OpenMP has run can deadlock). The child builds the
  model and AdamW and runs 2 train steps twice. ``peak_mem_bytes`` (the ratios' basis) is the peak of live tensor
  bytes of the second run, counted exactly by :class:`depthbench.bench.tensor_peak.TensorPeak` (parameters, gradients,
  AdamW state, saved activations and temporaries; deterministic, CUDA's ``max_memory_allocated`` without the
  allocator's rounding). ``peak_rss_bytes`` is what the first run added to the process: the peak RSS (``VmHWM``, reset
  through ``/proc/self/clear_refs``) minus the RSS before the build, which also holds the C heap's fragmentation and
  varies by several percent between identical runs (a tiny untimed run of the same architecture first pages in the
  libraries' code, so that is not counted). Without ``/proc`` the child reports its ``ru_maxrss`` growth instead
  (without ``os.fork``, one fresh worker process per model).

Ratios: ``train_time_ratio_vs_*`` = median step time / reference median step time (> 1 is slower), with two
noise-robust companions, ``train_time_ratio_paired_vs_*`` (median over i of step_i / reference step_i, the two steps
having run back to back) and ``train_time_ratio_min_vs_*`` (fastest step / reference fastest step);
``decode_speed_ratio_vs_*`` = tokens/s / reference tokens/s (< 1 is slower); ``peak_mem_ratio_vs_*`` = peak /
reference peak (``peak_rss_ratio_vs_*`` the same for the RSS growth on CPU). The table goes to stdout, followed by
one JSON object per model on its own line (``grep '^{'``), and ``--json-out`` writes them all.

This module is the command (argument checks, the settings, the three outputs: one shape, a grid of shapes, the
profile); it loads torch only when the command runs, so ``depthbench bench --help`` answers at once. The work is in
:mod:`depthbench.bench.runner` (with ``timing``, ``memory`` and ``models``), the tables and targets in
:mod:`depthbench.bench.summary`, the shapes and grids in :mod:`depthbench.bench.shapes`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from depthbench import atomic
from depthbench.bench.settings import REFERENCE, BenchSettings
from depthbench.bench.shapes import BENCH_GRIDS, BenchShape, parse_bench_shape, resolve_bench_shapes
from depthbench.config import COMPILE_SCOPES


def _int_list(text: str) -> list[int]:
    values = [int(x) for x in text.split(",") if x.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma-separated list of positive integers")
    return values


def _fill_step_defaults(args: argparse.Namespace) -> None:
    """``--steps``, ``--warmup`` and ``--decode-repeats`` not given: the defaults, or ``--quick``'s smaller ones."""
    quick = {"steps": 3, "warmup": 1, "decode_repeats": 1}
    for name, default in {"steps": 10, "warmup": 2, "decode_repeats": 3}.items():
        if getattr(args, name) is None:
            setattr(args, name, quick[name] if args.quick else default)


def _check_counts(args: argparse.Namespace) -> None:
    for name in ("batch_size", "seq_len", "steps", "decode_tokens", "prompt_len", "decode_repeats"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)} is not allowed: it must be >= 1.")
    if args.warmup < 0 or args.threads < 0:
        raise ValueError("--warmup and --threads must be >= 0.")
    if args.compile and args.warmup < 1:
        raise ValueError("--warmup=0 is not allowed with --compile: the first step compiles (use --warmup 1 or more).")


def _resolve_device(args: argparse.Namespace) -> None:
    """``--device`` defaults to CUDA when available; refuse CUDA when it is not, and ``--clock cpu`` on CUDA."""
    import torch

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.clock == "cpu" and torch.device(args.device).type != "cpu":
        raise ValueError("--clock=cpu is not allowed on CUDA: GPU work is not process CPU time (use --clock wall).")
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device={args.device!r} is not allowed: CUDA is not available here (use cpu).")


def _shapes(args: argparse.Namespace) -> list[BenchShape]:
    if args.shapes is not None:
        shapes = resolve_bench_shapes(args.shapes, args.batch_size, args.seq_len, args.vocab_size, quick=args.quick)
    else:
        shapes = [parse_bench_shape(args.shape, args.batch_size, args.seq_len, args.vocab_size)]
    if args.profile and (len(shapes) != 1 or args.compile):
        raise ValueError("--profile takes one --shape and no --compile (it profiles eager training steps).")
    return shapes


def _settings(args: argparse.Namespace) -> BenchSettings:
    return BenchSettings(
        shape=args.shape, batch_size=args.batch_size, seq_len=args.seq_len, steps=args.steps, warmup=args.warmup,
        dtype=args.dtype, device=args.device, compile=args.compile, compile_scope=args.compile_scope,
        decode_tokens=args.decode_tokens,
        decode_batch_sizes=args.decode_batch_sizes, prompt_len=args.prompt_len, decode_repeats=args.decode_repeats,
        threads=args.threads, attn_implementation=args.attn_implementation, memory=not args.no_memory,
        seed=args.seed, vocab_size=args.vocab_size, clock=args.clock,
    )


def _print_header(shapes: list[BenchShape], settings: BenchSettings) -> None:
    import torch

    print(f"# depthbench bench: {len(shapes)} shape(s) ({', '.join(s.name for s in shapes)}), "
          f"{settings.steps} timed steps after {settings.warmup} warmup, dtype {settings.dtype}, "
          f"device {settings.device}, torch threads {torch.get_num_threads()} (torch.set_num_threads), "
          f"interop threads {torch.get_num_interop_threads()}, attention {settings.attn_implementation}, "
          f"compile {settings.compile and settings.compile_scope}, clock {settings.clock}, "
          f"torch {torch.__version__}", flush=True)


def _write_json(path: str | None, data) -> None:
    if path:
        atomic.write_json(path, data)


def _at(settings: BenchSettings, shape_arg: str, shape: BenchShape) -> BenchSettings:
    """``settings`` at one ``--shape``, with the batch and sequence its ``-b``/``-s`` suffixes give."""
    return replace(settings, shape=shape_arg, batch_size=shape.batch_size, seq_len=shape.seq_len)


def _profile(args: argparse.Namespace, archs: list[str], settings: BenchSettings, shape: BenchShape) -> int:
    """``--profile``: the op-group table of every model, then one JSON line per model."""
    from depthbench.bench.profile import format_profile
    from depthbench.bench.runner import run_profile

    profiles = run_profile(archs, _at(settings, args.shape, shape))
    print(format_profile(profiles, REFERENCE))
    for name, rows in profiles.items():
        print(json.dumps({"model": name, "shape": shape.name, "profile": rows}))
    _write_json(args.json_out, profiles)
    return 0


def _one_shape(args: argparse.Namespace, archs: list[str], settings: BenchSettings, shape: BenchShape) -> int:
    """``--shape``: the results table, then one JSON line per model."""
    from depthbench.bench.runner import run_benchmark
    from depthbench.bench.summary import format_results

    results = run_benchmark(archs, _at(settings, args.shape, shape))
    print(format_results(results))
    for r in results:
        print(json.dumps(r, sort_keys=False))
    _write_json(args.json_out, results)
    return 0


def _many_shapes(args: argparse.Namespace, archs: list[str], settings: BenchSettings,
                 shapes: list[BenchShape]) -> int:
    """``--shapes``: each shape's table and JSON lines as it finishes, then the summary over shapes."""
    from tqdm.auto import tqdm

    from depthbench.bench.runner import run_shapes
    from depthbench.bench.summary import format_results, format_summary

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
    _write_json(args.json_out, {"shapes": per_shape, "summary": summaries})
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.make_corpus or args.data:
        return _data_bench(args)
    import torch

    from depthbench.registry import resolve_archs

    archs = resolve_archs(args.arch)  # unknown ids raise ValueError listing the valid ones
    _fill_step_defaults(args)
    _check_counts(args)
    _resolve_device(args)
    shapes = _shapes(args)
    settings = _settings(args)
    if settings.threads:
        torch.set_num_threads(settings.threads)
    _print_header(shapes, settings)
    if args.profile:
        return _profile(args, archs, settings, shapes[0])
    if args.shapes is None:
        return _one_shape(args, archs, settings, shapes[0])
    return _many_shapes(args, archs, settings, shapes)


def _data_bench(args: argparse.Namespace) -> int:
    """``--make-corpus DIR`` / ``--data FILES --tokenizer TOK``: the data pipeline's benchmark
    (:mod:`depthbench.bench.data_pipeline`)."""
    from depthbench.bench import data_pipeline

    if args.make_corpus:
        return data_pipeline.make_corpus(args.make_corpus, args.corpus_mb)
    if not args.tokenizer:
        raise ValueError("--data needs --tokenizer (a saved tokenizer folder, e.g. DIR/tokenizer of --make-corpus)")
    return data_pipeline.run_data_bench(args.data, args.tokenizer, args.num_workers, args.data_repeats,
                                        args.json_out, args.quiet)


def _add_data_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data pipeline", "depthbench prepare-data vs a bare tokenizers pipeline (instead of "
                             "the models; `python -m pydoc depthbench.bench.data_pipeline`)")
    g.add_argument("--data", nargs="+", metavar="FILE", help="input files (.jsonl/.parquet/.txt) to prepare")
    g.add_argument("--tokenizer", help="saved fast tokenizer folder for --data")
    g.add_argument("--num-workers", type=_int_list, default=[1, 2], help="--data worker counts (default 1,2)")
    g.add_argument("--data-repeats", type=int, default=3, help="--data interleaved repeats (default 3)")
    g.add_argument("--make-corpus", metavar="DIR", help="write the benchmark corpus (jsonl, parquet, txt) and a "
                   "16k BPE to DIR")
    g.add_argument("--corpus-mb", type=float, default=40.0, help="--make-corpus size in MB (default 40)")


def _add_shape_arguments(p: argparse.ArgumentParser) -> None:
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


def _add_training_arguments(p: argparse.ArgumentParser) -> None:
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


def _add_decode_and_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--decode-tokens", type=int, default=32, help="new tokens per generate() call (default 32)")
    p.add_argument("--decode-batch-sizes", type=_int_list, default=[1, 8], help="decode batch sizes (default 1,8)")
    p.add_argument("--prompt-len", type=int, default=16, help="decode prompt length (default 16)")
    p.add_argument("--decode-repeats", type=int,
                   help="timed generate() calls per batch size (default 3; --quick 1)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default 0: keep torch's default)")
    p.add_argument("--attn-implementation", default="sdpa", choices=["sdpa", "eager"], help="attention backend")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    p.add_argument("--seed", type=int, default=0, help="init and data seed")


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json-out", help="also write all results to this JSON file")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall time (default), or process CPU time: on a shared, oversubscribed CPU it measures the "
                   "work instead of the waiting (use with --threads 1)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--profile", action="store_true",
                   help="instead of timing, profile --steps training steps of each model at one --shape and print "
                   "time, FLOPs, bytes read and aten calls per op group (`python -m pydoc depthbench.bench.profile`)")


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``depthbench bench``."""
    p = subparsers.add_parser(
        "bench",
        help="train-step time, decode speed and peak memory vs pre_ln and LlamaForCausalLM",
        description="Benchmark architectures against pre_ln and transformers' LlamaForCausalLM (same shape, same "
        "state dict as pre_ln) in one process, interleaving the models; see "
        "`python -m pydoc depthbench.bench.command`.",
    )
    _add_shape_arguments(p)
    _add_training_arguments(p)
    _add_decode_and_run_arguments(p)
    _add_output_arguments(p)
    _add_data_arguments(p)
    p.set_defaults(func=_cmd_bench)
