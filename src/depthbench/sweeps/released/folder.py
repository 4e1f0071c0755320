"""The output folder of ``depthbench released eval``: ``sweep.json`` (kind ``released``: the selection so far
and the measurement settings) and each release's ``final/`` links into the conversion cache."""

from __future__ import annotations

import os
import shutil
from typing import Any

from depthbench import atomic, runs
from depthbench.hub.catalogue import CatalogueError, unique
from depthbench.sweeps.released.selection import Target

KIND = "released"


# ================================================================================================ the folder
def claim_folder(out_dir: str, targets: list[Target], measurement: dict[str, Any], data_dir: str,
                 batch: dict[str, Any] | None = None) -> None:
    """Write (or extend) ``OUT/sweep.json``; refuse a folder of a training sweep or measured with other settings
    (nothing is overwritten). ``batch`` (``{"sequences", "seq_len"}``): the study's training batch, for the
    report's setup."""
    path = os.path.join(out_dir, runs.SWEEP_DEFINITION)
    old = atomic.read_json(path) if os.path.exists(path) else None
    if old is None and os.path.isdir(os.path.join(out_dir, runs.RUNS)) and os.listdir(os.path.join(out_dir, runs.RUNS)):
        raise CatalogueError(f"{out_dir} has a runs/ folder but no sweep.json: choose another -o folder")
    if old is not None and (not isinstance(old, dict) or old.get("kind") != KIND):
        raise CatalogueError(f"{out_dir} is the folder of a training sweep, not of `depthbench released eval`: "
                             "choose another -o folder (nothing was overwritten)")
    if old is not None and old.get("measurement") != measurement:
        changed = sorted(k for k in set(measurement) | set(old.get("measurement") or {})
                         if (old.get("measurement") or {}).get(k) != measurement.get(k))
        raise CatalogueError(f"{out_dir} holds releases measured with other settings ({', '.join(changed)} differ: "
                             f"{ {k: (old.get('measurement') or {}).get(k) for k in changed} } there); use the same "
                             "settings to add releases, or another -o folder (nothing was overwritten)")
    releases = sorted({*((old or {}).get("releases") or []), *(t.repo for t in targets)})
    known = [*((old or {}).get("targets") or [])]
    known += [{"arch": t.arch, "shape": t.shape, "lr": t.lr} for t in targets
              if {"arch": t.arch, "shape": t.shape, "lr": t.lr} not in known]
    spec = {"name": os.path.basename(os.path.abspath(out_dir)), "kind": KIND,
            "archs": unique(k["arch"] for k in known), "shapes": unique(k["shape"] for k in known),
            "lrs": sorted({k["lr"] for k in known}), "seeds": sorted({t.seed for t in targets}),
            "planned": len(releases), "data": os.path.abspath(data_dir), "notes": _notes(measurement),
            "base": {"train": {"global_batch_size": (batch or {}).get("sequences", "?")},
                     "data": {"seq_len": (batch or {}).get("seq_len", "?"), "data_dir": "the study's FineWeb-Edu "
                              "sample/100BT (keyu-wang-2002/DepthBench README.md, Data Preparation)"}}}
    os.makedirs(os.path.join(out_dir, runs.RUNS), exist_ok=True)
    atomic.write_json(path, {"kind": KIND, "spec": spec, "measurement": measurement, "releases": releases,
                             "targets": known})


def _notes(m: dict[str, Any]) -> str:
    tokens = "every window" if m.get("max_tokens") is None else f"at most {m['max_tokens']:,} tokens"
    when = f"step {m['step']}" if m.get("step") is not None else "each release's final step"
    return (f"Each run is a release of the study (arXiv 2609.32534) trained by the study with its own recipe (the "
            f"setup below is the study's), converted with `depthbench.from_released` and re-measured here: "
            f"held-out loss on `{m['data']}` split `{m['split']}` ({tokens}, {m['seq_len'] or 'the model'}-token "
            f"windows, {m['dtype']}), at {when}.")


def link_model(converted: str, final: str) -> None:
    """``final/`` as links to every file of the conversion ``converted`` (copies where links are not possible),
    except ``README.md``, which is copied (the evaluation writes its model-index there, never into the cache)."""
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in sorted(os.listdir(converted)):
        source = os.path.join(os.path.abspath(converted), name)
        if not os.path.isfile(source):
            continue
        if name == "README.md":
            shutil.copy2(source, os.path.join(tmp, name))
            continue
        try:
            os.symlink(source, os.path.join(tmp, name))
        except OSError:
            shutil.copy2(source, os.path.join(tmp, name))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)




def write_run_config(run_dir: str, target: Target, step: int, model_config: dict[str, Any],
                     counts: dict[str, int], conversion: dict[str, Any] | None) -> None:
    """``run_config.json`` of a release, in the layout ``depthbench report`` reads from a training run (its arch,
    shape, LR and seed; the converted model's config) plus what it is: repository, step, catalogue entry."""
    entry = target.release.record() if target.release else None
    atomic.write_json(os.path.join(run_dir, runs.RUN_CONFIG), {
        "kind": KIND,
        "config": {"model": {"arch": target.arch, "shape": target.shape}, "optim": {"lr": target.lr},
                   "train": {"seed": target.seed}},
        "resolved": {"model_config": model_config, "parameter_counts": counts},
        "release": {"repo": target.repo, "step": step, "grid": target.grid, "depth": target.depth,
                    "catalogue": entry, "conversion": conversion},
    })


def write_summary(run_dir: str, target: Target, step: int, split: str, result: dict[str, Any],
                  extra: dict[str, Any], tokens_per_step: int | None) -> dict[str, Any]:
    """``summary.json`` with status ``finished``: the held-out loss as the run's eval split ``split``, the
    release's step and training tokens (step x the study's tokens per step), and ``extra`` (how it was measured)."""
    summary = {"status": "finished", "arch": target.arch, "steps": step,
               "tokens": step * tokens_per_step if tokens_per_step and step is not None else None,
               "final_train_loss": None,
               "eval": {split: result["loss"]}, "heldout": {**result, **extra},
               "release": {"repo": target.repo, "step": step}}
    atomic.write_json(os.path.join(run_dir, runs.SUMMARY), summary)
    return summary
