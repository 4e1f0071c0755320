"""Offline demo corpus: synthetic multi-step reasoning tasks mixed with natural English text.

The embedded depthbench demo must run on a fresh machine without internet in a few CPU minutes, yet still
show an effect of depth.  This module builds such a corpus deterministically:

* **Synthetic tasks** that need several sequential computation steps (``steps`` = hops / operations), each
  written as one short document ``"<prompt> <answer>"`` over a small alphabet (lowercase letters, digits and a
  few symbols), so a tiny BPE covers it well:

  - ``pointer``: follow a chain of links, e.g. ``pointer: k>b e>k w>j b>q q>w j>e. start e, 3 hops. answer: q``.
  - ``permutation``: apply digit permutations to a symbol string, e.g.
    ``permute abcd by 2013 then 3102. answer: dacb`` (``2013`` maps ``s`` to ``s[2] s[0] s[1] s[3]``).
  - ``arithmetic``: a left-nested expression modulo 10, e.g. ``arith: (((7+5)*3)-4) mod 10. answer: 2``.
  - ``variables``: a chain of assignments with distractors, values modulo 10, e.g.
    ``vars mod 10: q=3; x=7; k=q+2; b=k*3; b? answer: 5``.

* **Natural text**: the prose of ``pydoc_data.topics.topics`` (standard library, ~0.46 MB), split into
  paragraph groups of at most ``text_doc_chars`` characters, in sorted topic order.  Its content depends on the
  Python version, so byte-identical output is guaranteed for the same seed *and* Python minor version.

:func:`build_demo_corpus` trains a tiny BPE on the training mixture and writes the corpus with
:func:`depthbench.data.prepare_data` (same shard format as real data) with splits ``train``, ``eval_text``
(held-out pydoc documents) and ``eval_synthetic`` (fresh task instances that never occur in ``train``).
:func:`synthetic_answer_accuracy` scores a causal LM on the answers of held-out instances.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import string
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from depthbench import atomic
from depthbench.data import make_tiny_tokenizer, prepare_data

TASKS: tuple[str, ...] = ("pointer", "permutation", "arithmetic", "variables")
"""Names of the synthetic task families."""

_LETTERS = string.ascii_lowercase
_OPS = ("+", "-", "*")
_UNITS_MOD_10 = (3, 7, 9)  # multipliers invertible mod 10 (1 is skipped: it would be a no-op)


def _draw_op(rng: random.Random) -> tuple[str, int]:
    """Draw an operation whose map ``x -> x op b (mod 10)`` is a bijection, so no step can be skipped."""
    op = rng.choice(_OPS)
    return op, (rng.choice(_UNITS_MOD_10) if op == "*" else rng.randint(1, 9))


@dataclass(frozen=True)
class SyntheticExample:
    """One task instance.

    Attributes:
        task: Task family (one of :data:`TASKS`).
        steps: Number of sequential computation steps (hops, permutations or operations).
        prompt: The question, ending in ``"answer:"``.
        answer: The answer string (no leading space).
    """

    task: str
    steps: int
    prompt: str
    answer: str

    @property
    def text(self) -> str:
        """The document text: ``prompt + " " + answer``."""
        return f"{self.prompt} {self.answer}"

    def to_record(self) -> dict:
        """JSON record as stored in ``sources/*.jsonl``."""
        return {
            "text": self.text,
            "source": "synthetic",
            "task": self.task,
            "steps": self.steps,
            "prompt": self.prompt,
            "answer": self.answer,
        }


def _apply_op(a: int, op: str, b: int) -> int:
    if op == "+":
        return (a + b) % 10
    if op == "-":
        return (a - b) % 10
    return (a * b) % 10


def make_pointer(rng: random.Random, steps: int, distractors: int = 3) -> SyntheticExample:
    """Pointer chasing: follow ``steps`` links from a start letter.

    A chain ``v0 > v1 > ... > v_steps`` of distinct letters is mixed with ``distractors`` extra letters; every
    letter has exactly one outgoing link (``v_steps`` and the distractors point to random letters), and the links
    are listed in random order, so the answer ``v_steps`` requires following all ``steps`` links.
    """
    nodes = rng.sample(_LETTERS, steps + 1 + distractors)
    chain, others = nodes[: steps + 1], nodes[steps + 1 :]
    links = {chain[i]: chain[i + 1] for i in range(steps)}
    for node in [chain[-1], *others]:
        links[node] = rng.choice(nodes)
    items = list(links.items())
    rng.shuffle(items)
    edges = " ".join(f"{a}>{b}" for a, b in items)
    prompt = f"pointer: {edges}. start {chain[0]}, {steps} hops. answer:"
    return SyntheticExample("pointer", steps, prompt, chain[-1])


def make_permutation(rng: random.Random, steps: int, size: int = 4) -> SyntheticExample:
    """Permutation composition: apply ``steps`` permutations (digit strings) to ``abcd...`` in order.

    A permutation ``p`` maps a string ``s`` to ``"".join(s[int(c)] for c in p)``.
    """
    state = _LETTERS[:size]
    perms = []
    for _ in range(steps):
        p = list(range(size))
        rng.shuffle(p)
        perms.append("".join(map(str, p)))
        state = "".join(state[int(c)] for c in perms[-1])
    prompt = f"permute {_LETTERS[:size]} by {' then '.join(perms)}. answer:"
    return SyntheticExample("permutation", steps, prompt, state)


def make_arithmetic(rng: random.Random, steps: int) -> SyntheticExample:
    """Multi-step modular arithmetic: a fully parenthesised left-nested expression with ``steps`` operations.

    Operations are ``+b`` / ``-b`` with ``b`` in 1..9 and ``*b`` with ``b`` in {3, 7, 9}; each is a bijection
    modulo 10, so the answer depends on every step (no shortcut through a multiplication by 0, 2 or 5).
    """
    value = rng.randrange(10)
    expr = str(value)
    for i in range(steps):
        op, b = _draw_op(rng)
        expr = f"{expr}{op}{b}" if i == 0 else f"({expr}){op}{b}"
        value = _apply_op(value, op, b)
    expr = f"({expr})"
    prompt = f"arith: {expr} mod 10. answer:"
    return SyntheticExample("arithmetic", steps, prompt, str(value))


def make_variables(rng: random.Random, steps: int, distractors: int = 2) -> SyntheticExample:
    """Variable binding chain: ``steps`` derived assignments (mod 10) plus distractor constants.

    Operations are drawn as in :func:`make_arithmetic`; statements appear in dependency order with the
    distractor assignments inserted at random positions, and the question asks for the last chain variable.
    """
    names = rng.sample(_LETTERS, steps + 1 + distractors)
    chain, others = names[: steps + 1], names[steps + 1 :]
    value = rng.randrange(10)
    statements = [f"{chain[0]}={value}"]
    for i in range(1, steps + 1):
        op, b = _draw_op(rng)
        statements.append(f"{chain[i]}={chain[i - 1]}{op}{b}")
        value = _apply_op(value, op, b)
    for name in others:  # distractors at random positions (they never feed the chain)
        statements.insert(rng.randrange(len(statements) + 1), f"{name}={rng.randrange(10)}")
    prompt = f"vars mod 10: {'; '.join(statements)}; {chain[-1]}? answer:"
    return SyntheticExample("variables", steps, prompt, str(value))


_MAKERS = {
    "pointer": make_pointer,
    "permutation": make_permutation,
    "arithmetic": make_arithmetic,
    "variables": make_variables,
}


def make_example(task: str, rng: random.Random, steps: int) -> SyntheticExample:
    """Generate one instance of ``task`` with ``steps`` computation steps.

    Raises:
        ValueError: Unknown task or ``steps`` outside ``[1, 20]``.
    """
    if task not in _MAKERS:
        raise ValueError(f"unknown task {task!r}; choose from {TASKS}")
    if not 1 <= steps <= 20:
        raise ValueError(f"steps must be in [1, 20], got {steps}")
    return _MAKERS[task](rng, steps)


def generate_examples(
    n: int, *, seed: int | str = 0, difficulty: int = 4, tasks: Sequence[str] = TASKS
) -> list[SyntheticExample]:
    """Generate ``n`` instances deterministically.

    Tasks cycle round-robin over ``tasks``; each instance draws ``steps`` uniformly from ``1..difficulty``.

    Args:
        n: Number of instances.
        seed: Seed of a private ``random.Random`` (ints and strings are both stable across runs).
        difficulty: Maximum number of steps.
        tasks: Task families to use.
    """
    rng = random.Random(seed)
    return [make_example(tasks[i % len(tasks)], rng, rng.randint(1, difficulty)) for i in range(n)]


def pydoc_documents(max_chars: int = 2000) -> list[str]:
    """English documentation prose from ``pydoc_data.topics`` as documents, in deterministic order.

    Each topic (sorted by name) is split into blank-line-separated paragraphs; consecutive paragraphs are grouped
    into documents of at most ``max_chars`` characters (a longer single paragraph stays one document).
    """
    from pydoc_data.topics import topics

    docs: list[str] = []
    for name in sorted(topics):
        current: list[str] = []
        size = 0
        for para in topics[name].split("\n\n"):
            para = para.strip("\n")
            if not para.strip():
                continue
            if current and size + len(para) + 2 > max_chars:
                docs.append("\n\n".join(current))
                current, size = [], 0
            current.append(para)
            size += len(para) + 2
        if current:
            docs.append("\n\n".join(current))
    return docs


def _stable_fraction(text: str, salt: str) -> float:
    digest = hashlib.sha256(f"{salt}\0{text}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2.0**64


def _write_jsonl(path: str, records: Iterable[dict]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")
    os.replace(tmp, path)


def build_demo_corpus(
    output_dir: str,
    *,
    seed: int = 0,
    synthetic_docs: int = 24_000,
    eval_synthetic_docs: int = 1_000,
    text_fraction: float | None = None,
    eval_text_fraction: float = 0.1,
    vocab_size: int = 1024,
    difficulty: int = 4,
    tasks: Sequence[str] = TASKS,
    text_doc_chars: int = 2000,
    shard_tokens: int = 50_000_000,
    progress: bool = False,
) -> dict:
    """Build the deterministic offline demo corpus in ``output_dir``.

    Steps: split the pydoc documents into train / ``eval_text`` by a seeded content hash
    (``eval_text_fraction``); generate ``synthetic_docs`` training instances (seed ``seed``) and
    ``eval_synthetic_docs`` held-out instances (seed ``f"{seed}-eval"``, dropping any whose text occurs in
    training); shuffle the training mixture; train a byte-level BPE of ``vocab_size`` on the training texts
    only; write ``output_dir/sources/{train,eval_text,eval_synthetic}.jsonl`` (synthetic records also carry
    ``task``, ``steps``, ``prompt``, ``answer``); tokenize with :func:`~depthbench.data.prepare_data` into
    splits ``train``, ``eval_text`` and ``eval_synthetic``; write ``output_dir/demo_corpus.json``.

    The same arguments give byte-identical shards and the same ``content_hash`` (on the same Python minor
    version, whose ``pydoc_data`` text is fixed).  With the defaults the corpus has ~0.9M tokens and builds in a
    few seconds.

    Args:
        output_dir: Output directory (a prepared data directory afterwards).
        seed: Seed for the task instances, the text hold-out and the mixture order.
        synthetic_docs: Synthetic training documents.
        eval_synthetic_docs: Held-out synthetic documents.
        text_fraction: ``None`` uses all training pydoc text; a float in ``[0, 1]`` keeps a seeded subset so
            that natural text is about that fraction of the training characters (capped by what exists).
        eval_text_fraction: Fraction of pydoc documents held out as ``eval_text``.
        vocab_size: Tokenizer vocabulary size (>= 258).
        difficulty: Maximum number of steps per instance (steps are uniform in ``1..difficulty``).
        tasks: Task families.
        text_doc_chars: Maximum characters per pydoc document.
        shard_tokens: Shard size passed to ``prepare_data``.
        progress: Show tokenization progress bars.

    Returns:
        The ``meta.json`` dict with an extra ``"demo"`` entry (also written to ``demo_corpus.json``).
    """
    t0 = time.perf_counter()
    if text_fraction is not None and not 0.0 <= text_fraction <= 1.0:
        raise ValueError(f"text_fraction must be None or in [0, 1], got {text_fraction}")
    salt = f"depthbench-demo-{seed}"
    text_docs = pydoc_documents(text_doc_chars)
    eval_text = [d for d in text_docs if _stable_fraction(d, salt) < eval_text_fraction]
    train_text = [d for d in text_docs if _stable_fraction(d, salt) >= eval_text_fraction]

    train_syn = generate_examples(synthetic_docs, seed=seed, difficulty=difficulty, tasks=tasks)
    seen = {ex.text for ex in train_syn}
    eval_syn: list[SyntheticExample] = []
    eval_rng_seed = f"{seed}-eval"
    batch = 0
    while len(eval_syn) < eval_synthetic_docs and batch < 100:
        for ex in generate_examples(
            eval_synthetic_docs, seed=f"{eval_rng_seed}-{batch}", difficulty=difficulty, tasks=tasks
        ):
            if ex.text not in seen and len(eval_syn) < eval_synthetic_docs:
                seen.add(ex.text)
                eval_syn.append(ex)
        batch += 1

    rng = random.Random(f"{seed}-mix")
    if text_fraction is not None:
        syn_chars = sum(len(ex.text) for ex in train_syn)
        target = float("inf") if text_fraction >= 1.0 else text_fraction / (1.0 - text_fraction) * syn_chars
        order = list(range(len(train_text)))
        rng.shuffle(order)
        chosen, chars = [], 0
        for i in order:
            if chars >= target:
                break
            chosen.append(i)
            chars += len(train_text[i])
        train_text = [train_text[i] for i in sorted(chosen)]

    train_records: list[dict] = [{"text": d, "source": "pydoc"} for d in train_text]
    train_records += [ex.to_record() for ex in train_syn]
    rng.shuffle(train_records)
    if not train_records:
        raise ValueError("build_demo_corpus: empty training mixture (synthetic_docs=0 and no text)")

    tokenizer = make_tiny_tokenizer((r["text"] for r in train_records), vocab_size=vocab_size)

    os.makedirs(output_dir, exist_ok=True)
    src_dir = os.path.join(output_dir, "sources")
    os.makedirs(src_dir, exist_ok=True)
    paths = {name: os.path.join(src_dir, f"{name}.jsonl") for name in ("train", "eval_text", "eval_synthetic")}
    _write_jsonl(paths["train"], train_records)
    _write_jsonl(paths["eval_text"], ({"text": d, "source": "pydoc"} for d in eval_text))
    _write_jsonl(paths["eval_synthetic"], (ex.to_record() for ex in eval_syn))

    extra = {name: [paths[name]] for name in ("eval_text", "eval_synthetic")}
    meta = prepare_data(
        [paths["train"]],
        tokenizer,
        output_dir,
        shard_tokens=shard_tokens,
        progress=progress,
        extra_splits=extra,
    )
    demo = {
        "seed": seed,
        "difficulty": difficulty,
        "tasks": list(tasks),
        "vocab_size": vocab_size,
        "text_fraction": text_fraction,
        "eval_text_fraction": eval_text_fraction,
        "documents": {
            "train_text": len(train_text),
            "train_synthetic": len(train_syn),
            "eval_text": len(eval_text),
            "eval_synthetic": len(eval_syn),
        },
        "tokens": {name: split["tokens"] for name, split in meta["splits"].items()},
        "python_pydoc_chars": sum(len(d) for d in text_docs),
        "build_seconds": round(time.perf_counter() - t0, 3),
    }
    atomic.write_json(os.path.join(output_dir, "demo_corpus.json"), demo, sort_keys=True)
    return {**meta, "demo": demo}


def load_synthetic_examples(data_dir: str, split: str = "eval_synthetic") -> list[SyntheticExample]:
    """Read the task instances of a demo corpus split (``train`` keeps only its synthetic records)."""
    path = os.path.join(data_dir, "sources", f"{split}.jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: {data_dir!r} is not a demo corpus built by build_demo_corpus")
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("source") == "synthetic":
                out.append(SyntheticExample(rec["task"], int(rec["steps"]), rec["prompt"], rec["answer"]))
    return out


def _answer_token_ids(tokenizer: Any, ex: SyntheticExample) -> tuple[list[int], int]:
    """Token ids of the full text and the index where the answer tokens start."""
    full = list(tokenizer(ex.text, add_special_tokens=True)["input_ids"])
    prompt = list(tokenizer(ex.prompt, add_special_tokens=True)["input_ids"])
    # Drop trailing specials a post-processor may append to the prompt (e.g. EOS) before the prefix test.
    while prompt and full[: len(prompt)] != prompt and prompt[-1] in set(tokenizer.all_special_ids):
        prompt.pop()
    if full[: len(prompt)] == prompt and len(prompt) < len(full):
        start = len(prompt)
    else:
        enc = tokenizer(ex.text, add_special_tokens=True, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
        starts = [i for i, (a, b) in enumerate(offsets) if b > a and a >= len(ex.prompt)]
        if not starts:
            raise ValueError(f"cannot locate the answer tokens of {ex.text!r}")
        start = starts[0]
    end = len(full)
    specials = set(tokenizer.all_special_ids)
    while end > start and full[end - 1] in specials:
        end -= 1
    return full[:end], start


@torch.no_grad()
def synthetic_answer_accuracy(
    model: torch.nn.Module,
    tokenizer: Any,
    examples: Sequence[SyntheticExample] | None = None,
    *,
    n: int = 256,
    seed: int | str = "accuracy",
    difficulty: int = 4,
    batch_size: int = 64,
) -> dict:
    """Greedy exact-match accuracy of a causal LM on synthetic task answers.

    Each sequence is ``[EOS] + tokens(prompt + " " + answer)`` (EOS plays the document separator it is in
    training).  An example counts as correct iff the argmax prediction at every answer position equals the
    answer token, given the true prefix, which is exactly "greedy decoding reproduces the answer tokens".
    Sequences are right-padded, so causal models need no attention mask.

    Args:
        model: Callable as ``model(input_ids)`` returning logits ``[B, T, V]`` or an object with ``.logits``.
        tokenizer: The tokenizer the model was trained with.
        examples: Instances to score; if ``None``, ``n`` fresh ones from :func:`generate_examples`.
        n: Number of generated instances when ``examples`` is ``None``.
        seed: Seed for generated instances.
        difficulty: Maximum steps for generated instances.
        batch_size: Sequences per forward pass.

    Returns:
        ``{"accuracy", "n", "per_task": {task: acc}, "per_steps": {steps: acc}}``.
    """
    if examples is None:
        examples = generate_examples(n, seed=seed, difficulty=difficulty)
    if not examples:
        raise ValueError("no examples to score")
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    encoded = []
    for ex in examples:
        ids, start = _answer_token_ids(tokenizer, ex)
        encoded.append(([eos, *ids], start + 1))
    try:
        device = next(model.parameters()).device
    except (StopIteration, AttributeError):
        device = torch.device("cpu")
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    correct: list[bool] = []
    try:
        for b in range(0, len(encoded), batch_size):
            chunk = encoded[b : b + batch_size]
            width = max(len(ids) for ids, _ in chunk)
            batch = torch.full((len(chunk), width), pad, dtype=torch.long)
            for row, (ids, _) in enumerate(chunk):
                batch[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            out = model(batch.to(device))
            logits = out.logits if hasattr(out, "logits") else (out[0] if isinstance(out, (tuple, list)) else out)
            pred = logits.argmax(dim=-1).cpu()
            for row, (ids, start) in enumerate(chunk):
                target = torch.tensor(ids[start:], dtype=torch.long)
                correct.append(bool(torch.equal(pred[row, start - 1 : len(ids) - 1], target)))
    finally:
        if was_training and hasattr(model, "train"):
            model.train()

    def grouped(key) -> dict:
        groups: dict[Any, list[bool]] = {}
        for ex, ok in zip(examples, correct):
            groups.setdefault(key(ex), []).append(ok)
        return {k: sum(v) / len(v) for k, v in sorted(groups.items())}

    return {
        "accuracy": sum(correct) / len(correct),
        "n": len(correct),
        "per_task": grouped(lambda ex: ex.task),
        "per_steps": grouped(lambda ex: ex.steps),
    }
