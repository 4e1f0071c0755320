"""The embedded demo: a real (small) aspect-ratio sweep that runs anywhere, offline, on 2 CPU cores in < 10 minutes.

    depthbench demo                             # -> runs/demo/{report.html, report.md, results.csv, *.png}
    depthbench demo --out /tmp/demo --steps 20  # a quicker smoke run (its own folder; below 5 tokens/parameter)

What it does, honestly measured:

1. Builds the deterministic offline corpus of ``depthbench.data.synthetic`` into ``<out>/data``: synthetic depth tasks
   (multi-hop pointer chasing, permutation composition, multi-step modular arithmetic and variable chains, 1-4
   steps each) mixed with the English prose of the standard library's ``pydoc_data``, and a 512-token byte-level
   BPE trained on the spot (~0.82M training tokens; held-out splits ``eval_synthetic`` = fresh task instances,
   ``eval_text`` = held-out pydoc documents).
2. Trains ``pre_ln``, ``hc`` and ``attnres`` at three depths of the ``micro`` grid (a fixed total of 78,260
   parameters, within 3.5 %), from wide-shallow L2 (d=40, d/L=20) through L5 (d=28, d/L=5.6) to deep-narrow L8
   (d=24, d/L=3), each with seeds 0, 1 and 2: 27 runs with one recipe, in parallel worker processes (one per core,
   up to ``DEMO_MAX_WORKERS``).
3. Reports held-out loss separately on the synthetic depth tasks (``eval_synthetic``, the part meant to measure
   depth) and on held-out text (``eval_text``), plus their mean (``eval_loss``), each point as the mean over its
   seeds with their min-max; per architecture the deep-minus-shallow change, and whether it is beyond the seed spread
   (``depthbench.sweeps.results.loss_changes``); writes ``results.csv``, ``results.jsonl``,
   ``loss_vs_aspect_ratio.png``, ``report.md`` and ``report.html`` and prints a closing table.
4. Runs the study's layer analyses (``depthbench.analysis``) on each architecture's deepest model (L8, seed 0): the
   causal and permutation scores with their late-layer fractions and the logit-lens curves, on
   ``DEMO_ANALYSIS_WINDOWS`` windows of held-out text; the figures and a table go into the report ("Layer analyses").
5. Ends with accuracy by depth: ``depthbench eval`` of every run's final model on the offline lm-eval tasks
   ``depthbench_synthetic`` (400 four-way questions on unseen instances of the four task families; chance 0.25),
   added to the report with ``synthetic_acc_vs_aspect_ratio.png`` and ``eval_results.csv``.

The recipe follows one rule, written down before any result was seen and never tuned toward one:

- the budget: the ``micro`` grid (``depthbench shapes micro``), the study's shape rule at the largest budget whose
  27 runs fit the time budget below;
- the tokens: every run trains on the same number of tokens, ``DEMO_TOKENS_PER_PARAMETER`` (5) times the largest
  model of the grid (hc at L8, 83,000 parameters), so that every model sees at least 5 tokens per parameter:
  ``DEMO_STEPS`` = ceil(5 x 83,000 / (16 x 128)) = 203 AdamW steps of 16 sequences x 128 tokens (415,744 tokens per
  run, ~0.51 epochs of the training split);
- one learning rate for every architecture and shape: peak LR 0.003 (the demo's LR before this recipe, kept), with
  10 % linear warmup and cosine decay to 0.1 x peak, weight decay 0.1, clip 1.0, fp32 on CPU;
- three seeds per point (0, 1, 2: the model's initialisation and the data order); each eval split is scored on its
  first 256 windows of 128 tokens (all of it: ~28k tokens each).

The final checkpoint and the HF export of every run are kept (``<out>/runs/<run>/final`` loads with
``AutoModelForCausalLM.from_pretrained``).

Time budget: ~420 CPU-seconds of training for the 27 runs, measured per run and architecture, plus the corpus, the
evaluation, the analyses and imports; on two idle cores, with two worker processes, the whole command takes the wall
time given in docs/benchmarks.md ("the demo at five tokens per parameter"). An interrupted demo resumes where it
stopped when run again.

The numbers are whatever the runs measure; the report says for each difference whether it is beyond the spread of
the three seeds, and with three seeds that is a weak test (see ``depthbench.sweeps.results.SPREAD_RULE``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from typing import Any

from depthbench import atomic, runs
from depthbench.procfs import usable_cores
from depthbench.shapes import get_grid, get_shape, grid_shapes
from depthbench.sweeps.spec import SweepError, SweepSpec, claim_folder

DEMO_ARCHS = ["pre_ln", "hc", "attnres"]
DEMO_GRID = "micro"
DEMO_DEPTHS = [2, 5, 8]
DEMO_SEEDS = [0, 1, 2]
DEMO_LR = 3e-3
DEMO_TOKENS_PER_PARAMETER = 5
DEMO_OUT = "runs/demo"
DEMO_MAX_WORKERS = 4
"""The demo trains in ``min(usable cores, DEMO_MAX_WORKERS)`` worker processes (each takes ~0.4 GB)."""
#: Layer analyses run on each architecture's deepest demo model, over this many 128-token held-out text windows.
DEMO_ANALYSIS_METRICS = ["causal", "permutation", "logit_lens"]
DEMO_ANALYSIS_WINDOWS = 8

#: The demo recipe (a run-config dict, see depthbench.config): the study's optimizer recipe at toy scale.
DEMO_BASE: dict[str, Any] = {
    "data": {"seq_len": 128, "eval_sequences": 256},
    "optim": {"weight_decay": 0.1, "warmup_fraction": 0.1, "min_lr_ratio": 0.1, "grad_clip": 1.0},
    "train": {"global_batch_size": 16, "micro_batch_size": 16, "mixed_precision": "no", "cpu": True,
              "log_every": 10, "progress": True},
    "checkpoint": {"every": 0, "keep_last": 1},
}


def demo_steps() -> int:
    """The recipe's rule for the steps: every run sees :data:`DEMO_TOKENS_PER_PARAMETER` tokens per parameter of
    the largest model of the sweep (so every model sees at least that many)."""
    largest = max(shape.parameter_counts(arch)["total"] for arch in DEMO_ARCHS
                  for shape in grid_shapes(DEMO_GRID, DEMO_DEPTHS))
    per_step = DEMO_BASE["train"]["global_batch_size"] * DEMO_BASE["data"]["seq_len"]
    return math.ceil(DEMO_TOKENS_PER_PARAMETER * largest / per_step)


DEMO_STEPS = demo_steps()

DEMO_NOTES = (
    "Embedded demo (`depthbench demo`): small models of the `micro` grid, every run trained on the same tokens of "
    "an offline corpus built on the spot (synthetic multi-step tasks mixed with pydoc English prose, a byte-level BPE "
    "trained on it). `eval_synthetic` = held-out instances of the synthetic depth tasks (pointer chasing, "
    "permutation composition, modular arithmetic, variable chains); `eval_text` = held-out prose; `eval_loss` = their "
    "mean. The setup below gives the sizes, tokens, learning rate and seeds this run used; differences are read "
    "against the spread of the seeds (the rule is under the loss changes)."
)
"""The demo's own words in its report: what it is, never a number (those are computed from the run: the setup)."""


def demo_spec(data_dir: str, steps: int | None = None, overrides: list[str] | None = None) -> SweepSpec:
    """The demo's :class:`depthbench.sweeps.spec.SweepSpec` on the prepared corpus ``data_dir`` (``steps``: the
    recipe's :data:`DEMO_STEPS` unless given)."""
    steps = DEMO_STEPS if steps is None else steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise SweepError(f"--steps {steps!r} is not allowed: the demo's steps must be a positive integer")
    base = json.loads(json.dumps(DEMO_BASE))
    base["data"]["data_dir"] = os.path.abspath(data_dir)
    base["train"]["max_steps"] = steps
    return SweepSpec(
        archs=list(DEMO_ARCHS),
        shapes=[s.name for s in grid_shapes(DEMO_GRID, DEMO_DEPTHS)],
        lrs=[DEMO_LR],
        seeds=list(DEMO_SEEDS),
        base=base,
        overrides=list(overrides or []),
        name="demo",
        notes=DEMO_NOTES,
    )


def ensure_demo_data(data_dir: str, log=print, *, max_vocab: int | None = None, **corpus_kwargs: Any) -> str:
    """Build the offline demo corpus into ``data_dir`` unless it is already there (``corpus_kwargs`` go to
    ``depthbench.data.synthetic.build_demo_corpus``, e.g. smaller sizes in tests; its vocabulary is the demo grid's
    unless given). A corpus found there whose tokenizer has more than ``max_vocab`` tokens (built by an earlier demo
    for larger models) is refused, with nothing overwritten."""
    # imported here: depthbench.data.synthetic loads torch and the tokenizer stack (keeps `depthbench --help` fast)
    from depthbench.data.synthetic import build_demo_corpus

    info_path = os.path.join(data_dir, "demo_corpus.json")
    if os.path.exists(os.path.join(data_dir, runs.DATA_META)) and os.path.exists(info_path):
        info = atomic.read_json(info_path) or {}
        if max_vocab is not None and (info.get("vocab_size") or 0) > max_vocab:
            raise SweepError(f"{data_dir} holds a demo corpus with a {info['vocab_size']}-token vocabulary, larger "
                             f"than the demo models' {max_vocab}: it was built by an earlier version of the demo; "
                             "use another --out folder or remove that one (nothing was overwritten)")
        log(f"demo corpus: reusing {data_dir} ({_tokens_text(info.get('tokens', {}))})")
        return data_dir
    t0 = time.time()
    log(f"demo corpus: building {data_dir} (synthetic depth tasks + pydoc text, tokenizer trained on the spot)")
    corpus_kwargs.setdefault("vocab_size", get_grid(DEMO_GRID).vocab_size)
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


def run_demo(out: str = DEMO_OUT, steps: int | None = None, overrides: list[str] | None = None,
             workers: int | None = None, eval_limit: int | None = None) -> int:
    """``depthbench demo``: build data, run the sweep, analyse, evaluate, print the closing table and paths.
    ``steps``: :data:`DEMO_STEPS` unless given; ``overrides``: run-config ``KEY=VALUE`` for every run; ``workers``:
    ``min(usable cores, DEMO_MAX_WORKERS)`` unless given; ``eval_limit``: questions per synthetic task family."""
    # imported here: ``depthbench demo --help`` reads this module's constants and must not load the runner's code
    from depthbench.sweeps.report import print_table
    from depthbench.sweeps.results import collect_results
    from depthbench.sweeps.runner import run_sweep

    workers = min(usable_cores(), DEMO_MAX_WORKERS) if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SweepError(f"--workers {workers!r} is not allowed: give a positive integer")
    out = out or DEMO_OUT
    t0 = time.time()
    spec = demo_spec(os.path.join(out, "data"), steps=steps, overrides=list(overrides or []))
    configs = spec.run_configs(out)  # bad --set: fail before the data
    claim_folder(spec, out)  # a folder of another sweep definition: refused before anything is built
    data_dir = ensure_demo_data(os.path.join(out, "data"), max_vocab=_model_vocab(configs[0]))
    rows = run_sweep(spec, out, launcher="local", workers=workers, configs=configs)
    if sum(r["status"] in runs.DONE_STATUSES for r in rows) < len(spec.runs()):  # stopped by a signal
        print(f"demo stopped before every run finished; `depthbench demo --out {out}` (the same command) continues")
        return 0
    with one_torch_thread():
        analyze_demo(out, data_dir)
        evaluate_demo(out, limit=eval_limit)
    rows = collect_results(out)
    print()
    print_table(rows)
    print()
    from depthbench.analysis.sweep import LATE_FIGURE, LENS_FIGURE
    from depthbench.evaluation.sweep import SYNTHETIC_PLOT

    for name in (runs.REPORT_PAGE, runs.REPORT, runs.RESULTS_CSV, runs.RESULTS_JSONL, runs.RESULTS_PLOT,
                 runs.EVAL_TABLE, SYNTHETIC_PLOT, LATE_FIGURE, LENS_FIGURE):
        print(f"  {os.path.join(out, name)}")
    print(f"  {data_dir} (the corpus), {os.path.join(out, runs.RUNS)} (one folder per run)")
    print(f"demo finished in {time.time() - t0:.0f}s; open {os.path.join(out, runs.REPORT_PAGE)} in a browser")
    return 0


@contextlib.contextmanager
def one_torch_thread():
    """One torch thread in this process while the block runs: the demo's models are too small for intra-op threads,
    and a second thread only spins (the analyses took 5.7 CPU-s with one thread, 34.9 with two; the evaluation 23.5
    and 61.9: docs/benchmarks.md, "the demo at five tokens per parameter")."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _model_vocab(cfg) -> int:
    """The vocabulary size of the demo's models under the run config ``cfg`` (``--set model.fields.vocab_size``
    wins over the grid's)."""
    return int((cfg.model.fields or {}).get("vocab_size") or get_shape(cfg.model.shape).vocab_size)


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
    log("\naccuracy on depthbench_synthetic (unseen four-way questions, chance 0.25), by depth: mean over seeds "
        "(min-max)")
    log(" " * 10 + "".join(f"{f'L{L}':>22}" for L in depths))
    for arch in sorted({r["arch"] for r in rows}):
        cells: dict[int, list[float]] = {}
        for r in rows:
            if r["arch"] == arch:
                cells.setdefault(r["L"], []).append(r["value"])
        log(f"{arch:<10}" + "".join(f"{_acc_cell(cells[L]):>22}" if L in cells else f"{'':>22}" for L in depths))


def _acc_cell(values: list[float]) -> str:
    mean = f"{sum(values) / len(values):.3f}"
    return mean + (f" ({min(values):.3f}-{max(values):.3f})" if len(values) > 1 else "")
