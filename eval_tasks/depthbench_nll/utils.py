"""Data, prompts and metrics of the ``depthbench_nll_*`` lm-eval tasks (referenced from the YAMLs as ``!function``).

The DepthBench study (arXiv 2609.32534, Sec. 6.3 "domain-specific performance") scores six public datasets by the
negative log-likelihood of a reference completion given a prompt: ``NLL per token = sum of the target tokens' NLL
over the task / number of target tokens`` and its perplexity ``exp(NLL per token)``. lm-eval's per-request results
are ``(log-likelihood, is_greedy)`` with no token count, so the count is taken where lm-eval lets a task see the
tokenizer: ``custom_dataset`` is called with the run's metadata, which the stock ``lm_eval`` CLI fills with the
``--model_args`` (``pretrained``, ``tokenizer``, ``revision``, ``trust_remote_code``, ``add_bos_token``). The
loader encodes every (prompt, target) pair exactly as lm-eval's ``HFLM`` does for a causal model (trailing
whitespace of the prompt moved to the target, ``encode(prompt + target)`` minus ``encode(prompt)``) and stores the
count with the document; :func:`process_results` pairs it with lm-eval's log-likelihood. Bits per byte (UTF-8
bytes of the scored text, tokenizer-independent) uses lm-eval's own ``bits_per_byte`` aggregation.

Data: the Hub datasets by default; ``--metadata '{"depthbench_data_dir": "DIR"}'`` (or the environment variable
``DEPTHBENCH_NLL_DATA_DIR``) reads local copies ``DIR/<source>.{jsonl,json,csv,parquet}`` in the dataset's own
schema instead (``source`` = ``mbpp``, ``humaneval``, ``sciq``, ``gpqa_diamond``, ``gsm8k``, ``math500``).
Only ``datasets``, ``transformers`` and the standard library are imported (no ``depthbench`` import), and no
dataclass: lm-eval executes this file before registering it in ``sys.modules``.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import datasets

DATA_DIR_KEY = "depthbench_data_dir"
DATA_DIR_ENV = "DEPTHBENCH_NLL_DATA_DIR"
LOCAL_SUFFIXES = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


class TaskDataError(ValueError):
    """A dataset row or a task configuration the tasks cannot use (names the task, row and field)."""


class Source(NamedTuple):
    """One dataset of the study's table: where it lives, which fields it needs, and how a row becomes text."""

    name: str
    hub_path: str
    hub_name: str | None
    hub_split: str
    fields: tuple[str, ...]
    id_field: str | None
    build: Callable[[dict], tuple[str, str]]  # row -> (prompt, target) before the single-space rule
    target_fields: tuple[str, ...]  # the fields whose emptiness makes the target empty


def _mbpp(row: dict) -> tuple[str, str]:
    tests = "\n".join(row["test_list"])
    prompt = (f"You are an expert Python programmer, and here is your task: {row['text']} "
              f"Your code should pass these tests:\n\n{tests}\n[BEGIN]\n")
    return prompt, f"{row['code']}\n"


def _humaneval(row: dict) -> tuple[str, str]:
    return row["prompt"], row["canonical_solution"]


def _sciq(row: dict) -> tuple[str, str]:
    return f"Question: {row['question']}\nAnswer:", f" {row['correct_answer']}\nExplanation: {row['support']}"


def gpqa_choices(row: dict) -> list[str]:
    """The four answers in the study's order: shuffled by ``random.Random(seed)`` with ``seed`` the first 8 bytes
    (big-endian) of SHA-256 of the row's ``Record ID``, starting from [correct, incorrect 1, 2, 3]."""
    seed = int.from_bytes(hashlib.sha256(str(row["Record ID"]).encode("utf-8")).digest()[:8], "big")
    choices = [row["Correct Answer"], row["Incorrect Answer 1"], row["Incorrect Answer 2"], row["Incorrect Answer 3"]]
    random.Random(seed).shuffle(choices)
    return choices


def _gpqa(row: dict) -> tuple[str, str]:
    lettered = "\n".join(f"{letter}. {choice}" for letter, choice in zip("ABCD", gpqa_choices(row)))
    return (f"Question: {row['Question']}\n{lettered}\nAnswer:",
            f" {row['Correct Answer']}\nExplanation: {row['Explanation']}")


def _gsm8k(row: dict) -> tuple[str, str]:
    return f"Question: {row['question']}\nAnswer:", f" {row['answer']}"


def _math500(row: dict) -> tuple[str, str]:
    return f"Problem:\n{row['problem']}\n\nSolution:", f" {row['solution']}"


SOURCES: dict[str, Source] = {s.name: s for s in (
    Source("mbpp", "google-research-datasets/mbpp", "full", "test", ("task_id", "text", "code", "test_list"),
           "task_id", _mbpp, ("code",)),
    Source("humaneval", "openai/openai_humaneval", None, "test", ("task_id", "prompt", "canonical_solution"),
           "task_id", _humaneval, ("canonical_solution",)),
    Source("sciq", "allenai/sciq", None, "test", ("question", "correct_answer", "support"), None, _sciq,
           ("correct_answer",)),
    Source("gpqa_diamond", "Idavidrein/gpqa", "gpqa_diamond", "train",
           ("Record ID", "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
            "Incorrect Answer 3", "Explanation"), "Record ID", _gpqa, ("Correct Answer",)),
    Source("gsm8k", "openai/gsm8k", "main", "test", ("question", "answer"), None, _gsm8k, ("answer",)),
    Source("math500", "HuggingFaceH4/MATH-500", None, "test", ("problem", "solution", "unique_id"), "unique_id",
           _math500, ("solution",)),
)}
"""The six datasets of the study's domain evaluation (Coding: mbpp, humaneval; STEM: sciq, gpqa_diamond; Math:
gsm8k, math500), by task suffix."""

DOMAINS: dict[str, tuple[str, ...]] = {
    "coding": ("mbpp", "humaneval"), "stem": ("sciq", "gpqa_diamond"), "math": ("gsm8k", "math500"),
}


def join_single_space(prompt: str, target: str) -> str:
    """The study's rule: one space goes before the target when neither the prompt's end nor the target's start
    is whitespace; otherwise the target is unchanged."""
    if prompt and target and not prompt[-1].isspace() and not target[0].isspace():
        return " " + target
    return target


def make_doc(source: str, row: dict, index: int, label: str | None = None) -> dict[str, str]:
    """``{"id", "prompt", "target"}`` of one dataset row; a missing or null field or an empty target raises
    :class:`TaskDataError` naming the task, the row (``label``, e.g. ``line 4 of gsm8k.jsonl``; default
    ``row <index>``), the field and the fields the row has."""
    src = SOURCES[source]
    row_id = str(row.get(src.id_field, index)) if src.id_field else str(index)
    where = f"depthbench_nll_{source}: {label or f'row {index}'}" + (f" (id {row_id!r})" if src.id_field else "")
    needs = f"the {src.hub_path} schema needs {', '.join(map(repr, src.fields))}"
    absent = [f for f in src.fields if f not in row]
    if absent:
        raise TaskDataError(f"{where} has no field {absent[0]!r}; {needs} (the row has "
                            f"{', '.join(map(repr, row)) or 'no field'})")
    null = [f for f in src.fields if row[f] is None]
    if null:
        valued = [k for k, v in row.items() if v is not None]
        raise TaskDataError(f"{where}: field {null[0]!r} is null; {needs} (the row's fields with a value: "
                            f"{', '.join(map(repr, valued)) or 'none'})")
    for field in src.target_fields:
        if not str(row[field]).strip():
            raise TaskDataError(f"{where}: field {field!r} is empty, so the target to score is empty")
    if source == "mbpp" and not list(row["test_list"]):
        raise TaskDataError(f"{where}: field 'test_list' is empty; the prompt needs the tests")
    prompt, target = src.build(row)
    return {"id": row_id, "prompt": prompt, "target": join_single_space(prompt, target)}


# ------------------------------------------------------------------------------------------- token counting
def split_like_hflm(prompt: str, target: str) -> tuple[str, str]:
    """lm-eval's split of a (context, continuation) pair: trailing whitespace of the context is scored as part of
    the continuation (``TemplateLM._encode_pair``)."""
    n_spaces = len(prompt) - len(prompt.rstrip())
    if n_spaces:
        return prompt[:-n_spaces], prompt[-n_spaces:] + target
    return prompt, target


def count_target_tokens(tokenizer, prompt: str, target: str, add_special_tokens: bool | None = None) -> int:
    """Number of target tokens lm-eval's ``HFLM`` scores for (prompt, target) on a causal model:
    ``len(encode(context + continuation)) - len(encode(context))`` after :func:`split_like_hflm`."""
    context, continuation = split_like_hflm(prompt, target)
    kwargs = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
    return len(tokenizer.encode(context + continuation, **kwargs)) - len(tokenizer.encode(context, **kwargs))


def scored_bytes(prompt: str, target: str) -> int:
    """UTF-8 bytes of the text whose tokens are scored (the target plus any whitespace moved from the prompt)."""
    return len(split_like_hflm(prompt, target)[1].encode("utf-8"))


def _flag(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes")


@functools.lru_cache(maxsize=4)
def _load_tokenizer(name: str, revision: str | None, trust_remote_code: bool, use_fast: bool,
                    add_bos_token: bool | None):
    import transformers

    kwargs: dict[str, Any] = {"revision": revision or "main", "trust_remote_code": trust_remote_code,
                              "use_fast": use_fast}
    if add_bos_token is not None:
        kwargs["add_bos_token"] = add_bos_token
    return transformers.AutoTokenizer.from_pretrained(name, **kwargs)


def tokenizer_from_metadata(task: str, metadata: dict[str, Any]):
    """The tokenizer lm-eval's ``HFLM`` builds from ``--model_args`` (``tokenizer`` or ``pretrained``, ``revision``,
    ``trust_remote_code``, ``use_fast_tokenizer``, ``add_bos_token``), and the ``add_special_tokens`` it encodes
    with."""
    name = metadata.get("tokenizer") or metadata.get("pretrained")
    if not isinstance(name, (str, os.PathLike)):
        raise TaskDataError(
            f"{task} counts target tokens with the model's tokenizer, but the run's metadata names none: run it "
            f"with `lm_eval --model hf --model_args pretrained=...` (the CLI passes the model args to the task), or "
            f"in Python pass TaskManager(..., metadata={{'pretrained': <model folder or Hub id>}}) (or "
            f"'tokenizer': <folder or Hub id>)")
    add_bos = _flag(metadata.get("add_bos_token"))
    use_fast = _flag(metadata.get("use_fast_tokenizer"))
    tokenizer = _load_tokenizer(str(name), metadata.get("revision"), bool(_flag(metadata.get("trust_remote_code"))),
                                True if use_fast is None else use_fast, add_bos)
    return tokenizer, add_bos


# ----------------------------------------------------------------------------------------------- data loading
def local_file(source: str, data_dir: str | os.PathLike) -> Path:
    """The local copy of ``source`` in ``data_dir`` (``<source>.jsonl``, ``.json``, ``.csv`` or ``.parquet``)."""
    directory = Path(data_dir).expanduser()
    found = [p for p in (directory / f"{source}{suffix}" for suffix in LOCAL_SUFFIXES) if p.is_file()]
    if not found:
        names = ", ".join(f"{source}{s}" for s in LOCAL_SUFFIXES)
        raise TaskDataError(f"depthbench_nll_{source}: no local copy in {directory} (looked for {names})")
    if len(found) > 1:
        raise TaskDataError(f"depthbench_nll_{source}: several local copies in {directory} "
                            f"({', '.join(p.name for p in found)}); keep one")
    return found[0]


def _local_rows(path: Path) -> list[tuple[str, dict]]:
    """``[(where in the file, row)]`` of a local copy: CSV cells as the text they hold (no missing-value
    guessing: ``None``, ``NA``, ``nan`` or ``1.50`` stay those strings), JSON/JSONL values as JSON has them,
    each row named by its first line in the file (1-based; JSON arrays and Parquet by their 1-based row)."""
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows, start = [], 2
            for row in reader:
                rows.append((f"line {start} of {path.name}", dict(row)))
                start = reader.line_num + 1
            return rows
    if path.suffix == ".parquet":
        ds = datasets.load_dataset("parquet", data_files={"test": str(path)}, split="test")
        return [(f"row {i + 1} of {path.name}", dict(row)) for i, row in enumerate(ds)]
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None  # JSON Lines in a .json file
        if isinstance(data, list):
            return [(f"row {i + 1} of {path.name}", row) for i, row in enumerate(data)]
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append((f"line {number} of {path.name}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise TaskDataError(f"line {number} of {path}: not a JSON row ({exc})") from None
    return rows


def read_labelled_rows(source: str, data_dir: str | os.PathLike | None = None) -> list[tuple[str, dict]]:
    """``[(where, row)]`` of ``source``: the local copy in ``data_dir`` if given (rows named by their line in the
    file), else the Hub split of the study (rows named ``<dataset>[<split>][<index>]``)."""
    src = SOURCES[source]
    if data_dir:
        rows = _local_rows(local_file(source, data_dir))
        for where, row in rows:
            if not isinstance(row, dict):
                raise TaskDataError(f"depthbench_nll_{source}: {where} is not an object with the dataset's fields")
        return rows
    return [(f"{src.hub_path}[{src.hub_split}][{i}]", row) for i, row in enumerate(_hub_rows(source))]


def read_rows(source: str, data_dir: str | os.PathLike | None = None) -> list[dict]:
    """The raw rows of ``source``: the local copy in ``data_dir`` if given, else the Hub split of the study."""
    return [row for _, row in read_labelled_rows(source, data_dir)]


def row_labels(source: str, data_dir: str | os.PathLike | None = None) -> list[str]:
    """Where each row of :func:`read_rows` is in its file (``line 4 of gsm8k.jsonl``) or split."""
    return [where for where, _ in read_labelled_rows(source, data_dir)]


def _hub_rows(source: str) -> list[dict]:
    """The rows of the study's Hub split of ``source`` (a gated or unreachable dataset: how to fix it)."""
    src = SOURCES[source]
    try:
        ds = datasets.load_dataset(src.hub_path, src.hub_name, split=src.hub_split)
    except Exception as exc:  # gated (GPQA), offline, or a Hub error: say how to fix it
        hint = (" GPQA is gated: accept its terms on https://huggingface.co/datasets/Idavidrein/gpqa and log in "
                "with `hf auth login` (or set HF_TOKEN)." if source == "gpqa_diamond" else "")
        raise TaskDataError(
            f"depthbench_nll_{source}: cannot load {src.hub_path}"
            f"{f' ({src.hub_name})' if src.hub_name else ''} split {src.hub_split!r} from the Hub: "
            f"{type(exc).__name__}: {exc}.{hint} Offline, point {DATA_DIR_KEY} (--metadata) or {DATA_DIR_ENV} "
            f"at a folder with {source}.jsonl") from exc
    return [dict(row) for row in ds]


def build_docs(source: str, rows: list[dict], tokenizer=None, add_special_tokens: bool | None = None,
               labels: list[str] | None = None) -> list[dict]:
    """Documents of ``source``: ``id``, ``prompt``, ``target``, ``target_bytes`` and (given a tokenizer)
    ``target_tokens``; errors name each row by ``labels`` (:func:`row_labels`) when given."""
    docs = []
    for index, row in enumerate(rows):
        label = labels[index] if labels else None
        doc = make_doc(source, row, index, label)
        doc["target_bytes"] = scored_bytes(doc["prompt"], doc["target"])
        if tokenizer is not None:
            doc["target_tokens"] = count_target_tokens(tokenizer, doc["prompt"], doc["target"], add_special_tokens)
            if doc["target_tokens"] < 1:
                raise TaskDataError(f"depthbench_nll_{source}: {label or f'row {index}'} (id {doc['id']!r}): the "
                                    "target encodes to no token")
        docs.append(doc)
    return docs


def load(source: str | None = None, **metadata: Any) -> datasets.DatasetDict:
    """``custom_dataset`` of every ``depthbench_nll_*`` task: lm-eval calls it as ``load(**metadata,
    **dataset_kwargs)``; ``dataset_kwargs: {source: <name>}`` picks the dataset."""
    if source not in SOURCES:
        raise TaskDataError(f"unknown depthbench_nll source {source!r}; choose from {', '.join(SOURCES)}")
    task = f"depthbench_nll_{source}"
    tokenizer, add_bos = tokenizer_from_metadata(task, metadata)
    data_dir = metadata.get(DATA_DIR_KEY) or os.environ.get(DATA_DIR_ENV) or None
    labelled = read_labelled_rows(source, data_dir)
    docs = build_docs(source, [row for _, row in labelled], tokenizer, add_bos, labels=[w for w, _ in labelled])
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})


# --------------------------------------------------------------------------------------------------- metrics
def process_results(doc: dict, results: list[tuple[float, bool]]) -> dict[str, Any]:
    """Per-document items: ``(log-likelihood, count)`` pairs for the token- and byte-weighted aggregations and the
    counts themselves."""
    loglikelihood = results[0][0]
    return {
        "nll": (loglikelihood, doc["target_tokens"]),
        "ppl": (loglikelihood, doc["target_tokens"]),
        "bits_per_byte": (loglikelihood, doc["target_bytes"]),
        "target_tokens": doc["target_tokens"],
        "target_bytes": doc["target_bytes"],
    }


def token_weighted_nll(items: list[tuple[float, int]]) -> float:
    """Sum of the targets' NLL over the task / number of target tokens (nats per token)."""
    loglikelihoods, counts = zip(*items)
    return -math.fsum(loglikelihoods) / sum(counts)


def total(items: list[int]) -> int:
    """Sum over the task's documents."""
    return int(sum(items))
