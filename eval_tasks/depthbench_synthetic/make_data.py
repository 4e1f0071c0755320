"""Regenerate the fixed multiple-choice data of the ``depthbench_synthetic`` lm-eval tasks.

The task rows are instances of the four ``depthbench.data.synthetic`` families (pointer chasing, permutation
composition, arithmetic mod 10, variable chains), each turned into a 4-way multiple-choice item: the correct
answer plus three distinct distractors of the same kind, in a seeded random order.  The output is
deterministic (same bytes on every run and platform; ``random.Random`` with string seeds is stable), so the
JSONL files are committed and this script only documents and checks how they were made::

    python eval_tasks/depthbench_synthetic/make_data.py            # rewrite data/{test,dev}.jsonl
    python eval_tasks/depthbench_synthetic/make_data.py --check    # exit 1 if the committed files differ

Seeds.  Test instances of family ``f`` come from ``generate_examples(..., seed=f"{TEST_SEED}-{f}-{batch}")``
and dev instances from ``DEV_SEED`` in the same way; the demo corpus (``depthbench.data.synthetic.build_demo_corpus``)
uses the integer seed ``0`` for training and ``"0-eval-<batch>"`` for its held-out split, so the streams are
unrelated.  A different seed alone does not keep an item out of the demo's training data (a 1-step arithmetic
item has only 270 possible texts), so every instance whose text occurs in the demo's default training split
(seed 0, 24,000 synthetic documents, difficulty 4) is dropped, as are repeats within and across our splits.
Distractors and the answer position use a private ``random.Random(f"{CHOICE_SEED}-{row id}")`` per row.

Distractors.  Up to two are *near misses* that an under- or over-computing model would pick (the state after
one step fewer / one step more, e.g. the letter reached after ``steps - 1`` hops), and the rest are drawn
uniformly from the family's answer space (letters of the prompt's graph, the 24 orderings of ``abcd``, or the
digits 0-9), so every choice has the answer's length and alphabet.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

from depthbench.data.synthetic import TASKS, SyntheticExample, generate_examples

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE / "data"

TEST_SEED = "depthbench-synthetic-mc-test"
"""Seed prefix of the test instances (the demo corpus uses ``0`` and ``"0-eval-<batch>"``)."""
DEV_SEED = "depthbench-synthetic-mc-dev"
"""Seed prefix of the dev (few-shot) instances."""
CHOICE_SEED = "depthbench-synthetic-mc-choices"
"""Seed prefix of the per-row distractor / answer-position generator."""
DIFFICULTY = 4
"""Maximum steps per instance (steps are uniform in ``1..DIFFICULTY`` before de-duplication), as in the demo."""
PER_FAMILY = {"test": 100, "dev": 10}
"""Rows per task family and split (400 test and 40 dev rows in all)."""
NUM_CHOICES = 4
NEAR_MISSES = 2

DEMO_TRAIN_SEED = 0
"""``build_demo_corpus`` defaults whose training instances are excluded from the task."""
DEMO_TRAIN_DOCS = 24_000
DEMO_DIFFICULTY = 4

_POINTER = re.compile(r"pointer: (?P<edges>.*)\. start (?P<start>\w), (?P<steps>\d+) hops\. answer:")
_PERMUTE = re.compile(r"permute (?P<base>\w+) by (?P<perms>.*)\. answer:")
_ARITH = re.compile(r"arith: (?P<expr>.*) mod 10\. answer:")
_VARS = re.compile(r"vars mod 10: (?P<statements>.*); (?P<target>\w)\? answer:")
_OPS = {"+": lambda a, b: (a + b) % 10, "-": lambda a, b: (a - b) % 10, "*": lambda a, b: (a * b) % 10}


def _match(pattern: re.Pattern, prompt: str) -> re.Match:
    match = pattern.fullmatch(prompt)
    if match is None:
        raise ValueError(f"unexpected prompt format: {prompt!r}")
    return match


def solve_trace(ex: SyntheticExample) -> list[str]:
    """Re-solve an instance from its prompt text and return the state after each step.

    ``trace[k]`` is the state after ``k`` steps (``trace[0]`` the start), so ``trace[ex.steps]`` is the answer.
    For pointer chasing the walk continues two hops past the answer (every letter has an outgoing link), which
    gives the "one hop too many" near misses.

    Args:
        ex: A ``depthbench.data.synthetic`` instance.

    Returns:
        The state strings, ``ex.steps + 1`` of them (``ex.steps + 3`` for ``pointer``).
    """
    if ex.task == "pointer":
        m = _match(_POINTER, ex.prompt)
        links = dict(edge.split(">") for edge in m["edges"].split(" "))
        trace = [m["start"]]
        for _ in range(int(m["steps"]) + 2):
            trace.append(links[trace[-1]])
        return trace
    if ex.task == "permutation":
        m = _match(_PERMUTE, ex.prompt)
        trace = [m["base"]]
        for perm in m["perms"].split(" then "):  # s -> s[p0] s[p1] ...
            trace.append("".join(trace[-1][int(c)] for c in perm))
        return trace
    if ex.task == "arithmetic":
        expr = _match(_ARITH, ex.prompt)["expr"]
        trace = [int(expr.lstrip("(")[0])]
        for op, b in re.findall(r"([+\-*])(\d)", expr):
            trace.append(_OPS[op](trace[-1], int(b)))
        return [str(v) for v in trace]
    if ex.task == "variables":
        m = _match(_VARS, ex.prompt)
        definitions = dict(s.split("=", 1) for s in m["statements"].split("; "))
        chain = [m["target"]]  # walk the dependencies back to the constant
        while not definitions[chain[-1]].isdigit():
            chain.append(definitions[chain[-1]][0])
        chain.reverse()
        trace = [int(definitions[chain[0]])]
        for name in chain[1:]:
            rhs = definitions[name]
            trace.append(_OPS[rhs[1]](trace[-1], int(rhs[2:])))
        return [str(v) for v in trace]
    raise ValueError(f"unknown task {ex.task!r}")


def answer_space(ex: SyntheticExample) -> list[str]:
    """All strings of the same kind as the answer (sorted): the graph's letters, orderings or digits."""
    if ex.task == "pointer":
        return sorted(set(re.findall(r"[a-z]", _match(_POINTER, ex.prompt)["edges"])))
    if ex.task == "permutation":
        base = _match(_PERMUTE, ex.prompt)["base"]
        return sorted("".join(p) for p in itertools.permutations(base))
    return [str(d) for d in range(10)]


def make_choices(ex: SyntheticExample, rng: random.Random) -> tuple[list[str], int]:
    """The shuffled choices (answer + ``NUM_CHOICES - 1`` distinct distractors) and the answer's index.

    Raises:
        ValueError: If the prompt does not re-solve to ``ex.answer`` (a generator/parser mismatch).
    """
    trace = solve_trace(ex)
    if trace[ex.steps] != ex.answer:
        raise ValueError(f"re-solved answer {trace[ex.steps]!r} != {ex.answer!r} for {ex.prompt!r}")
    distractors: list[str] = []
    # near misses ordered by distance from the right step count: steps-1, steps+1, steps-2, steps+2, ...
    for k in itertools.chain.from_iterable((ex.steps - d, ex.steps + d) for d in range(1, len(trace))):
        if len(distractors) == NEAR_MISSES:
            break
        if 0 <= k < len(trace) and trace[k] != ex.answer and trace[k] not in distractors:
            distractors.append(trace[k])
    pool = [s for s in answer_space(ex) if s != ex.answer and s not in distractors]
    distractors += rng.sample(pool, NUM_CHOICES - 1 - len(distractors))
    choices = [ex.answer, *distractors]
    rng.shuffle(choices)
    return choices, choices.index(ex.answer)


def demo_training_texts() -> set[str]:
    """Texts of the synthetic training documents of the default demo corpus."""
    return {ex.text for ex in generate_examples(DEMO_TRAIN_DOCS, seed=DEMO_TRAIN_SEED, difficulty=DEMO_DIFFICULTY)}


def build_split(split: str, exclude: set[str]) -> list[dict]:
    """Rows of one split: ``PER_FAMILY[split]`` fresh instances per family, families interleaved.

    Args:
        split: ``"test"`` or ``"dev"``.
        exclude: Texts that must not be used (updated in place with the chosen ones).

    Returns:
        JSON rows ``{"id", "task", "steps", "prompt", "choices", "answer"}`` (``answer`` indexes ``choices``).
    """
    seed = {"test": TEST_SEED, "dev": DEV_SEED}[split]
    n = PER_FAMILY[split]
    per_family: dict[str, list[SyntheticExample]] = {}
    for family in TASKS:
        chosen: list[SyntheticExample] = []
        for batch in itertools.count():
            if len(chosen) == n:
                break
            if batch == 100:
                raise RuntimeError(f"could not draw {n} fresh {family} instances")
            for ex in generate_examples(n, seed=f"{seed}-{family}-{batch}", difficulty=DIFFICULTY, tasks=(family,)):
                if ex.text not in exclude and len(chosen) < n:
                    exclude.add(ex.text)
                    chosen.append(ex)
        per_family[family] = chosen
    rows = []
    for i in range(n):
        for family in TASKS:
            ex = per_family[family][i]
            row_id = f"{split}-{family}-{i:03d}"
            choices, answer = make_choices(ex, random.Random(f"{CHOICE_SEED}-{row_id}"))
            rows.append(
                {"id": row_id, "task": family, "steps": ex.steps, "prompt": ex.prompt, "choices": choices,
                 "answer": answer}
            )
    return rows


def build_all() -> dict[str, str]:
    """The file contents ``{"test.jsonl": ..., "dev.jsonl": ...}`` (test is drawn first, dev avoids it)."""
    exclude = demo_training_texts()
    out = {}
    for split in ("test", "dev"):
        rows = build_split(split, exclude)
        out[f"{split}.jsonl"] = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    return out


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) ``data/test.jsonl`` and ``data/dev.jsonl``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="output folder (default: the task's data/)")
    parser.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    args = parser.parse_args(argv)
    files = build_all()
    if args.check:
        stale = [name for name, text in files.items() if not (args.out / name).is_file()
                 or (args.out / name).read_text(encoding="utf-8") != text]
        print("up to date" if not stale else f"stale: {', '.join(stale)} (rerun without --check)")
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (args.out / name).write_text(text, encoding="utf-8")
        rows = [json.loads(line) for line in text.splitlines()]
        steps = Counter((r["task"], r["steps"]) for r in rows)
        print(f"{args.out / name}: {len(rows)} rows; (family, steps) counts: {dict(sorted(steps.items()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
