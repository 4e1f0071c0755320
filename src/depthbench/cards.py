"""Model cards: every card depthbench writes is one of the Jinja templates of ``model_cards/``, filled here.

* ``depthbench_model_card.md``: the card of an HF export (:func:`write_card`, :func:`card_files`);
* ``sft_model_card.md``: the card of a ``depthbench sft`` output folder (:func:`write_sft_card`);
* ``evaluated_model_card.md``: the card ``depthbench eval`` starts for a model folder that has none
  (:func:`evaluated_card`; :mod:`depthbench.evaluation.cards` then records the results in it).

Every HF export depthbench writes carries a card (the checkpointer calls :func:`write_card`; ``depthbench publish``
re-renders it with the finished run's summary; ``depthbench convert`` names the source checkpoint). The card is
built with huggingface_hub's own machinery: ``ModelCardData`` for the YAML header (license, tags, datasets,
``model-index`` with :class:`huggingface_hub.EvalResult` rows) and ``ModelCard.from_template`` for the Jinja body,
so it loads back with ``ModelCard.load`` / ``huggingface_hub.metadata_load``.

What goes in (all read from files, never from the training process): the architecture from the registry (name,
paper, the config class docstring as the paragraph on the residual design), the shape from the export's
``config.json`` (L, d, d/L, heads, parameter counts with the architecture's extra parameters and the budget label
of the repository name), the recipe from the run's ``run_config.json`` (tokens, steps, LR, warmup, batch, seed),
the training data from the data folder's ``meta.json`` (Hub dataset ids as ``datasets`` metadata; local files and
tokenizers by name, never a local path), the final train loss and held-out losses from ``summary.json`` (or the
last rows of ``metrics.jsonl`` while the run is still going; for a ``step-NNNNNN`` revision only what was logged up
to that step), a loss-curve PNG from ``metrics.jsonl``, optional lm-eval results (``lm_eval`` JSON output) and
those ``depthbench eval`` recorded as ``model-index`` entries and the "Evaluation results" table, which say when a
result comes from local copies or a subset (:mod:`depthbench.eval_records`).

    from depthbench.cards import write_card
    write_card("runs/hc/final", run_dir="runs/hc", repo_id="aspect-ratio-scaling/hc-lr3e-3-llama-2M-L4-pretrain")
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from depthbench import atomic, eval_records, runs

CARD_TEMPLATE = "depthbench_model_card.md"
SFT_CARD_TEMPLATE = "sft_model_card.md"
EVALUATED_CARD_TEMPLATE = "evaluated_model_card.md"
LOSS_CURVE = "loss_curve.png"
LICENSE = "apache-2.0"
STUDY_ARXIV = "2609.32534"


@dataclass
class CardInputs:
    """Everything a card is built from; :func:`collect_inputs` reads it from an export folder and a run folder."""

    model_config: dict
    run_config: dict | None = None
    summary: dict | None = None
    metrics: list[dict] = field(default_factory=list)
    lm_eval: dict | None = None  # lm-eval's results JSON ({"results": {task: {"acc,none": ...}}})
    source: dict | None = None  # {"repo": ..., "step": ...} for converted checkpoints
    notes: list[str] = field(default_factory=list)  # conversion notes (readout evidence, dtype, ...)
    recorded: list = field(default_factory=list)  # EvalResult rows already in the export's card (depthbench eval)
    upcycle: dict | None = None  # depthbench upcycle's report (source model, revision, license, start, growth)


def template_text(name: str = CARD_TEMPLATE) -> str:
    """The Jinja card template ``name`` shipped in ``model_cards/`` (installed as ``depthbench.model_cards``)."""
    from importlib import resources

    return resources.files("depthbench.model_cards").joinpath(name).read_text(encoding="utf-8")


def revision_step(revision: str | None) -> int | None:
    """The training step of a checkpoint branch ``step-NNNNNN`` (``None`` for ``main`` or no revision)."""
    match = re.fullmatch(r"step-(\d+)", revision or "")
    return int(match[1]) if match else None


def collect_inputs(export_dir: str, run_dir: str | None = None, step: int | None = None, **extra) -> CardInputs:
    """Read the export's ``config.json`` and, if given, the run's ``run_config.json``/``summary.json``/metrics;
    for the checkpoint at ``step`` only what was logged up to that step (the run's summary only if it ended
    there), so an intermediate checkpoint's card never shows the final model's losses."""
    model_config = atomic.read_json(os.path.join(export_dir, "config.json"))
    if model_config is None:
        raise ValueError(f"{export_dir} has no config.json: a model card needs the exported model's config")
    inputs = CardInputs(model_config=model_config, **extra)
    inputs.recorded = recorded_results(export_dir)
    if run_dir:
        inputs.run_config = atomic.read_json(os.path.join(run_dir, runs.RUN_CONFIG))
        inputs.summary = atomic.read_json(os.path.join(run_dir, runs.SUMMARY))
        inputs.metrics = runs.read_metrics(run_dir)
        if step is not None:
            inputs.metrics = [r for r in inputs.metrics if r.get("step", 0) <= step]
            if (inputs.summary or {}).get("steps") != step:
                inputs.summary = None
    return inputs


def recorded_results(export_dir: str) -> list:
    """``model-index`` rows of the card already in ``export_dir`` (e.g. written by ``depthbench eval``), so that
    rebuilding or publishing the card keeps them."""
    path = os.path.join(export_dir, "README.md")
    if not os.path.isfile(path):
        return []
    from huggingface_hub import ModelCard

    try:
        return list(ModelCard.load(path).data.eval_results or [])
    except Exception:  # a hand-edited card that no longer parses: rebuilt from the run's own files alone
        return []


def arch_for(model_config: dict):
    from depthbench.registry import ARCHITECTURES

    model_type = model_config.get("model_type")
    for arch in ARCHITECTURES.values():
        if arch.model_type == model_type:
            return arch
    raise ValueError(f"model_type {model_type!r} is not a depthbench architecture; "
                     f"known: {', '.join(a.model_type for a in ARCHITECTURES.values())}")


def shape_table(arch, model_config: dict) -> dict:
    """The shape table's values; the total parameter count carries the budget label of the repository name
    (:func:`depthbench.repo_names.format_budget`), so the card and the name agree."""
    from depthbench.repo_names import format_budget

    config = arch.config_class.from_dict({k: v for k, v in model_config.items() if k not in ("auto_map",)})
    counts = config.parameter_counts()
    L, d = config.num_hidden_layers, config.hidden_size
    return {"L": L, "d": d, "d_over_l": f"{d / L:.2f}", "heads": config.num_attention_heads,
            "kv_heads": config.num_key_value_heads, "head_dim": config.head_dim, "f": config.intermediate_size,
            "vocab": config.vocab_size, "total": f"{counts['total']:,} ({format_budget(counts['total'])})",
            "extra": f"{counts['extra']:,}", "counts": counts}


def training_data(inputs: CardInputs) -> tuple[list[str], str | None]:
    """``(datasets, description)`` of the run's training data, from its data folder's ``meta.json`` (written by
    ``depthbench prepare-data``): the Hub dataset ids it was read from, else the folder's name for local files,
    as the card's ``datasets`` metadata, and the card's "data" row. Never a local absolute path: local files and
    tokenizers are named by their file or folder name."""
    data_dir = (((inputs.run_config or {}).get("config") or {}).get("data") or {}).get("data_dir")
    if not data_dir:
        return [], None
    folder = os.path.basename(os.path.normpath(data_dir))
    meta = atomic.read_json(os.path.join(data_dir, runs.DATA_META)) or {}
    sources = [s for s in meta.get("sources") or [] if isinstance(s, dict) and s.get("path")]
    hub = list(dict.fromkeys(s["path"] for s in sources if s.get("kind") == "hf"))
    local = list(dict.fromkeys(os.path.basename(s["path"]) for s in sources if s.get("kind") != "hf"))
    parts = [f"`{h}` (Hub dataset)" for h in hub]
    if local:
        parts.append("local files " + ", ".join(f"`{name}`" for name in local))
    tokenizer = meta.get("tokenizer")
    if tokenizer and not tokenizer.startswith("<"):
        local_tok = os.path.isabs(tokenizer) or os.path.exists(tokenizer)
        parts.append(f"tokenizer `{os.path.basename(os.path.normpath(tokenizer)) if local_tok else tokenizer}`")
    names = hub + ([folder] if local or not hub else [])
    return names, f"`{folder}`" + (f": {'; '.join(parts)}" if parts else "")


def _last_eval(inputs: CardInputs) -> tuple[float | None, dict[str, float], int | None]:
    """(final train loss, {split: held-out loss}, step) from summary.json, else the newest metrics rows."""
    last_logged = max((r.get("step", 0) for r in inputs.metrics), default=0)
    if inputs.summary and (inputs.summary.get("steps") or 0) >= last_logged:  # else a resumed run moved on
        return (inputs.summary.get("final_train_loss"), dict(inputs.summary.get("eval") or {}),
                inputs.summary.get("steps"))
    train_loss, evals, step = None, {}, None
    for row in inputs.metrics:
        if "train/loss" in row:
            train_loss, step = row["train/loss"], row.get("step", step)
        for key, value in row.items():
            if key.startswith("eval/") and key.endswith("/loss"):
                evals[key[len("eval/"):-len("/loss")]] = value
    return train_loss, evals, step


def _recipe(inputs: CardInputs) -> list[dict]:
    rc = inputs.run_config
    if not rc:
        return []
    cfg, resolved = rc.get("config", {}), rc.get("resolved", {})
    optim, train, data = cfg.get("optim", {}), cfg.get("train", {}), cfg.get("data", {})
    steps = resolved.get("max_steps") or train.get("max_steps")
    tokens_per_step = resolved.get("tokens_per_step")
    rows = [
        ("tokens", f"{steps * tokens_per_step:,}" if steps and tokens_per_step else None),
        ("optimizer steps", steps),
        ("global batch (sequences x length)", f"{train.get('global_batch_size')} x {data.get('seq_len')}"),
        ("peak learning rate", optim.get("lr")),
        ("schedule", f"linear warmup {resolved.get('warmup_steps')} steps, cosine to "
                     f"{optim.get('min_lr_ratio')} x peak"),
        ("optimizer", f"AdamW betas {optim.get('betas')}, eps {optim.get('eps')}, weight decay "
                      f"{optim.get('weight_decay')}, clip {optim.get('grad_clip')}"),
        ("precision", resolved.get("mixed_precision")),
        ("seed", train.get("seed")),
        ("data", training_data(inputs)[1]),
    ]
    return [{"name": n, "value": v} for n, v in rows if v is not None]


def eval_results(inputs: CardInputs, model_name: str) -> list:
    """``model-index`` rows: held-out LM losses of the run plus any lm-eval metrics (``EvalResult`` objects)."""
    from huggingface_hub import EvalResult

    _, evals, _ = _last_eval(inputs)
    results = [EvalResult(task_type="text-generation", task_name="Language modeling", dataset_type=split,
                          dataset_name=f"held-out {split}", dataset_split=split, metric_type="loss",
                          metric_name="cross-entropy loss (nats/token)", metric_value=round(float(loss), 6),
                          source_name="depthbench train (arXiv 2609.32534)",
                          source_url=f"https://arxiv.org/abs/{STUDY_ARXIV}")
               for split, loss in sorted(evals.items()) if loss is not None]
    for task, metrics in sorted(((inputs.lm_eval or {}).get("results") or {}).items()):
        provenance = eval_records.provenance(inputs.lm_eval, task)  # local copies, subsets: said in the entry
        for key, value in sorted(metrics.items()):
            name, _, _filter = key.partition(",")
            if not isinstance(value, (int, float)) or name.endswith("_stderr") or name == "alias":
                continue
            entry = EvalResult(task_type="text-generation", task_name=task, dataset_type=task, dataset_name=task,
                               metric_type=name, metric_value=float(value), source_name="lm-evaluation-harness",
                               source_url=eval_records.LM_EVAL_URL)
            results.append(eval_records.mark(entry, provenance))
    fresh = {(r.dataset_name, r.metric_type) for r in results}
    return results + [r for r in inputs.recorded if (r.dataset_name, r.metric_type) not in fresh]


def plot_loss_curve(metrics: list[dict], path: str) -> str | None:
    """Train (and held-out) loss against step as a PNG at ``path``; ``None`` when there are no loss rows."""
    train = [(r["step"], r["train/loss"]) for r in metrics if "train/loss" in r and "step" in r]
    if not train:
        return None
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
    ax.plot(*zip(*train), label="train", lw=1)
    splits = sorted({k for r in metrics for k in r if k.startswith("eval/") and k.endswith("/loss")})
    for key in splits:
        points = [(r["step"], r[key]) for r in metrics if key in r]
        ax.plot(*zip(*points), marker="o", ms=3, label=key[5:-5])
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def render_card(inputs: CardInputs, repo_id: str | None = None, revision: str | None = None,
                loss_curve: str | None = None):
    """The :class:`huggingface_hub.ModelCard` for ``inputs`` (``repo_id`` names the model in the card)."""
    from huggingface_hub import ModelCard, ModelCardData

    arch = arch_for(inputs.model_config)
    shape = shape_table(arch, inputs.model_config)
    if repo_id is None:
        from depthbench.repo_names import default_repo_name

        repo_id = default_repo_name(arch.id, shape["counts"]["total"], shape["L"], _lr(inputs))
    train_loss, evals, step = _last_eval(inputs)
    losses = []
    if train_loss is not None:
        losses.append({"name": f"final train loss{f' (step {step})' if step is not None else ''}",
                       "value": f"{train_loss:.4f}"})
    losses += [{"name": f"held-out loss, {split}", "value": f"{v:.4f}"} for split, v in sorted(evals.items())]
    if len(evals) > 1:
        losses.append({"name": "held-out loss, mean of splits", "value": f"{sum(evals.values()) / len(evals):.4f}"})
    name = arch.description.split(":")[0]
    results = eval_results(inputs, repo_id.split("/")[-1])
    upcycled = (inputs.upcycle or {}).get("source") or {}
    base_model = inputs.source["repo"] if inputs.source and "/" in str(inputs.source.get("repo")) else None
    if upcycled and "/" in str(upcycled.get("name")) and " " not in str(upcycled.get("name")):
        base_model = upcycled["name"]
    license_ = upcycled.get("license") or ("other" if upcycled else LICENSE)  # an upcycle keeps its source's
    data = ModelCardData(
        language="en", license=license_, library_name="transformers", pipeline_tag="text-generation",
        tags=["depthbench", f"depthbench-{arch.id}", "residual-connections", "custom_code", f"arxiv:{STUDY_ARXIV}",
              f"arxiv:{arch.arxiv}"],
        model_name=repo_id.split("/")[-1], eval_results=results or None,
        datasets=training_data(inputs)[0] or None,
        base_model=base_model,
    )
    context = {
        "model_id": repo_id, "load_repo": repo_id, "load_revision": revision, "depthbench_version": _package_version(),
        "arch": {"id": arch.id, "name": name, "paper_url": arch.paper_url, "card": arch.card.split("\nArgs:")[0]},
        "shape": shape, "recipe": _recipe(inputs), "losses": losses, "loss_curve": loss_curve,
        "source": inputs.source, "notes": inputs.notes, "upcycle": inputs.upcycle,
        "eval_section": eval_records.section(results),
        "revision_note": (f"This is the intermediate checkpoint at `{revision}` (branch of the repository); "
                          f"the `main` branch holds the final model.") if revision and revision != "main" else None,
    }
    return ModelCard.from_template(data, template_str=template_text(), **context)


def _package_version() -> str:
    """The installed depthbench's version (its metadata, which setup.py takes from ``depthbench.__version__``)."""
    from importlib.metadata import version

    return version("depthbench")


def _lr(inputs: CardInputs) -> float | None:
    if inputs.run_config:
        return inputs.run_config.get("config", {}).get("optim", {}).get("lr")
    return None


def write_card(export_dir: str, run_dir: str | None = None, repo_id: str | None = None,
               revision: str | None = None, **extra) -> str:
    """Write ``README.md`` (and ``loss_curve.png`` when the run has metrics) into ``export_dir``; returns the path.

    ``run_dir`` is the training run's folder (recipe, losses, curve); ``extra`` goes to :class:`CardInputs`
    (``source``, ``notes``, ``lm_eval``).
    """
    inputs = collect_inputs(export_dir, run_dir, step=revision_step(revision), **extra)
    curve = plot_loss_curve(inputs.metrics, os.path.join(export_dir, LOSS_CURVE)) if inputs.metrics else None
    card = render_card(inputs, repo_id=repo_id, revision=revision, loss_curve=LOSS_CURVE if curve else None)
    path = os.path.join(export_dir, "README.md")
    card.save(path)
    return path


def card_files(export_dir: str, run_dir: str | None, repo_id: str, revision: str | None = None,
               lm_eval: dict | None = None) -> dict[str, bytes]:
    """``{"README.md": ..., "loss_curve.png": ...}`` rendered in memory (``depthbench publish`` uploads these
    instead of the export's own card, without writing into the run folder)."""
    import tempfile

    inputs = collect_inputs(export_dir, run_dir, step=revision_step(revision), lm_eval=lm_eval)
    out: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        curve = plot_loss_curve(inputs.metrics, os.path.join(tmp, LOSS_CURVE)) if inputs.metrics else None
        if curve:
            with open(curve, "rb") as f:
                out[LOSS_CURVE] = f.read()
        card = render_card(inputs, repo_id=repo_id, revision=revision, loss_curve=LOSS_CURVE if curve else None)
    out["README.md"] = str(card).encode("utf-8")
    return out


def write_sft_card(out_dir: str | os.PathLike, base_model: str, data: str, summary: dict) -> Path:
    """The card of a fine-tuned folder (``model_cards/sft_model_card.md``) naming its base model and data (a local
    base or data file is not Hub metadata); ``summary`` is ``sft_summary.json``'s content."""
    from huggingface_hub import ModelCard, ModelCardData

    base = str(Path(base_model).resolve()) if Path(base_model).exists() else base_model
    data_card = ModelCardData(library_name="transformers", pipeline_tag="text-generation", base_model=None
                              if Path(base_model).exists() else base_model,
                              datasets=[data] if not Path(data).exists() else None, tags=["depthbench", "sft"],
                              model_name=Path(out_dir).resolve().name)
    card = ModelCard.from_template(data_card, template_str=template_text(SFT_CARD_TEMPLATE),
                                   model_name=data_card.model_name, base=base,
                                   data=data, rows=summary.get("rows"), epochs=summary.get("epochs"),
                                   steps=summary.get("steps"), loss=summary.get("final_train_loss"))
    path = Path(out_dir) / "README.md"
    card.save(str(path))
    return path


def evaluated_card(model_name: str):
    """A minimal :class:`huggingface_hub.ModelCard` (``model_cards/evaluated_model_card.md``) for a model folder
    that has no card yet, for ``depthbench eval`` to record its results in."""
    from huggingface_hub import ModelCard, ModelCardData

    return ModelCard.from_template(ModelCardData(library_name="transformers", pipeline_tag="text-generation"),
                                   template_str=template_text(EVALUATED_CARD_TEMPLATE), model_name=model_name)
