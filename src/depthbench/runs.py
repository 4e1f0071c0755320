"""Run folders, sweep folders and run ids: the one owner of their layout, shared by every command that reads them.

A run folder (``depthbench train -o RUN``; the one description of it, other docstrings point here)::

    run_config.json          {"config": RunConfig as dict, "resolved": world size, accumulation, steps, model config,
                             "history": one entry per resume with the settings it changed}
    metrics.jsonl            one JSON object per logged step: step, tokens, train/loss, train/lr, train/grad_norm,
                             perf/tokens_per_s, perf/mfu, eval/<split>/loss, layer_stats/block_XX/...
    checkpoints/latest       name of the newest complete checkpoint (replaced atomically)
    checkpoints/ckpt-000100/ state/ (accelerate save_state: model, optimizer, scheduler, RNG; FSDP2: model and
                             optimizer sharded in state/dcp/), hf/ (HF export + tokenizer + README.md model card),
                             trainer_state.json (step, tokens, data-loader position, file manifest); the
                             checkpoint's own names are in ``depthbench.training.checkpoint``
    final/                   HF export of the finished model (AutoModelForCausalLM.from_pretrained(final)),
                             staged in final.tmp/ while it is written
    summary.json             the dict returned by ``depthbench.training.train``
    tensorboard/             with track.tensorboard=true
    writer.lease             while a process trains here: who holds the folder (``depthbench.lease``)
    eval/                    ``depthbench eval RUN``: results.json (lm-eval's results, merged per task), results.md
    analysis/                ``depthbench analyze RUN``: <metric>.json, .csv, .png

A sweep folder (``depthbench sweep --out SWEEP``)::

    sweep.json                the definition (``depthbench.sweeps.spec.SweepSpec``) and its fingerprint
    runs/<run id>/            one run folder per point, named by :func:`run_id`
    report.md                 assembled from sections (:func:`write_report_section`)
    report.html               the same report as one self-contained page (``depthbench.report_page``)
    sections/<name>.md        the report's sections: results, published, evaluation, analysis (:data:`REPORT_SECTIONS`)
    results.csv               one row per run (``depthbench.sweeps.report``); results.jsonl the same rows as JSON
    loss_vs_aspect_ratio.png  the sweep's figure (``depthbench.sweeps.plots``)
    eval_results.csv          ``depthbench eval SWEEP``: one row per run, task and metric, and its figures
                              (``depthbench.evaluation.sweep``)
    analysis/<run id>/        ``depthbench analyze SWEEP``: each run's analyses, summary.csv, and the comparison
                              figures beside report.md (``depthbench.analysis.sweep``)
    base_config.json          ``--launcher accelerate``: the base config each run's processes start from
    sweep.slurm, runs.txt     ``--emit slurm``: the job array and its one line per run (``depthbench.sweeps.slurm``)

A prepared data folder (``depthbench prepare-data -o DATA``) is the data family's (its format in
``depthbench.data.writer``); its ``meta.json`` (:data:`DATA_META`, what says the folder is complete) is named here
because runs, sweeps, cards and the benchmark look for it too.

Everything here reads and writes plain files; nothing imports torch.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from depthbench import atomic
from depthbench.report_page import write_report_page

SUMMARY = "summary.json"
RUN_CONFIG = "run_config.json"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
CHECKPOINT_PREFIX = "ckpt-"  # checkpoints/ckpt-NNNNNN (the step, 6 digits)
CHECKPOINT_EXPORT = "hf"  # checkpoints/ckpt-NNNNNN/hf: the checkpoint's HF export (published as branch step-NNNNNN)
FINAL = "final"
FINAL_STAGING = "final.tmp"
TENSORBOARD = "tensorboard"
EVAL = "eval"  # eval/results.json, results.md: ``depthbench eval RUN`` (``depthbench.evaluation.harness``)
EVAL_RESULTS = "results.json"
ANALYSIS = "analysis"  # <run>/analysis/, <sweep>/analysis/<run id>/: ``depthbench analyze`` (``depthbench.analysis``)
SWEEP_DEFINITION = "sweep.json"
RUNS = "runs"
REPORT = "report.md"
REPORT_PAGE = "report.html"
SECTIONS = "sections"
RESULTS_CSV = "results.csv"
RESULTS_JSONL = "results.jsonl"
RESULTS_PLOT = "loss_vs_aspect_ratio.png"
EVAL_TABLE = "eval_results.csv"
BASE_CONFIG = "base_config.json"
SLURM_SCRIPT = "sweep.slurm"
SLURM_RUNS = "runs.txt"
DATA_META = "meta.json"  # a prepared data folder's description, written last (``depthbench.data.prepare``)
REPORT_SECTIONS = ("results", "published", "evaluation", "analysis")
"""The sections of a sweep's ``report.md``, in order: the sweep's results (``depthbench report``), the study's
published figures beside them (folders of ``depthbench released eval`` only), the downstream evaluation
(``depthbench eval``) and the layer analyses (``depthbench analyze``)."""

#: Summary statuses after which a run is never trained again (``diverged``: the LR is too high, a valid result).
DONE_STATUSES = ("finished", "diverged")


# ================================================================================================ run ids
_SEP = "__"
_RUN_ID = re.compile(r"^(?P<arch>[^_].*?)__(?P<shape>.+)__lr(?P<lr>[^_]+)__s(?P<seed>-?\d+)$")


@dataclass(frozen=True)
class RunId:
    """The identity of a sweep point, and its folder name ``<arch>__<shape>__lr<lr>__s<seed>``
    (e.g. ``pre_ln__tiny-L4__lr0.002__s0``; the LR with 6 significant digits)."""

    arch: str
    shape: str
    lr: float
    seed: int

    def __str__(self) -> str:
        return f"{self.arch}{_SEP}{self.shape}{_SEP}lr{self.lr:g}{_SEP}s{self.seed}"

    @classmethod
    def parse(cls, name: str) -> RunId | None:
        """The :class:`RunId` of a run folder name, or ``None`` when the name is not one."""
        match = _RUN_ID.match(os.path.basename(os.path.normpath(name)))
        if match is None:
            return None
        try:
            return cls(match["arch"], match["shape"], float(match["lr"]), int(match["seed"]))
        except ValueError:
            return None


# ================================================================================================ run folders
def read_metrics(run_dir: str) -> list[dict]:
    """Rows of ``<run_dir>/metrics.jsonl`` (empty list if absent; a torn last line is skipped)."""
    path = os.path.join(run_dir, METRICS)
    rows = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return rows


def read_summary(run_dir: str) -> dict[str, Any] | None:
    """``summary.json`` of a run folder (``None`` when the run has not written one)."""
    summary = atomic.read_json(os.path.join(run_dir, SUMMARY))
    return summary if isinstance(summary, dict) else None


def final_dir(run_dir: str) -> str | None:
    """The run's ``final/`` export when it holds a model (``final/config.json``), else ``None``."""
    path = os.path.join(run_dir, FINAL)
    return path if os.path.isfile(os.path.join(path, "config.json")) else None


def is_run(path: str) -> bool:
    """Whether ``path`` is a training run folder (it has a ``run_config.json``)."""
    return os.path.isfile(os.path.join(path, RUN_CONFIG))


def model_dir(target: str) -> str:
    """The model a command should load for ``target``: a run folder -> its ``final/`` export; a folder with a
    ``config.json`` (an HF export, a checkpoint's ``hf/``) -> itself; anything that is not a local path -> itself
    (a Hub id).

    Raises:
        ValueError: ``target`` is a sweep folder, a run folder without a final export yet, a local folder or
            file that holds no model, or a path that does not exist and cannot be a Hub id (the message says which
            and what to pass instead).
    """
    if os.path.isdir(target):
        final = final_dir(target)
        if final is not None:
            return final
        if os.path.isfile(os.path.join(target, "config.json")):
            return target
        if is_sweep(target):
            raise ValueError(f"{target} is a sweep folder; give one of its runs ({os.path.join(target, RUNS)}/...) "
                             "or a command that takes a sweep")
        if is_run(target):
            raise ValueError(f"{target} is a training run without a final export yet ({os.path.join(target, FINAL)}"
                             " is missing): finish or resume the run, or pass one of its checkpoints' hf/ folders")
        raise ValueError(f"{target} holds no model (no config.json, nor {FINAL}/config.json): give an HF model "
                         "folder, a run folder or a Hub id")
    if os.path.exists(target):
        raise ValueError(f"{target} is a file, not a model: give an HF model folder, a run folder or a Hub id")
    if not _HUB_ID.match(target):
        raise ValueError(f"{target}: no such model folder (and not a Hub id, which is 'name' or 'owner/name'): give "
                         "an existing HF model folder, a run folder or a Hub id")
    owner, sep, name = target.partition("/")
    if sep and os.path.isdir(owner):  # "runs/hc_typo" next to a local runs/: a mistyped path, not a Hub model
        close = difflib.get_close_matches(name, sorted(os.listdir(owner)), n=1)
        hint = f" (did you mean {os.path.join(owner, close[0])}?)" if close else ""
        raise ValueError(f"{target}: no such model folder in the local folder {owner}/{hint}; give an existing HF "
                         "model folder or run folder (a Hub id whose owner is also a local folder name: download "
                         "it first, or run from another folder)")
    return target


#: What a Hub repository id looks like ("name" or "owner/name"; no leading "." or "-"): anything else that does not
#: exist locally (an absolute path, "./x", "a/b/c", "~/x") is a missing folder, not a Hub id.
_HUB_ID = re.compile(r"^(?![.-])[\w.-]{1,96}(/(?![.-])[\w.-]{1,96})?$")


# ================================================================================================ sweep folders
def is_sweep(path: str) -> bool:
    """Whether ``path`` is a sweep folder (a ``sweep.json`` definition and a ``runs/`` folder)."""
    return os.path.isfile(os.path.join(path, SWEEP_DEFINITION)) and os.path.isdir(os.path.join(path, RUNS))


def sweep_definition(sweep_dir: str) -> dict[str, Any]:
    """The sweep's definition (``sweep.json``'s ``spec``; ``{}`` when there is none)."""
    record = atomic.read_json(os.path.join(sweep_dir, SWEEP_DEFINITION))
    return (record or {}).get("spec") or {} if isinstance(record, dict) else {}


@dataclass(frozen=True)
class SweepRun:
    """One run folder of a sweep: its id (parsed from the folder name when it is a run id), folder, summary and
    final export (``None`` until it finished)."""

    name: str
    run_dir: str
    id: RunId | None
    summary: dict[str, Any] | None
    model_dir: str | None

    @property
    def status(self) -> str | None:
        return (self.summary or {}).get("status")

    @property
    def finished(self) -> bool:
        """Finished training and holds its final export (what evaluation, analyses and publishing use)."""
        return self.status == "finished" and self.model_dir is not None

    @property
    def arch(self) -> str | None:
        return (self.summary or {}).get("arch") or (self.id.arch if self.id else None)

    @property
    def shape(self) -> str | None:
        return self.id.shape if self.id else None


def sweep_runs(sweep_dir: str, *, finished: bool = False) -> list[SweepRun]:
    """Every run folder under ``<sweep>/runs`` in name order (with ``finished``: only :attr:`SweepRun.finished`)."""
    root = os.path.join(sweep_dir, RUNS)
    runs = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        run_dir = os.path.join(root, name)
        if not os.path.isdir(run_dir):
            continue
        run = SweepRun(name, run_dir, RunId.parse(name), read_summary(run_dir), final_dir(run_dir))
        if run.finished or not finished:
            runs.append(run)
    return runs


def sweep_data_dir(sweep_dir: str) -> str | None:
    """The data folder of the sweep's definition (absolute, or relative to the sweep folder, its parent or the
    working directory, tried in that order)."""
    spec = sweep_definition(sweep_dir)
    data = spec.get("data") or ((spec.get("base") or {}).get("data") or {}).get("data_dir")
    if not data:
        return None
    for candidate in (data, os.path.join(sweep_dir, data), os.path.join(os.path.dirname(sweep_dir.rstrip("/")), data)):
        if os.path.isdir(candidate):
            return candidate
    return data


def run_data_dir(target: str) -> str | None:
    """The data folder a training run trained on (``config.data.data_dir`` of its ``run_config.json``), for
    ``target`` = the run folder, its ``final/`` export or one of its checkpoints' ``hf/`` exports; ``None`` when
    ``target`` belongs to no run or the recorded folder no longer exists."""
    path = os.path.abspath(target)
    for run_dir in (path, os.path.dirname(path), os.path.dirname(os.path.dirname(os.path.dirname(path)))):
        if is_run(run_dir):
            break
    else:
        return None
    try:
        record = atomic.read_json(os.path.join(run_dir, RUN_CONFIG)) or {}
    except (OSError, ValueError):
        return None
    data = (((record.get("config") or {}) if isinstance(record, dict) else {}).get("data") or {}).get("data_dir")
    if not data:
        return None
    for candidate in (data, os.path.join(run_dir, data)):  # absolute since the trainer records it so
        if os.path.isdir(candidate):
            return candidate
    return None


def write_report_section(sweep_dir: str, name: str, text: str | None) -> str:
    """Store section ``name`` of the sweep's report (``None`` removes it) and reassemble ``report.md`` from every
    stored section in :data:`REPORT_SECTIONS` order, and ``report.html`` from it (``depthbench.report_page``: the
    same content as one self-contained page); returns the path of ``report.md``.

    Each producer owns its section's text; this function owns the file, so rebuilding one section never touches
    the others. A ``report.md`` found without stored sections (written by hand or by another tool) is kept as the
    first section until that section is written.
    """
    if name not in REPORT_SECTIONS:
        raise ValueError(f"unknown report section {name!r}; sections: {', '.join(REPORT_SECTIONS)}")
    folder = os.path.join(sweep_dir, SECTIONS)
    report = os.path.join(sweep_dir, REPORT)
    if not os.path.isdir(folder) and os.path.isfile(report):  # a report.md not assembled here: keep it, first
        os.makedirs(folder)
        with open(report, encoding="utf-8") as f:
            atomic.write_text(os.path.join(folder, f"{REPORT_SECTIONS[0]}.md"), f.read())
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.md")
    if text is None:
        if os.path.exists(path):
            os.remove(path)
    else:
        atomic.write_text(path, text.rstrip("\n") + "\n")
    parts = []
    for section in REPORT_SECTIONS:
        section_path = os.path.join(folder, f"{section}.md")
        if os.path.isfile(section_path):
            with open(section_path, encoding="utf-8") as f:
                parts.append(f.read().rstrip("\n"))
    text = "\n\n".join(parts) + "\n"
    atomic.write_text(report, text)
    write_report_page(os.path.join(sweep_dir, REPORT_PAGE), text)
    return report
