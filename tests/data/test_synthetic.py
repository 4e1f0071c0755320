"""Tests of the offline demo corpus (``depthbench.data.synthetic``): task answers, determinism, splits, scorer."""

from __future__ import annotations

import json
import os
import random
import re

import numpy as np
import pytest
import torch

from depthbench.data import TokenShards, TokenWindows
from depthbench.data.synthetic import (
    TASKS,
    SyntheticExample,
    build_demo_corpus,
    generate_examples,
    load_synthetic_examples,
    make_example,
    pydoc_documents,
    synthetic_answer_accuracy,
)

# ------------------------------------------------------------------------------------------------ independent solvers


def _solve_pointer(prompt: str) -> str:
    m = re.fullmatch(r"pointer: (.*)\. start ([a-z]), (\d+) hops\. answer:", prompt)
    assert m, prompt
    links = dict(edge.split(">") for edge in m.group(1).split(" "))
    node = m.group(2)
    for _ in range(int(m.group(3))):
        node = links[node]
    return node


def _solve_permutation(prompt: str) -> str:
    m = re.fullmatch(r"permute ([a-z]+) by (.*)\. answer:", prompt)
    assert m, prompt
    state = m.group(1)
    for perm in m.group(2).split(" then "):
        assert sorted(perm) == [str(i) for i in range(len(state))]
        state = "".join(state[int(c)] for c in perm)
    return state


def _solve_arithmetic(prompt: str) -> str:
    m = re.fullmatch(r"arith: ([0-9()+\-*]+) mod 10\. answer:", prompt)
    assert m, prompt
    return str(eval(m.group(1)) % 10)  # noqa: S307 - digits, parentheses and + - * only (checked by the regex)


def _solve_variables(prompt: str) -> str:
    m = re.fullmatch(r"vars mod 10: (.*); ([a-z])\? answer:", prompt)
    assert m, prompt
    env: dict[str, int] = {}
    for stmt in m.group(1).split("; "):
        name, expr = stmt.split("=")
        sm = re.fullmatch(r"([a-z0-9])(?:([+\-*])(\d))?", expr)
        assert sm, stmt
        a = env[sm.group(1)] if sm.group(1).isalpha() else int(sm.group(1))
        if sm.group(2):
            b = int(sm.group(3))
            a = {"+": a + b, "-": a - b, "*": a * b}[sm.group(2)]
        env[name] = a % 10
    return str(env[m.group(2)])


SOLVERS = {
    "pointer": _solve_pointer,
    "permutation": _solve_permutation,
    "arithmetic": _solve_arithmetic,
    "variables": _solve_variables,
}


def test_answers_are_correct_for_every_task():
    examples = generate_examples(800, seed=3, difficulty=6)
    assert {ex.task for ex in examples} == set(TASKS)
    assert {ex.steps for ex in examples} == set(range(1, 7))
    for ex in examples:
        assert SOLVERS[ex.task](ex.prompt) == ex.answer, ex.text
        assert ex.text == f"{ex.prompt} {ex.answer}"
        assert ex.prompt.endswith("answer:")
        assert set(ex.text) <= set("abcdefghijklmnopqrstuvwxyz0123456789 >.,:;=?()+-*")


def test_pointer_needs_every_hop_and_steps_are_encoded():
    rng = random.Random(0)
    for steps in (1, 2, 5, 9):
        ex = make_example("pointer", rng, steps)
        assert f"{steps} hops" in ex.prompt and ex.steps == steps
        m = re.search(r"start ([a-z])", ex.prompt)
        links = dict(e.split(">") for e in ex.prompt.split(": ")[1].split(". ")[0].split(" "))
        seen, node = [m.group(1)], m.group(1)
        for _ in range(steps):
            node = links[node]
            seen.append(node)
        assert len(set(seen)) == steps + 1  # the chain has distinct nodes: no shortcut through a short cycle
    ex = make_example("permutation", random.Random(1), 3)
    assert ex.prompt.count(" then ") == 2
    ex = make_example("arithmetic", random.Random(1), 4)
    assert len(re.findall(r"[+\-*]", ex.prompt)) == 4
    assert "*0" not in ex.prompt and "*5" not in ex.prompt
    with pytest.raises(ValueError):
        make_example("nope", rng, 2)
    with pytest.raises(ValueError):
        make_example("pointer", rng, 0)


def test_generate_examples_deterministic():
    a = generate_examples(50, seed=1, difficulty=3)
    assert a == generate_examples(50, seed=1, difficulty=3)
    assert a != generate_examples(50, seed=2, difficulty=3)
    assert [ex.task for ex in a[:8]] == list(TASKS) * 2
    assert max(ex.steps for ex in a) <= 3


def test_pydoc_documents():
    docs = pydoc_documents(1500)
    assert docs == pydoc_documents(1500)
    assert len(docs) > 200
    assert sum(map(len, docs)) > 300_000
    assert all(d.strip() for d in docs)
    assert sum(len(d) > 1500 for d in docs) < len(docs) * 0.05  # only single long paragraphs exceed the cap


# ------------------------------------------------------------------------------------------------ corpus


SMALL = dict(synthetic_docs=1500, eval_synthetic_docs=200, vocab_size=512, difficulty=3, text_fraction=0.3)


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("demo") / "corpus"
    meta = build_demo_corpus(str(path), seed=0, **SMALL)
    return path, meta


def test_demo_corpus_is_deterministic(small_corpus, tmp_path):
    path, meta = small_corpus
    again = build_demo_corpus(str(tmp_path / "again"), seed=0, **SMALL)
    assert again["content_hash"] == meta["content_hash"]
    for split in meta["splits"].values():
        for shard in split["shards"]:
            assert (path / shard["file"]).read_bytes() == (tmp_path / "again" / shard["file"]).read_bytes()
    assert (path / "tokenizer" / "tokenizer.json").read_bytes() == (
        tmp_path / "again" / "tokenizer" / "tokenizer.json"
    ).read_bytes()


def test_demo_corpus_splits_and_held_out_data(small_corpus):
    path, meta = small_corpus
    assert set(meta["splits"]) == {"train", "eval_text", "eval_synthetic"}
    assert meta["demo"]["documents"]["train_synthetic"] == SMALL["synthetic_docs"]
    assert meta["demo"]["documents"]["eval_synthetic"] == SMALL["eval_synthetic_docs"]
    with open(path / "demo_corpus.json") as f:
        assert json.load(f)["documents"] == meta["demo"]["documents"]

    for split in meta["splits"]:
        shards = TokenShards(path, split)
        assert shards.num_tokens > 1000 and shards.vocab_size == SMALL["vocab_size"]
    syn = TokenShards(path, "eval_synthetic")
    assert syn.num_documents == SMALL["eval_synthetic_docs"]
    assert len(TokenWindows(syn, 64)) > 0

    def texts(name):
        with open(path / "sources" / f"{name}.jsonl") as f:
            return [json.loads(line)["text"] for line in f]

    train, eval_text, eval_syn = set(texts("train")), texts("eval_text"), texts("eval_synthetic")
    assert not train & set(eval_syn)
    assert not train & set(eval_text)
    assert len(set(eval_syn)) == len(eval_syn)
    # the held-out task instances are answered correctly too
    examples = load_synthetic_examples(str(path))
    assert len(examples) == SMALL["eval_synthetic_docs"]
    assert all(SOLVERS[ex.task](ex.prompt) == ex.answer for ex in examples)
    # the token stream decodes back to the source documents, each followed by EOS
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path / "tokenizer"))
    stream = syn.read(0, syn.num_tokens)
    ends = np.flatnonzero(stream == tok.eos_token_id)
    assert len(ends) == syn.num_documents
    assert tok.decode(stream[: ends[0]].tolist()) == eval_syn[0]


def test_text_fraction_controls_mixture(tmp_path):
    meta = build_demo_corpus(str(tmp_path / "c"), seed=0, **{**SMALL, "text_fraction": 0.2})
    with open(tmp_path / "c" / "sources" / "train.jsonl") as f:
        recs = [json.loads(line) for line in f]
    text_chars = sum(len(r["text"]) for r in recs if r["source"] == "pydoc")
    syn_chars = sum(len(r["text"]) for r in recs if r["source"] == "synthetic")
    assert 0.2 <= text_chars / (text_chars + syn_chars) < 0.3
    assert meta["demo"]["documents"]["train_text"] == sum(r["source"] == "pydoc" for r in recs)
    with pytest.raises(ValueError):
        build_demo_corpus(str(tmp_path / "d"), text_fraction=1.5)


def test_default_demo_corpus_size(tmp_path):
    meta = build_demo_corpus(str(tmp_path / "default"))
    total = sum(s["tokens"] for s in meta["splits"].values())
    assert 300_000 <= total <= 1_500_000
    assert meta["splits"]["eval_text"]["tokens"] > 10_000
    assert meta["splits"]["eval_synthetic"]["tokens"] > 10_000
    assert os.path.exists(tmp_path / "default" / "meta.json")


# ------------------------------------------------------------------------------------------------ accuracy scorer


class _Oracle(torch.nn.Module):
    """Teacher-forced oracle: predicts the actual next input token everywhere."""

    def __init__(self, vocab: int, shift: int = 1):
        super().__init__()
        self.vocab = vocab
        self.shift = shift
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        target = torch.roll(input_ids, -self.shift, dims=1) if self.shift else input_ids
        return torch.nn.functional.one_hot(target, self.vocab).float()


def test_synthetic_answer_accuracy(small_corpus):
    path, _ = small_corpus
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path / "tokenizer"))
    examples = load_synthetic_examples(str(path))[:40]
    from depthbench.data.synthetic import _answer_token_ids

    for ex in examples:  # the scored positions are exactly the answer tokens
        ids, start = _answer_token_ids(tok, ex)
        assert tok.decode(ids[start:]) == " " + ex.answer
        assert tok.decode(ids[:start]) == ex.prompt
    perfect = synthetic_answer_accuracy(_Oracle(len(tok)), tok, examples, batch_size=16)
    assert perfect["accuracy"] == 1.0 and perfect["n"] == 40
    assert set(perfect["per_task"]) == set(TASKS)
    assert all(v == 1.0 for v in perfect["per_steps"].values())
    copy = synthetic_answer_accuracy(_Oracle(len(tok), shift=0), tok, examples)
    assert copy["accuracy"] < 0.2

    # a model that is right everywhere except on answer tokens scores 0
    answer_ids = {tuple(tok(" " + ex.answer)["input_ids"]) for ex in examples}
    answer_tokens = {t for ids in answer_ids for t in ids}

    class WrongAnswers(_Oracle):
        def forward(self, input_ids):
            logits = super().forward(input_ids)
            nxt = torch.roll(input_ids, -1, dims=1)
            bad = torch.isin(nxt, torch.tensor(sorted(answer_tokens)))
            logits[bad] = torch.nn.functional.one_hot(torch.tensor(tok.pad_token_id), self.vocab).float()
            return logits

    assert synthetic_answer_accuracy(WrongAnswers(len(tok)), tok, examples)["accuracy"] == 0.0
    generated = synthetic_answer_accuracy(_Oracle(len(tok)), tok, n=12, seed=5, difficulty=2)
    assert generated["n"] == 12 and generated["accuracy"] == 1.0
    assert isinstance(examples[0], SyntheticExample)
