"""The corpus of the data-pipeline benchmark (``depthbench bench --make-corpus DIR``): English-prose-like documents
written as ``corpus.jsonl``, ``corpus.parquet`` and ``corpus.txt`` (the same documents, one per line in the text
file), and a 16k byte-level BPE trained on a sample of them in ``DIR/tokenizer``.

The words are those of the standard library's ``pydoc_data`` topics (real English and Python prose), drawn with their
own frequencies (so the word distribution is Zipf-like, as in natural text), in sentences of 4-30 words, documents of
1-40 sentences (lengths log-normal, like web documents). Seeded: the same arguments give the same files.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from depthbench import atomic

FORMATS = ("jsonl", "parquet", "txt")


def _words() -> tuple[list[str], np.ndarray]:
    from pydoc_data.topics import topics

    counts: dict[str, int] = {}
    for text in topics.values():
        for word in re.findall(r"[A-Za-z][A-Za-z'-]*", text):
            counts[word] = counts.get(word, 0) + 1
    words = sorted(counts)
    freq = np.array([counts[w] for w in words], dtype=np.float64)
    return words, freq / freq.sum()


def make_documents(megabytes: float, seed: int = 0) -> list[str]:
    """About ``megabytes`` MB (UTF-8) of English-prose-like documents."""
    rng = np.random.default_rng(seed)
    words, p = _words()
    target = int(megabytes * 1e6)
    docs, size = [], 0
    while size < target:
        n_sent = int(np.clip(rng.lognormal(2.0, 0.9), 1, 40))
        lengths = rng.integers(4, 31, n_sent)
        drawn = rng.choice(len(words), size=int(lengths.sum()), p=p)
        ends = rng.choice([". ", ". ", ". ", "? ", "! ", ", and "], size=n_sent)
        parts, start = [], 0
        for length, end in zip(lengths, ends):
            sentence = " ".join(words[i] for i in drawn[start:start + length])
            parts.append(sentence[:1].upper() + sentence[1:] + end)
            start += length
        doc = "".join(parts).strip()
        docs.append(doc)
        size += len(doc) + 1
    return docs


def write_corpus(folder: str, megabytes: float = 40.0, seed: int = 0, vocab_size: int = 16384) -> dict[str, str]:
    """Write ``corpus.{jsonl,parquet,txt}`` and ``tokenizer/`` under ``folder``; returns ``{format: path}`` (and
    ``"tokenizer"``). Each file is written atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from depthbench.data import make_tiny_tokenizer

    os.makedirs(folder, exist_ok=True)
    docs = make_documents(megabytes, seed)
    paths = {k: os.path.join(folder, f"corpus.{k}") for k in FORMATS}
    atomic.write_text(paths["jsonl"], "".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(docs)))
    atomic.write_text(paths["txt"], "".join(d + "\n" for d in docs))
    tmp = paths["parquet"] + f".tmp{os.getpid()}"
    pq.write_table(pa.table({"text": docs}), tmp, row_group_size=4096)
    os.replace(tmp, paths["parquet"])
    sample = docs[: max(1, len(docs) * 3 // max(1, int(megabytes)))]  # ~3 MB
    paths["tokenizer"] = os.path.join(folder, "tokenizer")
    make_tiny_tokenizer(sample, vocab_size=vocab_size, save_dir=paths["tokenizer"])
    return paths
