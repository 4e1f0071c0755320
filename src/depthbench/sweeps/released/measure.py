"""One release measured: the tokenizer check, the conversion, the held-out loss and the lm-eval tasks; and all of
a selection, resumably, with the folder's report."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from depthbench import atomic, runs
from depthbench.errors import Failed
from depthbench.hub.catalogue import CatalogueError, load_published, published_loss
from depthbench.hub.convert import CONVERSION_RECORD
from depthbench.sweeps.released.selection import Target


class ReleasesFailed(Failed):
    """Some releases could not be measured (the message names each and why; the others are saved)."""


# ================================================================================================ one release
@dataclass
class Measurement:
    """How every release of a folder is measured (recorded in ``sweep.json``: one folder, one setting)."""

    data: str
    split: str = "eval"
    seq_len: int | None = None
    max_tokens: int | None = None
    batch_size: int = 8
    device: str | None = None
    dtype: str = "auto"
    step: int | None = None

    def resolved_dtype(self) -> str:
        import torch

        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if self.device_name().startswith("cuda") and torch.cuda.is_bf16_supported() else "float32"

    def device_name(self) -> str:
        import torch

        return self.device or ("cuda" if torch.cuda.is_available() else "cpu")

    def record(self, content_hash: str | None) -> dict[str, Any]:
        return {"data": os.path.abspath(self.data), "content_hash": content_hash, "split": self.split,
                "seq_len": self.seq_len, "max_tokens": self.max_tokens, "dtype": self.resolved_dtype(),
                "step": self.step}


@dataclass
class Hub:
    """Where releases come from and where their conversions are kept (``None``: huggingface_hub's defaults)."""

    endpoint: str | None = None
    hub_cache_dir: str | None = None
    cache_dir: str | None = None
    readout: str | None = None  # HC/mHC: None = decided per release from the evidence (depthbench convert)


def fetch_release_meta(target: Target, hub: Hub) -> tuple[str, int | None, str]:
    """Download only the release's ``tokenizer/`` and its checkpoint's ``config.json`` (for the tokenizer and shape
    checks before any weights); returns ``(local snapshot, step, config path)``. The step is the target's, or the
    newest the repository has; a repository storing one final checkpoint at its root (``config.json`` +
    ``model_and_optim/``) is read there (its step: the config's final step)."""
    import re

    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import RepositoryNotFoundError

    from depthbench.hub.release_files import root_final_step

    try:
        files = HfApi(endpoint=hub.endpoint).list_repo_files(target.repo)
    except RepositoryNotFoundError:
        raise CatalogueError(f"{target.repo} is not on the Hub ({hub.endpoint or 'huggingface.co'}); the name comes "
                             f"from the catalogue ({_lr_source(target)}): look it up on "
                             "https://huggingface.co/aspect-ratio-scaling and pass --repo NAME") from None
    steps = sorted({int(m[1]) for f in files if (m := re.match(r"^step(\d+)/", f))})
    if not steps and "config.json" in files and "model_and_optim/.metadata" in files:
        local = snapshot_download(target.repo, allow_patterns=["tokenizer/*", "config.json"],
                                  endpoint=hub.endpoint, cache_dir=hub.hub_cache_dir)
        config = os.path.join(local, "config.json")
        final = root_final_step(config)
        if target.step is not None and final is not None and target.step != final:
            raise CatalogueError(f"{target.repo} stores one final checkpoint at its root (step {final}), not step "
                                 f"{target.step}")
        return local, final, config
    step = target.step if target.step is not None else (steps[-1] if steps else None)
    if step is None or step not in steps:
        raise CatalogueError(f"{target.repo} has no step{step}/ folder; its steps: "
                             f"{', '.join(map(str, steps)) or 'none (and no checkpoint at the repository root)'}")
    local = snapshot_download(target.repo, allow_patterns=["tokenizer/*", f"step{step}/config.json"],
                              endpoint=hub.endpoint, cache_dir=hub.hub_cache_dir)
    return local, step, os.path.join(local, f"step{step}", "config.json")


def _lr_source(target: Target) -> str:
    return target.release.sources.get("lr", "") if target.release else "the name you passed"


def _convert(target: Target, step: int, dtype: str, hub: Hub):
    """The release as a depthbench model, converted once into the cache of ``depthbench.from_released``."""
    import torch

    from depthbench.hub.convert import from_released

    return from_released(target.repo, step=step, cache_dir=hub.cache_dir, readout=hub.readout,
                         endpoint=hub.endpoint, hub_cache_dir=hub.hub_cache_dir, dtype=getattr(torch, dtype))


def check_shape(target: Target, config: dict[str, Any]) -> None:
    """Refuse a release whose ``config.json`` shape (width, depth, heads) is not its catalogue entry's, naming both
    (checked before any weights are downloaded); nothing to check when the target has no entry of a grid shape."""
    from depthbench.hub.listing import config_shape

    entry = target.release.grid_shape() if target.release else None
    if entry is None and target.grid:
        from depthbench.shapes import get_grid

        entry = get_grid(target.grid).shape(target.depth)
    if entry is None:
        return
    got = config_shape(config or {})
    want = {"d": entry.hidden_size, "L": entry.num_layers, "heads": entry.num_attention_heads}
    bad = [k for k in want if got.get(k) is not None and got[k] != want[k]]
    if bad:
        have = ", ".join(f"{k}={got.get(k)}" for k in want)
        expected = ", ".join(f"{k}={v}" for k, v in want.items())
        raise CatalogueError(f"{target.repo}: its config.json has {have}, but the catalogue entry it was matched to "
                             f"({target.arch} {target.shape}) has {expected}; `depthbench released sync` matches "
                             "repositories to entries by their config.json")


def measure_release(target: Target, run_dir: str, m: Measurement, hub: Hub, shards, *,
                    tokens_per_step: int | None, log) -> dict[str, Any]:
    """Check the tokenizer, convert, link ``final/``, measure the held-out loss; returns the new summary."""
    import torch
    from tqdm.auto import tqdm

    from depthbench.sweeps.heldout import check_tokenizer, heldout_loss
    from depthbench.sweeps.released.folder import link_model, write_run_config, write_summary

    local, step, config_path = fetch_release_meta(target, hub)
    release_config = atomic.read_json(config_path)
    check_shape(target, release_config)
    check = check_tokenizer(shards, target.repo, os.path.join(local, "tokenizer"), release_config)
    log(f"  tokenizer {check['status']}: {check['detail']}")
    dtype, device = m.resolved_dtype(), m.device_name()
    where = "the root checkpoint" if step is None else f"step{step}"
    log(f"  converting {where} (download + conversion once; cached by depthbench.from_released)")
    model = _convert(target, step, dtype, hub).to(device)
    os.makedirs(run_dir, exist_ok=True)
    link_model(model.name_or_path, os.path.join(run_dir, runs.FINAL))
    config = model.config
    counts = config.parameter_counts() if hasattr(config, "parameter_counts") else {
        "total": sum(p.numel() for p in model.parameters())}
    conversion = atomic.read_json(os.path.join(model.name_or_path, CONVERSION_RECORD))
    write_run_config(run_dir, target, step, config.to_dict(), counts, conversion)
    seq_len = m.seq_len or int(config.max_position_embeddings)
    with tqdm(desc=f"  held-out loss ({seq_len}-token windows)", unit="window", dynamic_ncols=True) as bar:
        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        result = heldout_loss(model, shards, seq_len, max_tokens=m.max_tokens, batch_size=m.batch_size,
                              progress=progress)
    extra = {"data": os.path.abspath(shards.data_dir), "split": shards.split,
             "content_hash": shards.meta.get("content_hash"), "dtype": dtype, "device": device,
             "tokenizer": check}
    summary = write_summary(run_dir, target, step, shards.split, result, extra, tokens_per_step)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    log(f"  held-out loss {result['loss']:.4f} over {result['tokens']:,} tokens ({result['seconds']:.0f}s)")
    return summary


@dataclass
class Tasks:
    """The lm-eval tasks to run on every release after its held-out loss (``names`` empty: none)."""

    names: list[str]
    limit: float | None = None
    batch_size: int | str = 8
    data_dir: str | None = None
    include_path: str | None = None

    def check(self) -> None:
        """Refuse unknown task names before anything is downloaded."""
        if self.names:
            from depthbench.evaluation.harness import task_manager

            task_manager(self.names, {}, self.include_path)

    def run(self, run_dir: str, m: Measurement, log) -> None:
        from depthbench.evaluation.harness import evaluate_checkpoint

        evaluate_checkpoint(run_dir, self.names, limit=self.limit, batch_size=self.batch_size,
                            device=m.device_name(), dtype=m.resolved_dtype(), data_dir=self.data_dir,
                            include_path=self.include_path, log=log)


def evaluate_releases(targets: list[Target], out_dir: str, m: Measurement, hub: Hub, tasks: Tasks | None = None,
                      *, batch: dict[str, Any] | None = None, published: dict[str, Any] | None = None,
                      log=print) -> dict[str, str]:
    """Measure every target into ``out_dir`` (finished ones are skipped), then write the folder's results,
    plot and report with the study's published figures beside the re-measured ones; returns the paths written.
    ``batch`` (the catalogue's ``{"sequences", "seq_len"}``) gives each release's training tokens (step x batch).

    Raises :class:`~depthbench.sweeps.heldout.TokenizerMismatch` at once (nothing of the weights downloaded), and
    :class:`ReleasesFailed` at the end when some releases could not be measured (the others are saved).
    """
    from depthbench.evaluation.harness import EvalError
    from depthbench.sweeps.heldout import TokenizerMismatch, open_heldout
    from depthbench.sweeps.released.compare import print_comparison, write_published_section
    from depthbench.sweeps.released.folder import claim_folder
    from depthbench.sweeps.report import write_report

    tasks = tasks or Tasks([])
    tasks.check()
    figures = load_published() if published is None else published
    shards = open_heldout(m.data, m.split)
    claim_folder(out_dir, targets, m.record(shards.meta.get("content_hash")), m.data, batch)
    tokens_per_step = batch["sequences"] * batch["seq_len"] if batch else None
    failures: list[str] = []
    for k, target in enumerate(targets, 1):
        run_dir = os.path.join(out_dir, runs.RUNS, str(target.run_id))
        summary = runs.read_summary(run_dir)
        if summary and summary.get("status") == "finished" and runs.final_dir(run_dir):
            loss = next(iter((summary.get("eval") or {}).values()), float("nan"))
            log(f"[{k}/{len(targets)}] {target.repo}: measured earlier (held-out loss {loss:.4f}), skipped")
        else:
            step = "the newest step" if target.step is None else f"step {target.step}"
            log(f"[{k}/{len(targets)}] {target.repo} ({target.shape}, {step})")
            try:
                summary = measure_release(target, run_dir, m, hub, shards, tokens_per_step=tokens_per_step, log=log)
                theirs = published_loss(figures, target.arch, target.grid, target.depth)
                if theirs is not None:
                    log(f"  the study's published figure: {theirs:.3f} (difference "
                        f"{summary['heldout']['loss'] - theirs:+.4f})")
            except TokenizerMismatch:
                raise
            except (ValueError, OSError, Failed) as exc:
                failures.append(f"{target.repo}: {exc}")
                log(f"  failed: {exc}")
                continue
        if tasks.names:
            try:
                tasks.run(run_dir, m, log)
            except EvalError as exc:
                failures.append(f"{target.repo} (lm-eval): {exc}")
        write_report(out_dir, log=lambda *_: None, plot=False)  # partial results stay visible
    if not runs.sweep_runs(out_dir, finished=True):
        raise ReleasesFailed("no release could be measured: " + "; ".join(failures))
    paths = write_report(out_dir, log=lambda *_: None)  # with the published figures (a released folder)
    if published is not None:
        paths["report"] = write_published_section(out_dir, published)
    print_comparison(out_dir, published, log=log)
    if failures:
        raise ReleasesFailed(f"{len(failures)} of {len(targets)} release(s) failed (the others are saved in "
                             f"{out_dir}): " + "; ".join(failures))
    return paths
