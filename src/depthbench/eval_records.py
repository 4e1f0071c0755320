"""Where an evaluation result came from, as a model card records it: the Hub dataset, a local copy of it, or a subset.

A result computed on local copies of a benchmark (``depthbench eval --data-dir``) or on its first documents only
(``--limit``) is not the benchmark's result, and a card must not file it as one. :func:`provenance` reads what an
lm-eval results dict says about one task or group (``depthbench eval`` records each local file and its sha256 in
``data_sources``; a stock ``lm_eval --metadata '{"depthbench_data_dir": ...}'`` run leaves the folder in the task
config; ``n-samples`` gives the documents scored and the documents the task has); :func:`mark` writes it into the
``model-index`` entry (huggingface_hub ``EvalResult``):

* **local copy**: ``dataset.type`` is ``local:<file>`` instead of the Hub id (the Hub links results to a dataset by
  that field), ``dataset.config``/``split`` are dropped, ``dataset.args`` keeps ``copy_of`` (the Hub dataset, config
  and split the copy stands for), ``local_copy`` (file names, never a local path) and ``sha256``;
* **subset**: ``dataset.args`` holds ``limit``, ``documents`` (scored) and ``documents_in_task``;
* both are said in ``source.name`` and, through :func:`section`, in the card's text, which ``depthbench eval``
  and ``depthbench publish`` both render from the entries (so a re-published card says the same).

Plain dicts and strings; huggingface_hub is imported only by the functions that build entries.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

LM_EVAL_URL = "https://github.com/EleutherAI/lm-evaluation-harness"
"""``source.url`` of every lm-eval entry (how :func:`section` tells them from a run's held-out losses)."""

DATA_DIR_KEY = "depthbench_data_dir"  # the task metadata key of eval_tasks/depthbench_nll (local copies)
SECTION_BEGIN = "<!-- depthbench eval results -->"
SECTION_END = "<!-- /depthbench eval results -->"


def file_record(path: str | os.PathLike, copy_of: tuple[str, str | None, str | None]) -> dict[str, Any]:
    """What a card may say about the local file ``path`` standing for the Hub dataset ``copy_of`` (id, config,
    split): its name (not its path) and sha256."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            digest.update(block)
    dataset, config, split = copy_of
    return {"file": os.path.basename(path), "sha256": digest.hexdigest(), "copy_of": dataset, "config": config,
            "split": split}


def _leaves(results: dict[str, Any], name: str) -> list[str]:
    subtasks = results.get("group_subtasks") or {}
    if name not in subtasks:
        return [name]
    return [leaf for child in subtasks[name] for leaf in _leaves(results, child)]


def provenance(results: dict[str, Any], name: str) -> dict[str, Any]:
    """``{"local": [file records], "local_dirs": [folder names], "limit", "documents", "documents_in_task",
    "subset"}`` of task or group ``name`` in lm-eval's ``results`` (a group: over its leaf tasks)."""
    leaves = _leaves(results, name)
    recorded = results.get("data_sources") or {}
    local = [r for leaf in leaves for r in (recorded.get(leaf) or [])]
    dirs = set()
    for leaf in leaves:  # a stock lm-eval run: only the folder its completion-NLL tasks read is known
        config = (results.get("configs") or {}).get(leaf) or {}
        folder = (config.get("metadata") or {}).get(DATA_DIR_KEY)
        if folder and leaf not in recorded and (config.get("dataset_kwargs") or {}).get("source"):
            dirs.add(os.path.basename(os.path.normpath(str(folder))))
    limit = (results.get("limits") or {}).get(name, (results.get("config") or {}).get("limit"))
    counts = [(results.get("n-samples") or {}).get(leaf) for leaf in leaves]
    known = all(isinstance(c, dict) and "effective" in c and "original" in c for c in counts)
    documents = sum(c["effective"] for c in counts) if known else None
    in_task = sum(c["original"] for c in counts) if known else None
    subset = (documents < in_task) if known else limit is not None
    return {"local": local, "local_dirs": sorted(dirs), "limit": limit, "documents": documents,
            "documents_in_task": in_task, "subset": subset}


def _notes(prov: dict[str, Any]) -> list[str]:
    notes = []
    if prov["local"] or prov["local_dirs"]:
        files = [r["file"] for r in prov["local"]] or [f"{d}/" for d in prov["local_dirs"]]
        notes.append(f"local copy {', '.join(files)}")
    if prov["subset"]:
        of = (f"{prov['documents']:,} of {prov['documents_in_task']:,} documents" if prov["documents"] is not None
              else f"at most {prov['limit']} documents")
        notes.append(f"subset: {of}")
    return notes


def mark(entry, prov: dict[str, Any]):
    """``entry`` (an ``EvalResult``) with the provenance ``prov`` (:func:`provenance`) written into its dataset
    fields and source name (see the module docstring); returned for chaining."""
    args = dict(entry.dataset_args or {})
    if prov["local"] or prov["local_dirs"]:
        if "copy_of" not in args:  # marked before: it stays a copy of the Hub dataset, not of "local:..."
            args["copy_of"] = entry.dataset_type
            for key, value in (("config", entry.dataset_config), ("split", entry.dataset_split)):
                if value:
                    args[f"copy_of_{key}"] = value
        files = [r["file"] for r in prov["local"]] or [f"{d}/" for d in prov["local_dirs"]]
        args["local_copy"] = ", ".join(files)
        if prov["local"]:
            args["sha256"] = ", ".join(r["sha256"] for r in prov["local"])
        entry.dataset_type = "local:" + ",".join(files)
        entry.dataset_config = entry.dataset_split = None
    if prov["subset"]:
        args.update({k: prov[k] for k in ("limit", "documents", "documents_in_task") if prov[k] is not None})
    entry.dataset_args = args or None
    notes = _notes(prov)
    if notes and entry.source_name and "; ".join(notes) not in entry.source_name:
        entry.source_name = f"{entry.source_name}; {'; '.join(notes)}"
    return entry


def describe(entry) -> str:
    """The data of ``entry`` in words: the Hub dataset, or the local copy / subset it was computed on."""
    args = entry.dataset_args or {}
    if args.get("local_copy"):
        of = ", ".join(str(v) for v in (args.get("copy_of"), args.get("copy_of_config"), args.get("copy_of_split"))
                       if v)
        digest = f" (sha256 {str(args['sha256'])[:12]}...)" if args.get("sha256") and "," not in args["sha256"] else ""
        text = f"**local copy** `{args['local_copy']}`{digest} standing for {of}, not the Hub dataset itself"
    else:
        parts = [p for p in (entry.dataset_config, entry.dataset_split) if p]
        text = f"{entry.dataset_type}" + (f" ({', '.join(parts)})" if parts else "")
    if args.get("documents") is not None and args.get("documents_in_task") is not None:
        text += f"; **subset**: {args['documents']:,} of {args['documents_in_task']:,} documents"
    elif args.get("limit") is not None:
        text += f"; **subset**: at most {args['limit']} documents (`--limit`)"
    return text


def section(entries: list) -> str:
    """The card's text on its lm-eval results (``source.url`` :data:`LM_EVAL_URL`), between
    :data:`SECTION_BEGIN`/:data:`SECTION_END`; ``""`` when there are none."""
    rows = [e for e in entries if e.source_url == LM_EVAL_URL]
    if not rows:
        return ""
    lines = [SECTION_BEGIN, "## Evaluation results", ""]
    if any((e.dataset_args or {}).keys() & {"local_copy", "limit", "documents"} for e in rows):
        lines += ["Results on a **local copy** were computed on local files (`depthbench eval --data-dir`), not on "
                  "the Hub dataset; results on a **subset** on its first documents only (`--limit`). Neither is "
                  "the benchmark's result nor comparable with one.", ""]
    lines += ["| task | metric | value | data |", "|---|---|---:|---|"]
    for e in rows:
        value = f"{e.metric_value:.4f}" if isinstance(e.metric_value, float) else str(e.metric_value)
        lines.append(f"| {e.task_name or e.dataset_name} | {e.metric_type} | {value} | {describe(e)} |")
    return "\n".join([*lines, SECTION_END])


def replace_section(text: str, new: str) -> str:
    """``text`` (a card's markdown body) with its results section replaced by ``new`` (appended when absent)."""
    pattern = re.compile(re.escape(SECTION_BEGIN) + r".*?" + re.escape(SECTION_END), re.S)
    if pattern.search(text):
        return pattern.sub(lambda _: new, text).rstrip() + "\n"
    return (text.rstrip() + ("\n\n" + new if new else "")).rstrip() + "\n"
