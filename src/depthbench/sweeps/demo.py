"""The embedded demo: a real (small) aspect-ratio sweep that runs anywhere, offline, on 2 CPU cores in < 10 minutes.

    depthbench demo                             # -> runs/demo/{report.md, results.csv, loss_vs_aspect_ratio.png}
    depthbench demo --out /tmp/demo --steps 20  # a quicker smoke run (its own folder)
    depthbench sweep --preset demo              # the same command under its first name (an alias kept by the CLI)

What it does, honestly measured:

1. Builds the deterministic offline corpus of ``depthbench.data.synthetic`` into ``<out>/data``: synthetic depth tasks
   (multi-hop pointer chasing, permutation composition, multi-step modular arithmetic and variable chains, 1-4
   steps each) mixed with the English prose of the standard library's ``pydoc_data``, and a 1024-token byte-level
   BPE trained on the spot (~0.74M training tokens; held-out splits ``eval_synthetic`` = fresh task instances,
   ``eval_text`` = held-out pydoc documents).
2. Trains ``pre_ln``, ``hc`` and ``attnres`` at three depths of the ``tiny`` grid (about 2.0M parameters each,
   from wide-shallow L2 (d=248, d/L=124) through L4 (d=184, d/L=46) to deep-narrow L8 (d=136, d/L=17)), nine runs
   with one recipe and one learning rate.
3. Reports held-out loss separately on the synthetic depth tasks (``eval_synthetic``, the part meant to measure
   depth) and on held-out text (``eval_text``), plus their mean (``eval_loss``); writes ``results.csv``,
   ``results.jsonl``, ``loss_vs_aspect_ratio.png`` and ``report.md`` and prints a closing table.
4. Runs the study's layer analyses (``depthbench.analysis``) on each architecture's deepest model (L8): the causal
   and permutation scores with their late-layer fractions and the logit-lens curves, on ``DEMO_ANALYSIS_WINDOWS``
   windows of held-out text; the figures and a table go into ``report.md`` (section "Layer analyses").
5. Ends with accuracy by depth: ``depthbench eval`` of every run's final model on the offline lm-eval tasks
   ``depthbench_synthetic`` (400 four-way questions on unseen instances of the four task families; chance 0.25),
   added to ``report.md`` with ``synthetic_acc_vs_aspect_ratio.png`` and ``eval_results.csv``.

Recipe (identical for every architecture and shape; sized only to fit the time budget, never toward a result):
``DEMO_STEPS`` = 80 AdamW steps of 8 sequences x 128 tokens (81,920 tokens per run, ~0.11 epochs of the training
split), peak LR 0.003 with 10 % linear warmup and cosine decay to 0.1 x peak, weight decay 0.1, clip 1.0, fp32 on
CPU, seed 0; each eval split is scored on its first 64 windows of 128 tokens (8,192 tokens). The final checkpoint
and the HF export of every run are kept (``<out>/runs/<run>/final`` loads with
``AutoModelForCausalLM.from_pretrained``).

Time budget: the recipe was sized so that the whole command stays under 10 minutes on an idle 2-core CPU machine
(about 8 TFLOP of training, 6 N D over the nine runs); the measured figures are in the README's benchmark section.
An interrupted demo resumes where it stopped when run again.

The numbers are whatever the runs measure. At this scale (2M parameters, 0.08M tokens per run, one seed)
differences between architectures can be within run-to-run noise; run more seeds (``depthbench sweep --archs
pre_ln,hc,attnres --grid tiny --depths 2,4,8 --seeds 0,1,2 --data runs/demo/data --lrs 3e-3 --set
train.max_steps=80 ...``) before reading anything into them.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from depthbench import atomic
from depthbench.shapes import grid_shapes
from depthbench.sweeps.report import print_table
from depthbench.sweeps.results import collect_results
from depthbench.sweeps.runner import run_sweep
from depthbench.sweeps.spec import SweepError, SweepSpec

DEMO_ARCHS = ["pre_ln", "hc", "attnres"]
DEMO_GRID = "tiny"
DEMO_DEPTHS = [2, 4, 8]
DEMO_LR = 3e-3
DEMO_STEPS = 80
DEMO_OUT = "runs/demo"
#: Layer analyses run on each architecture's deepest demo model, over this many 128-token held-out text windows.
DEMO_ANALYSIS_METRICS = ["causal", "permutation", "logit_lens"]
DEMO_ANALYSIS_WINDOWS = 8

#: The demo recipe (a run-config dict, see depthbench.config): the study's optimizer recipe at toy scale.
DEMO_BASE: dict[str, Any] = {
    "data": {"seq_len": 128, "eval_sequences": 64},
    "optim": {"weight_decay": 0.1, "warmup_fraction": 0.1, "min_lr_ratio": 0.1, "grad_clip": 1.0},
    "train": {"global_batch_size": 8, "micro_batch_size": 8, "mixed_precision": "no", "cpu": True,
              "log_every": 10, "progress": True},
    "checkpoint": {"every": 0, "keep_last": 1},
}

DEMO_NOTES = (
    "Embedded demo (`depthbench demo`): ~2M-parameter models of the `tiny` grid trained on an offline "
    "corpus built on the spot (synthetic multi-step tasks mixed with pydoc English prose, 1024-token BPE). "
    "`eval_synthetic` = held-out instances of the synthetic depth tasks (pointer chasing, permutation composition, "
    "modular arithmetic, variable chains); `eval_text` = held-out prose; `eval_loss` = their mean (used to pick the "
    "best learning rate). One seed per point: differences between architectures of a few hundredths of a nat can "
    "be run-to-run noise at this scale."
)


def demo_spec(data_dir: str, steps: int = DEMO_STEPS, overrides: list[str] | None = None) -> SweepSpec:
    """The demo's :class:`depthbench.sweeps.spec.SweepSpec` on the prepared corpus ``data_dir``."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise SweepError(f"--steps {steps!r} is not allowed: the demo's steps must be a positive integer")
    base = json.loads(json.dumps(DEMO_BASE))
    base["data"]["data_dir"] = os.path.abspath(data_dir)
    base["train"]["max_steps"] = steps
    return SweepSpec(
        archs=list(DEMO_ARCHS),
        shapes=[s.name for s in grid_shapes(DEMO_GRID, DEMO_DEPTHS)],
        lrs=[DEMO_LR],
        seeds=[0],
        base=base,
        overrides=list(overrides or []),
        name="demo",
        notes=DEMO_NOTES,
    )


def ensure_demo_data(data_dir: str, log=print, **corpus_kwargs: Any) -> str:
    """Build the offline demo corpus into ``data_dir`` unless it is already there (``corpus_kwargs`` go to
    ``depthbench.data.synthetic.build_demo_corpus``, e.g. smaller sizes in tests)."""
    # imported here: depthbench.data.synthetic loads torch and the tokenizer stack (keeps `depthbench --help` fast)
    from depthbench.data.synthetic import build_demo_corpus

    info_path = os.path.join(data_dir, "demo_corpus.json")
    if os.path.exists(os.path.join(data_dir, "meta.json")) and os.path.exists(info_path):
        tokens = (atomic.read_json(info_path) or {}).get("tokens", {})
        log(f"demo corpus: reusing {data_dir} ({_tokens_text(tokens)})")
        return data_dir
    t0 = time.time()
    log(f"demo corpus: building {data_dir} (synthetic depth tasks + pydoc text, tokenizer trained on the spot)")
    info = build_demo_corpus(data_dir, **corpus_kwargs)
    log(f"demo corpus: built in {time.time() - t0:.1f}s ({_tokens_text(info['demo']['tokens'])})")
    return data_dir


def _tokens_text(tokens: dict[str, int]) -> str:
    return ", ".join(f"{split} {n:,} tokens" for split, n in sorted(tokens.items()))


def analyze_demo(out: str, data_dir: str, log=print) -> None:
    """The layer analyses of step 4 (resumable: finished metrics are kept), then the report section."""
    from depthbench.analysis.runner import analyze_sweep
    from depthbench.analysis.sampling import WindowSpec

    t0 = time.time()
    log("layer analyses of the deepest models: " + ", ".join(DEMO_ANALYSIS_METRICS))
    spec = WindowSpec(num_samples=DEMO_ANALYSIS_WINDOWS, seq_len=128, seed=0, split="eval_text")
    try:
        analyze_sweep(out, DEMO_ANALYSIS_METRICS, data_dir, spec, deepest_only=True, log=lambda *_: None)
    except ValueError:  # a small corpus (tests) may lack whole-document windows: let them cross documents
        spec.cross_documents = True
        analyze_sweep(out, DEMO_ANALYSIS_METRICS, data_dir, spec, deepest_only=True, log=lambda *_: None)
    log(f"layer analyses: {time.time() - t0:.0f}s")


def run_demo(args: argparse.Namespace) -> int:
    """``depthbench demo``: build data, run the sweep, print the closing table and paths."""
    fixed = [flag for flag, attr in (("--archs", "archs"), ("--grid", "grid"), ("--shapes", "shapes"),
                                     ("--budget", "budget"), ("--depths", "depths"), ("--emit", "emit"))
             if getattr(args, attr, None)]
    if fixed:
        raise SweepError(f"--preset demo fixes its architectures and shapes; drop {', '.join(fixed)} (or run "
                         "depthbench sweep without --preset)")
    out = getattr(args, "out", None) or DEMO_OUT
    t0 = time.time()
    steps = DEMO_STEPS if getattr(args, "steps", None) is None else args.steps
    spec = demo_spec(os.path.join(out, "data"), steps=steps, overrides=list(getattr(args, "set", None) or []))
    spec.run_config(spec.runs()[0], os.path.join(out, "runs", "probe"))  # bad --set: fail before building data
    data_dir = ensure_demo_data(os.path.join(out, "data"))
    run_sweep(spec, out, launcher="local")
    analyze_demo(out, data_dir)
    evaluate_demo(out, limit=getattr(args, "eval_limit", None))
    rows = collect_results(out)
    print()
    print_table(rows)
    print()
    for name in ("report.md", "results.csv", "results.jsonl", "loss_vs_aspect_ratio.png", "eval_results.csv",
                 "synthetic_acc_vs_aspect_ratio.png", "analysis_late_fractions.png", "analysis_logit_lens.png"):
        print(f"  {os.path.join(out, name)}")
    print(f"  {data_dir} (the corpus), {os.path.join(out, 'runs')} (one folder per run)")
    print(f"demo finished in {time.time() - t0:.0f}s")
    return 0


DEMO_EVAL_TASKS = ["depthbench_synthetic"]


def evaluate_demo(out: str, limit: int | None = None, log=print) -> None:
    """Accuracy by depth: ``depthbench eval`` over the demo's runs on :data:`DEMO_EVAL_TASKS` (offline), into the
    report; prints the mean accuracy per architecture and depth."""
    from depthbench.evaluation.harness import evaluate_sweep
    from depthbench.evaluation.sweep import sweep_eval_rows

    evaluate_sweep(out, DEMO_EVAL_TASKS, limit=limit, batch_size=16, device="cpu", dtype="float32",
                   log=lambda *a: None)
    rows = [r for r in sweep_eval_rows(out) if r["task"] == "depthbench_synthetic" and r["metric"] == "acc"]
    depths = sorted({r["L"] for r in rows})
    log("\naccuracy on depthbench_synthetic (unseen four-way questions, chance 0.25), by depth:")
    log(" " * 10 + "".join(f"{f'L{L}':>8}" for L in depths))
    for arch in sorted({r["arch"] for r in rows}):
        cells = {r["L"]: r["value"] for r in rows if r["arch"] == arch}
        log(f"{arch:<10}" + "".join(f"{cells[L]:>8.3f}" if L in cells else f"{'':>8}" for L in depths))


def register_cli(subparsers) -> None:
    """Add ``depthbench demo`` (``depthbench sweep --preset demo`` is the same command: see ``depthbench.cli``)."""
    p = subparsers.add_parser("demo", help="the offline CPU demo: a small real aspect-ratio sweep (< 10 min)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEMO_OUT, help=f"results folder (default {DEMO_OUT})")
    p.add_argument("--steps", type=int, help=f"optimizer steps per run (default {DEMO_STEPS})")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="run-config override for every run")
    p.add_argument("--eval-limit", type=int, default=None,
                   help="questions per synthetic task family in the closing evaluation (default: all 100)")
    p.set_defaults(func=run_demo)
