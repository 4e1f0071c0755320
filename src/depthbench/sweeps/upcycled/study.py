"""``depthbench upcycle-study``: the study's comparison on a model that already exists.

For one source model (a Llama-family checkpoint, e.g. SmolLM2), a list of designs and a growth setting, every
design is upcycled (:func:`depthbench.upcycle.upcycle`), its step-0 held-out loss measured next to the source's
(run by transformers itself), then trained on the same tokens with the same recipe and seeds (ordinary
``depthbench train`` runs with ``model.init_from``, through the sweep runner's :func:`train_point`), the layer
analyses run before (the source and every upcycled model) and after training (every finished run,
``depthbench.analysis``), optionally lm-eval tasks (``depthbench.evaluation``), and the results written
(``depthbench.sweeps.upcycled.report``).

The folder is a sweep folder (``sweep.json`` + ``runs/``), so ``depthbench report``, ``depthbench analyze`` and
``depthbench eval`` work on it as on any sweep::

    OUT/study.json              the study's definition (source, designs, growth, recipe, seeds) and its fingerprint
    OUT/sweep.json, runs/       the training runs: <arch>__<shape>__lr<lr>__s<seed>/ (model.init_from = models/<arch>)
    OUT/models/<arch>/          the upcycled checkpoints (upcycle.json: start, deviation)
    OUT/models/source/          the source as a plain transformers folder (only for a GGUF file or a Hub id)
    OUT/step0.json              held-out loss at step 0: the source's and every upcycled model's
    OUT/analysis/source/, analysis/before/<arch>/, analysis/<run id>/   layer analyses (source, step 0, trained)
    OUT/results.csv, upcycle_study.png, report.md, report.html

Every stage skips what is already on disk, so running the same command again continues where it stopped; a
different definition in the same folder is refused before anything is written. Each stage prints its progress and,
from its second item on, an estimate of the time left.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from depthbench import atomic, lease, runs
from depthbench.sweeps.spec import RunPoint, SweepError, SweepSpec, claim_folder
from depthbench.sweeps.upcycled.report import MODELS, STEP0, STUDY, write_study_section

KIND = "upcycled"
DEFAULT_METRICS = ("logit_lens", "angular")


@dataclass
class StudyDefinition:
    """What the study compares (everything that changes its results; ``study.json``)."""

    source: str
    archs: list[str]
    data_dir: str
    grow_depth: int = 0
    grow_mode: str = "interleave"
    gguf_file: str | None = None
    revision: str | None = None
    seeds: list[int] = field(default_factory=lambda: [0])
    lr: float = 3e-4
    base: dict[str, Any] = field(default_factory=dict)  # the run config of every run (recipe, eval windows)
    overrides: list[str] = field(default_factory=list)
    upcycle_overrides: dict[str, Any] = field(default_factory=dict)
    allow_function_change: bool = False
    split: str = "eval"  # the held-out split compared (its first data.eval_sequences windows)
    metrics: list[str] = field(default_factory=lambda: list(DEFAULT_METRICS))
    analysis: dict[str, Any] = field(default_factory=lambda: {"num_samples": 8, "seq_len": 128, "seed": 42})
    tasks: list[str] = field(default_factory=list)
    task_limit: float | None = None

    def __post_init__(self) -> None:
        from depthbench.registry import resolve_archs

        try:
            self.archs = list(dict.fromkeys(resolve_archs(self.archs)))
        except ValueError as exc:
            raise SweepError(str(exc)) from None
        if isinstance(self.grow_depth, bool) or not isinstance(self.grow_depth, int) or self.grow_depth < 0:
            raise SweepError(f"grow_depth={self.grow_depth!r} is not allowed: the number of new blocks must be an "
                             "integer >= 0")
        if self.grow_mode not in ("interleave", "append"):
            raise SweepError(f"grow_mode={self.grow_mode!r} is not allowed: interleave or append")
        if not os.path.isfile(os.path.join(self.data_dir, runs.DATA_META)):
            raise SweepError(f"--data {self.data_dir} is not a prepared data folder (no meta.json): prepare the text "
                             "with the source's tokenizer: depthbench prepare-data FILES --tokenizer SRC --eval-files "
                             "HELD_OUT -o DIR")
        self.data_dir = os.path.abspath(self.data_dir)

    def fingerprint(self) -> str:
        blob = json.dumps({k: v for k, v in asdict(self).items() if k not in ("tasks", "task_limit", "metrics",
                                                                              "analysis")},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def run_base(self) -> dict[str, Any]:
        """The run config every training run starts from (the data folder set, the held-out split evaluated)."""
        base = copy.deepcopy(self.base)
        base.setdefault("data", {})["data_dir"] = self.data_dir
        base["data"].setdefault("eval_splits", [self.split])
        base.setdefault("model", {})
        base["model"].pop("arch", None)
        base["model"].pop("shape", None)
        return base


@dataclass
class UpcycleStudySpec(SweepSpec):
    """The study's runs as a sweep: one shape (the upcycled depth and width), one LR, its seeds; every run starts
    from its design's upcycled checkpoint (``model.init_from``)."""

    models_dir: str = ""

    def run_overrides(self, point: RunPoint, run_dir: str) -> list[str]:
        init = os.path.join(self.models_dir, point.arch)
        return super().run_overrides(point, run_dir) + [f"model.init_from={json.dumps(init)}"]


class Progress:
    """``[stage] i/n item ... (elapsed, about T left)`` lines: the estimate is the mean time per finished item."""

    def __init__(self, stage: str, total: int, log: Callable[..., None]):
        self.stage, self.total, self.log, self.done, self.t0 = stage, total, log, 0, time.time()
        self.timed: list[float] = []

    def start(self, what: str) -> None:
        left = ""
        if self.timed:
            left = f", about {sum(self.timed) / len(self.timed) * (self.total - self.done):.0f}s left in this stage"
        self.log(f"[{self.stage} {self.done + 1}/{self.total}] {what} ({time.time() - self.t0:.0f}s{left})")
        self._t = time.time()

    def finish(self, timed: bool = True) -> None:
        self.done += 1
        if timed:
            self.timed.append(time.time() - self._t)

    def skip(self, what: str) -> None:
        self.log(f"[{self.stage} {self.done + 1}/{self.total}] {what}: done earlier, skipped")
        self.done += 1


# ================================================================================================ the folder
def claim_study(defn: StudyDefinition, out_dir: str) -> None:
    """Refuse a folder of another study or sweep (nothing written), else write ``study.json``."""
    path = os.path.join(out_dir, STUDY)
    if os.path.exists(path):
        old = atomic.read_json(path) or {}
        if old.get("fingerprint") != defn.fingerprint():
            spec = old.get("definition") or {}
            raise SweepError(f"{out_dir} holds another upcycling study (source {spec.get('source')!r}, designs "
                             f"{','.join(spec.get('archs') or [])}, grow_depth {spec.get('grow_depth')}, seeds "
                             f"{spec.get('seeds')}); use another --out folder (nothing was overwritten)")
    elif [n for n in (os.listdir(out_dir) if os.path.isdir(out_dir) else []) if n != lease.LEASE_NAME]:
        raise SweepError(f"{out_dir} is not empty and holds no {STUDY}: it is not a folder of this study; use another "
                         "--out folder (nothing was overwritten)")
    atomic.write_json(path, {"fingerprint": defn.fingerprint(), "definition": asdict(defn)})



# ================================================================================================ stages
def upcycle_models(defn: StudyDefinition, out_dir: str, log) -> dict[str, dict]:
    """Stage 1: every design's upcycled checkpoint in ``models/<arch>`` (kept when there); returns its records."""
    from depthbench.upcycle import upcycle

    progress = Progress("upcycle", len(defn.archs), log)
    records = {}
    for arch in defn.archs:
        folder = os.path.join(out_dir, MODELS, arch)
        record_path = os.path.join(folder, "upcycle.json")
        if os.path.isfile(record_path):
            progress.skip(arch)
        else:
            progress.start(f"{defn.source} -> {arch}" + (f" + {defn.grow_depth} blocks ({defn.grow_mode})"
                                                         if defn.grow_depth else ""))
            result = upcycle(defn.source, arch, grow_depth=defn.grow_depth, grow_mode=defn.grow_mode,
                             gguf_file=defn.gguf_file, revision=defn.revision, overrides=defn.upcycle_overrides,
                             allow_function_change=defn.allow_function_change)
            result.save(folder)
            progress.finish()
            log(f"  {arch}: {result.start} start, logits deviate by {result.deviation:.3g} relative")
        records[arch] = atomic.read_json(record_path)
    return records


def source_folder(defn: StudyDefinition, out_dir: str) -> str:
    """A folder transformers loads the source from without options: the source itself when it is a plain local
    folder, else ``models/source`` (written once: a GGUF file dequantised to fp32, or a Hub id)."""
    if os.path.isdir(defn.source) and not defn.gguf_file:
        return defn.source
    folder = os.path.join(out_dir, MODELS, "source")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        from depthbench.hub.convert import write_atomically
        from depthbench.upcycle import load_source

        model, tokenizer, _ = load_source(defn.source, revision=defn.revision, gguf_file=defn.gguf_file)
        if getattr(model, "hf_quantizer", None) is not None:  # a GGUF file, dequantised: plain fp32 weights now
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config

        def write(tmp: str) -> None:
            model.save_pretrained(tmp, safe_serialization=True)
            if tokenizer is not None:
                tokenizer.save_pretrained(tmp)

        write_atomically(folder, write)
    return folder


def step0_losses(defn: StudyDefinition, out_dir: str, source_dir: str, log) -> dict[str, Any]:
    """Stage 2: held-out loss of the source (transformers' own model) and of every upcycled model at step 0, on
    the windows the trainer evaluates (the split's first ``data.eval_sequences`` windows); ``step0.json``."""
    import torch
    from transformers import AutoModelForCausalLM

    import depthbench  # noqa: F401  (registers the architectures with the Auto classes)
    from depthbench.config import load_run_config
    from depthbench.sweeps.heldout import heldout_loss, open_heldout

    path = os.path.join(out_dir, STEP0)
    record = atomic.read_json(path) or {"split": defn.split, "models": {}}
    cfg = load_run_config(defn.run_base(), list(defn.overrides))
    shards = open_heldout(defn.data_dir, defn.split)
    targets = [("source", source_dir)] + [(a, os.path.join(out_dir, MODELS, a)) for a in defn.archs]
    progress = Progress("step-0 loss", len(targets), log)
    for name, folder in targets:
        if name in record["models"]:
            progress.skip(name)
            continue
        progress.start(f"{name}: held-out loss on {cfg.eval_sequences} windows of {cfg.data.seq_len} tokens")
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        result = heldout_loss(model, shards, cfg.data.seq_len, max_tokens=cfg.eval_sequences * cfg.data.seq_len,
                              batch_size=cfg.train.micro_batch_size)
        del model
        record["models"][name] = result
        atomic.write_json(path, record)
        progress.finish()
        log(f"  {name}: {result['loss']:.4f} nats/token")
    return record


def analyze_before(defn: StudyDefinition, out_dir: str, source_dir: str, log) -> None:
    """Stage 3: the layer analyses of the source and of every upcycled model at step 0."""
    from depthbench.analysis.runner import analyze_target
    from depthbench.analysis.sampling import WindowSpec

    if not defn.metrics:
        return
    targets = [("source", source_dir, os.path.join(out_dir, runs.ANALYSIS, "source"))] + [
        (a, os.path.join(out_dir, MODELS, a), os.path.join(out_dir, runs.ANALYSIS, "before", a)) for a in defn.archs]
    progress = Progress("analysis before", len(targets), log)
    for name, folder, dest in targets:
        if all(os.path.isfile(os.path.join(dest, f"{m}.json")) for m in defn.metrics):
            progress.skip(name)
            continue
        progress.start(f"{name}: {', '.join(defn.metrics)}")
        analyze_target(folder, list(defn.metrics), dest, defn.data_dir, WindowSpec(split=defn.split,
                                                                                   **defn.analysis),
                       skip_done=True, require_any=False, progress=False, log=lambda msg: log(f"  {msg}"))
        progress.finish()


def sweep_spec(defn: StudyDefinition, out_dir: str, records: dict[str, dict]) -> UpcycleStudySpec:
    config = atomic.read_json(os.path.join(out_dir, MODELS, defn.archs[0], "config.json"))
    shape = f"d{config['hidden_size']}-L{config['num_hidden_layers']}"
    return UpcycleStudySpec(archs=list(defn.archs), shapes=[shape], lrs=[defn.lr], seeds=list(defn.seeds),
                            base=defn.run_base(), overrides=list(defn.overrides), name=f"upcycled {defn.source}",
                            custom_shapes={shape: {"hidden_size": config["hidden_size"],
                                                   "num_hidden_layers": config["num_hidden_layers"]}},
                            models_dir=os.path.abspath(os.path.join(out_dir, MODELS)))


def train_runs(spec: UpcycleStudySpec, out_dir: str, log) -> str:
    """Stage 4: every (design, seed) run, finished ones skipped, unfinished ones resumed; returns the status."""
    from depthbench.sweeps.runner import train_point

    points = spec.runs()
    progress = Progress("train", len(points), log)
    for point in points:
        run_dir = spec.run_dir(out_dir, point)
        summary = runs.read_summary(run_dir)
        if summary and summary.get("status") in runs.DONE_STATUSES:
            progress.skip(point.run_id)
            continue
        progress.start(f"{point.run_id}: {'resuming' if runs.is_run(run_dir) else 'training'}")
        status = train_point(spec.run_config(point, run_dir), log, run_dir)
        progress.finish()
        if status == "stopped":
            return "stopped"
    return "finished"


def analyze_after(defn: StudyDefinition, out_dir: str, log) -> None:
    """Stage 5: the same analyses on every finished run (``depthbench analyze`` on the sweep folder)."""
    from depthbench.analysis.runner import analyze_sweep
    from depthbench.analysis.sampling import WindowSpec

    if defn.metrics:
        log(f"[analysis after] {', '.join(defn.metrics)} on every finished run")
        analyze_sweep(out_dir, list(defn.metrics), defn.data_dir, WindowSpec(split=defn.split, **defn.analysis),
                      progress=False, log=lambda msg: log(f"  {msg}"))


def evaluate_tasks(defn: StudyDefinition, out_dir: str, log) -> None:
    """Stage 6 (optional): lm-eval tasks on every finished run (``depthbench eval`` on the sweep folder)."""
    if defn.tasks:
        from depthbench.evaluation.harness import evaluate_sweep

        log(f"[lm-eval] {', '.join(defn.tasks)} on every finished run")
        evaluate_sweep(out_dir, list(defn.tasks), limit=defn.task_limit, log=lambda msg: log(f"  {msg}"))


def run_study(defn: StudyDefinition, out_dir: str, *, wait_for_writer: float = 0.0,
              log: Callable[..., None] = print) -> dict[str, str]:
    """Run (or continue) the whole study into ``out_dir``; returns the report's paths."""
    hint = "Wait for it to finish, or pass --wait-for-writer SECONDS."
    with lease.acquire(out_dir, what="depthbench upcycle-study", wait=wait_for_writer, hint=hint,
                       log=lambda msg: log(f"depthbench upcycle-study: {msg}")):
        claim_study(defn, out_dir)
        t0 = time.time()
        records = upcycle_models(defn, out_dir, log)
        source_dir = source_folder(defn, out_dir)
        step0_losses(defn, out_dir, source_dir, log)
        analyze_before(defn, out_dir, source_dir, log)
        spec = sweep_spec(defn, out_dir, records)
        claim_folder(spec, out_dir)
        definition = atomic.read_json(os.path.join(out_dir, runs.SWEEP_DEFINITION))
        definition["spec"]["kind"] = KIND  # `depthbench report` rebuilds the study's own results section
        atomic.write_json(os.path.join(out_dir, runs.SWEEP_DEFINITION), definition)
        if train_runs(spec, out_dir, log) == "stopped":
            log("stopped (the run in flight is checkpointed); run the same command again to continue")
            return write_study_report(out_dir, log=log)
        analyze_after(defn, out_dir, log)
        evaluate_tasks(defn, out_dir, log)
        paths = write_study_report(out_dir, log=log)
        log(f"upcycle-study done in {time.time() - t0:.0f}s; report: {paths['report']}")
        return paths


def write_study_report(out_dir: str, log: Callable[..., None] = print) -> dict[str, str]:
    """The whole report of a study folder: the sweep's files when runs exist (``depthbench report``, which calls
    :func:`write_study_section`), else the study's section alone."""
    if runs.is_sweep(out_dir) and any(r.summary for r in runs.sweep_runs(out_dir)):
        from depthbench.sweeps.report import write_report

        return write_report(out_dir, log=log, plot=False)
    paths = write_study_section(out_dir)
    log("wrote " + ", ".join(paths.values()))
    return paths
