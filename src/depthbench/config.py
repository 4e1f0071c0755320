"""Run configuration for ``depthbench train``: a dataclass tree, YAML/JSON loading and dotted overrides.

A run file is YAML or JSON with up to six sections, each mapping onto one dataclass below::

    model:      {arch: pre_ln, shape: tiny-L4}            # or config_path: path/to/config.json
    data:       {data_dir: runs/data, seq_len: 256}
    optim:      {lr: 2.0e-3, weight_decay: 0.1}
    train:      {global_batch_size: 32, micro_batch_size: 8, max_steps: 200}
    checkpoint: {every: 100, keep_last: 2}
    track:      {tensorboard: true}
    output_dir: runs/demo

Command-line overrides use dotted keys with YAML-parsed values: ``train.max_steps=100``,
``optim.betas=[0.9,0.99]``, ``model.fields.hidden_size=64``, ``track.wandb=true``. Unknown keys are an error that
names the key and lists the valid ones (a typo never silently does nothing); keys of ``model.fields`` are checked
against the architecture's config class when the model is built (``depthbench.model_config.resolve_model_config``).
Numbers must be finite everywhere in the tree (``optim.lr=inf`` or a ``NaN`` inside ``model.fields`` is an
error naming the key).

    >>> cfg = load_run_config({"model": {"arch": "pre_ln"}, "data": {"data_dir": "d"}}, ["train.max_steps=10"])
    >>> cfg.train.max_steps
    10
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import types
import typing
from dataclasses import dataclass, field
from typing import Any

import yaml

COMPILE_SCOPES = ("layers", "model")
"""What ``model.compile=true`` compiles (``depthbench.training.compiled.compile_model``): every decoder block on
its own, or the whole forward as one graph."""


PARALLELISMS = ("auto", "ddp", "fsdp2")
"""``train.parallelism``: ``fsdp2`` shards the model (``depthbench.training.sharding``), ``ddp`` replicates it (one
process: no wrapper), ``auto`` = FSDP2 when launched with an accelerate FSDP config (``fsdp_version: 2``, as
``src/depthbench/configs/fsdp2.yaml``), else DDP."""


class RunConfigError(ValueError):
    """A run file or override is invalid (the message names the offending key)."""


@dataclass
class ModelConfig:
    """Which model to train.

    Exactly one of ``shape`` / ``config_path`` / ``fields`` usually describes the size: ``shape`` is a named grid
    shape (``depthbench.shapes.get_shape``), ``config_path`` an HF ``config.json`` (its ``model_type`` picks the
    architecture unless ``arch`` is given), and ``fields`` explicit config fields; ``fields`` are applied last and
    win over the shape.
    """

    arch: str | None = "pre_ln"  # registry id; None = take it from config_path's model_type
    shape: str | None = None  # named grid shape, e.g. "tiny-L4", "400m-L24"
    config_path: str | None = None  # HF config.json (file or folder) to build the model from
    fields: dict[str, Any] = field(default_factory=dict)  # extra/override config fields
    vocab_size: int | None = None  # None: the shape's / config file's, else the tokenizer's (must fit the tokenizer)
    attn_implementation: str = "sdpa"  # "sdpa" | "eager" | any registered attention backend
    gradient_checkpointing: bool = False
    compile: bool = False  # torch.compile the model (depthbench.training.compiled.compile_model)
    compile_scope: str = "layers"  # "layers": each decoder block on its own (fast to compile) | "model": one graph
    # a checkpoint folder whose weights (and config) the run starts from: continued pretraining, e.g. from
    # `depthbench upcycle` (depthbench.training.init_from); without model.arch the folder's architecture is used
    init_from: str | None = None


@dataclass
class DataConfig:
    """Prepared token data (``depthbench prepare-data``) and how it is cut into windows."""

    data_dir: str | None = None  # folder with meta.json, tokenizer/, train/, eval splits
    seq_len: int = 512  # tokens per training window
    eval_splits: list[str] | str = "auto"  # "auto": every non-train split in meta.json; or an explicit list
    eval_sequences: int = 64  # windows per eval split (the first ones, unshuffled; split over ranks); 0: no eval
    eval_batches: int | None = None  # alternative to eval_sequences: eval_batches * train.micro_batch_size windows
    prefetch: int = 2  # micro-batches prepared ahead in a background thread
    # shard content check against meta.json's sha256 (and token ids against the vocab) before training:
    # "cached": hash shards not verified before (a cache keyed by path, size and mtime); "always": hash every
    # shard (``depthbench train --verify-data``); "off": sizes only (out-of-vocab ids are still refused per batch)
    verify: str | bool = "cached"  # YAML reads a bare off/on as false/true: taken as "off"/"always"


@dataclass
class OptimConfig:
    """AdamW + linear warmup + cosine decay (the study's pretraining recipe)."""

    lr: float = 2e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    eps: float = 1e-8
    weight_decay: float = 0.1
    decay_norms_and_biases: bool = False  # True reproduces the reference (decay on everything but HC statics)
    grad_clip: float = 1.0  # global-norm clip; 0 disables
    warmup_fraction: float = 0.1  # of max_steps, used when warmup_steps is None
    warmup_steps: int | None = None
    min_lr_ratio: float = 0.1  # cosine ends at min_lr_ratio * lr


@dataclass
class TrainConfig:
    """Batch geometry, length, precision, evaluation and logging cadence."""

    global_batch_size: int = 32  # sequences per optimizer step, all ranks together
    micro_batch_size: int = 8  # sequences per forward/backward per rank
    max_steps: int | None = None  # optimizer steps; or derive from max_tokens
    max_tokens: int | None = None  # token budget -> ceil(max_tokens / (global_batch_size * seq_len)) steps
    stop_at_step: int | None = None  # checkpoint and stop after this step, keeping max_steps' schedule (time slices)
    seed: int = 42
    mixed_precision: str = "auto"  # "auto" (bf16 on a bf16-capable GPU, else fp32) | "no" | "bf16" | "fp16"
    cpu: bool = False  # force CPU (automatic when no GPU is present)
    parallelism: str = "auto"  # "auto" (FSDP2 under an accelerate FSDP launch config, else DDP) | "ddp" | "fsdp2"
    eval_every: int = 0  # steps between held-out evals (0: only at the end)
    log_every: int = 1  # steps between metrics.jsonl rows
    layer_stats_every: int = 0  # steps between layer-statistics captures (0: off)
    profile: bool = False  # measure time outside forward/backward/optimizer (adds device syncs)
    progress: bool = True  # tqdm progress bar on the main process
    # a signal that stops like SIGTERM/SIGINT (checkpoint on every rank, clean exit): the scheduler's pre-emption
    # warning, e.g. Slurm's ``#SBATCH --signal=USR1@90``; null: only SIGTERM/SIGINT
    preempt_signal: str | None = "SIGUSR1"


@dataclass
class CheckpointConfig:
    """Checkpoint cadence and retention."""

    every: int = 0  # steps between checkpoints (0: only at the end)
    keep_last: int = 2  # checkpoints kept (the newest); >= 1
    hf_export: bool = True  # also write an HF export (save_pretrained + tokenizer) into each checkpoint
    hash_files: bool = True  # sha256 every file into the manifest (verified on resume)


@dataclass
class TrackConfig:
    """Experiment tracking; metrics.jsonl is always written."""

    tensorboard: bool = False
    wandb: bool = False
    project: str = "depthbench"  # the W&B project (TensorBoard: the folder under <output_dir>/tensorboard)
    run_name: str | None = None  # the W&B run name; None: the output folder's name
    peak_flops: float | None = None  # per-device peak FLOP/s for MFU; None: a per-device default (GPUs only)


@dataclass
class RunConfig:
    """The whole run: see the module docstring for the file format."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    track: TrackConfig = field(default_factory=TrackConfig)
    output_dir: str = "runs/depthbench"
    resume: bool | str = False  # True: continue from the latest checkpoint; "auto": if one exists
    overwrite: bool = False  # start over in an output_dir that holds another run
    # seconds to wait while another live process trains into output_dir (its lease: depthbench.lease); 0: refuse
    wait_for_writer: float = 0.0

    @property
    def eval_sequences(self) -> int:
        """Windows evaluated per eval split (``data.eval_batches * train.micro_batch_size`` when that is set)."""
        if self.data.eval_batches is not None:
            return self.data.eval_batches * self.train.micro_batch_size
        return self.data.eval_sequences

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict (the content of ``run_config.json``'s ``config`` entry)."""
        return dataclasses.asdict(self)


# ================================================================================================ loading
def _from_dict(cls: type, data: dict[str, Any], where: str) -> Any:
    """Build dataclass ``cls`` from ``data``, recursing into dataclass-typed fields; unknown keys raise."""
    if not isinstance(data, dict):
        raise RunConfigError(f"{where or 'run config'} must be a mapping, got {type(data).__name__}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        name = f"{where}.{key}" if where else key
        if key not in known:
            raise RunConfigError(f"unknown config key {name!r}; valid keys here: {', '.join(known)}")
        default = getattr(cls(), key)
        if dataclasses.is_dataclass(default):
            value = _from_dict(type(default), value or {}, name)
        else:
            value = _coerce(value, typing.get_type_hints(cls)[key], name)
        kwargs[key] = value
    return cls(**kwargs)


YAML_BOOLEAN_SPELLINGS = {"train.mixed_precision": {False: "no"}}
"""String settings whose allowed values YAML 1.1 reads as booleans (``mixed_precision: no`` and
``train.mixed_precision=no`` arrive as ``False``): the string they spell."""


def _coerce(value: Any, hint: Any, name: str) -> Any:
    """Check ``value`` against the field's type hint; numbers given as strings (YAML reads ``3e-3`` as a string)
    are converted, booleans YAML made of a string value back into it (:data:`YAML_BOOLEAN_SPELLINGS`); non-finite
    numbers are refused. Raises :class:`RunConfigError` naming the key on a mismatch."""
    if isinstance(value, bool) and value in YAML_BOOLEAN_SPELLINGS.get(name, {}):
        value = YAML_BOOLEAN_SPELLINGS[name][value]
    value = _coerce_type(value, hint, name)
    _check_finite(value, name)
    return value


def _check_finite(value: Any, name: str) -> None:
    """Refuse NaN / infinity anywhere in ``value`` (nested dicts and lists too), naming the key."""
    if isinstance(value, float) and not math.isfinite(value):
        raise RunConfigError(f"{name}={value!r} is not allowed: numbers in the run config must be finite")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, f"{name}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_finite(item, f"{name}[{i}]")


def _coerce_type(value: Any, hint: Any, name: str) -> Any:
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise RunConfigError(f"{name} must not be null")
    for option in options:
        base = typing.get_origin(option) or option
        if base is bool and isinstance(value, bool):
            return value
        if base is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if base is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if base in (str, list, dict) and isinstance(value, base):
            return value
    for option in options:  # second pass: numeric strings
        if option in (int, float) and isinstance(value, str):
            with contextlib.suppress(ValueError):
                return option(value)
    allowed = " or ".join(getattr(o, "__name__", str(o)) for o in options)
    raise RunConfigError(f"{name}={value!r} has the wrong type: expected {allowed}")


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise RunConfigError(f"override {dotted!r}: {key!r} is not a section")
        node = child
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``"train.max_steps=100"`` -> ``("train.max_steps", 100)`` (the value is parsed as YAML)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise RunConfigError(f"override {text!r} is not of the form section.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise RunConfigError(f"override {text!r}: cannot parse value: {exc}") from exc
    return key.strip(), value


SHIPPED_RUN_FILES = ("400m.yaml", "demo.yaml")
"""The run files installed with the package (``src/depthbench/configs/``): the study's recipe and the CPU demo's."""


def shipped_run_file(name: str) -> str | None:
    """The path of the installed run file ``name`` (one of :data:`SHIPPED_RUN_FILES`), else ``None``."""
    if name not in SHIPPED_RUN_FILES:
        return None
    from importlib import resources

    path = resources.files("depthbench").joinpath("configs", name)
    return str(path) if path.is_file() else None


def read_config_file(path: str) -> dict[str, Any]:
    """Read a YAML (``.yaml``/``.yml``) or JSON run file into a dict. A bare name of :data:`SHIPPED_RUN_FILES`
    (``-c 400m.yaml``) that is not a file in the working directory reads the run file installed with the package."""
    if not os.path.isfile(path):
        path = shipped_run_file(path) or path
    if not os.path.isfile(path):
        raise RunConfigError(f"run config file {path!r} does not exist (the installed run files can be named "
                             f"without a path: {', '.join(SHIPPED_RUN_FILES)})")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise RunConfigError(f"cannot parse run config file {path!r}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RunConfigError(f"run config file {path!r} must hold a mapping at top level")
    if "config" in data and isinstance(data["config"], dict) and "resolved" in data:  # a saved run_config.json
        data = data["config"]
    return data


def load_run_config(path_or_dict: str | os.PathLike | dict[str, Any] | None = None,
                    overrides: list[str] | None = None) -> RunConfig:
    """Load a run config from a YAML/JSON file (or a dict, or nothing = defaults) and apply dotted overrides.

    Args:
        path_or_dict: Path of a YAML/JSON run file (also accepts a saved ``run_config.json``), a nested dict, or
            ``None`` for all defaults.
        overrides: ``section.key=value`` strings applied in order (values parsed as YAML).

    Returns:
        The validated :class:`RunConfig`.

    Raises:
        RunConfigError: Unknown keys, unparsable files or values, or invalid settings.
    """
    if path_or_dict is None:
        tree: dict[str, Any] = {}
    elif isinstance(path_or_dict, dict):
        tree = json.loads(json.dumps(path_or_dict))  # deep copy, and rejects non-JSON values early
    else:
        tree = read_config_file(os.fspath(path_or_dict))
    for item in overrides or []:
        key, value = parse_override(item)
        _set_dotted(tree, key, value)
    model = tree.get("model")
    if isinstance(model, dict) and model.get("init_from") and "arch" not in model:
        model["arch"] = None  # the init folder's architecture (not the default pre_ln)
    cfg = _from_dict(RunConfig, tree, "")
    validate_run_config(cfg)
    return cfg


def validate_run_config(cfg: RunConfig) -> None:
    """Check values that do not need the data or the model; raise :class:`RunConfigError` naming the key."""

    def check(ok: bool, key: str, value: Any, allowed: str) -> None:
        if not ok:
            raise RunConfigError(f"{key}={value!r} is not allowed: {key} must be {allowed}")

    def positive_int(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value > 0

    t, o, d, c = cfg.train, cfg.optim, cfg.data, cfg.checkpoint
    check(positive_int(t.global_batch_size), "train.global_batch_size", t.global_batch_size, "a positive integer")
    check(positive_int(t.micro_batch_size), "train.micro_batch_size", t.micro_batch_size, "a positive integer")
    check(t.max_steps is None or positive_int(t.max_steps), "train.max_steps", t.max_steps, "a positive integer")
    check(t.max_tokens is None or positive_int(t.max_tokens), "train.max_tokens", t.max_tokens, "a positive integer")
    check(not (t.max_steps and t.max_tokens), "train.max_tokens", t.max_tokens,
          "unset when train.max_steps is set (give a step count or a token budget, not both)")
    check(t.stop_at_step is None or positive_int(t.stop_at_step), "train.stop_at_step", t.stop_at_step,
          "a positive integer")
    check(t.mixed_precision in ("auto", "no", "bf16", "fp16"), "train.mixed_precision", t.mixed_precision,
          "one of auto, no, bf16, fp16")
    check(t.parallelism in PARALLELISMS, "train.parallelism", t.parallelism, f"one of {', '.join(PARALLELISMS)}")
    for key in ("eval_every", "log_every", "layer_stats_every"):
        value = getattr(t, key)
        check(isinstance(value, int) and value >= 0, f"train.{key}", value, "an integer >= 0")
    check(positive_int(d.seq_len), "data.seq_len", d.seq_len, "a positive integer")
    check(isinstance(d.eval_sequences, int) and d.eval_sequences >= 0, "data.eval_sequences", d.eval_sequences,
          "an integer >= 0")
    check(d.eval_batches is None or (isinstance(d.eval_batches, int) and d.eval_batches >= 0), "data.eval_batches",
          d.eval_batches, "null or an integer >= 0")
    check(d.eval_splits == "auto" or isinstance(d.eval_splits, list), "data.eval_splits", d.eval_splits,
          '"auto" or a list of split names')
    check(o.lr > 0, "optim.lr", o.lr, "positive")
    check(len(o.betas) == 2 and all(0 <= b < 1 for b in o.betas), "optim.betas", o.betas, "two numbers in [0, 1)")
    check(o.eps > 0, "optim.eps", o.eps, "positive")
    check(o.weight_decay >= 0, "optim.weight_decay", o.weight_decay, ">= 0")
    check(o.grad_clip >= 0, "optim.grad_clip", o.grad_clip, ">= 0 (0 disables clipping)")
    check(0 <= o.warmup_fraction < 1, "optim.warmup_fraction", o.warmup_fraction, "in [0, 1)")
    check(o.warmup_steps is None or (isinstance(o.warmup_steps, int) and o.warmup_steps >= 0), "optim.warmup_steps",
          o.warmup_steps, "an integer >= 0")
    check(0 <= o.min_lr_ratio <= 1, "optim.min_lr_ratio", o.min_lr_ratio, "in [0, 1]")
    check(isinstance(c.every, int) and c.every >= 0, "checkpoint.every", c.every, "an integer >= 0")
    check(positive_int(c.keep_last), "checkpoint.keep_last", c.keep_last, "a positive integer")
    check(cfg.resume in (True, False, "auto"), "resume", cfg.resume, 'true, false or "auto"')
    check(not (cfg.resume is True and cfg.overwrite), "overwrite", cfg.overwrite, "false when resume is true")
    check(isinstance(cfg.wait_for_writer, (int, float)) and not isinstance(cfg.wait_for_writer, bool)
          and cfg.wait_for_writer >= 0, "wait_for_writer", cfg.wait_for_writer, "a number of seconds >= 0")
    check(cfg.model.compile_scope in COMPILE_SCOPES, "model.compile_scope", cfg.model.compile_scope,
          f"one of {', '.join(COMPILE_SCOPES)}")
    check(not (cfg.model.init_from and cfg.model.config_path), "model.config_path", cfg.model.config_path,
          "unset when model.init_from is set (the init folder's config.json describes the model)")
    check(isinstance(cfg.model.fields, dict), "model.fields", cfg.model.fields, "a mapping of config fields")
    if isinstance(d.verify, bool):
        d.verify = "always" if d.verify else "off"
    check(d.verify in ("cached", "always", "off"), "data.verify", d.verify, "one of cached, always, off")
    check(t.preempt_signal is None or signal_number(t.preempt_signal) is not None, "train.preempt_signal",
          t.preempt_signal, "null or a signal name of this system such as SIGUSR1, SIGUSR2, SIGHUP")


def signal_number(name: Any) -> int | None:
    """The number of signal ``name`` ("SIGUSR1" or "USR1"); ``None`` if this system has no such signal (SIGKILL
    and SIGSTOP cannot be caught and count as unknown)."""
    if not isinstance(name, str):
        return None
    text = name.strip().upper()
    text = text if text.startswith("SIG") else "SIG" + text
    number = getattr(signal, text, None)
    if not isinstance(number, signal.Signals) or text in ("SIGKILL", "SIGSTOP"):
        return None
    return int(number)
