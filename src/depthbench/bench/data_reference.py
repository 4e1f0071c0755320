"""The bare ``tokenizers`` pipeline that ``depthbench bench --data`` measures ``prepare-data`` against: read the
documents (``json.loads`` per JSON line, text lines, parquet record batches), ``tokenizers.Tokenizer.encode_batch``
on batches of 1,024 documents (its own Rust threads: ``RAYON_NUM_THREADS`` set by the caller), EOS appended unless
the document ends in it, ``uint16``/``uint32`` ids written to one file. No splits, no resuming, no hashes: the least
a tokenization pipeline does.

    python -m depthbench.bench.data_reference FILE [FILE ...] --tokenizer DIR -o OUT.bin

prints one JSON line ``{"documents", "tokens"}``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections.abc import Iterator

import numpy as np

from depthbench import atomic

BATCH = 1024


def _texts(path: str) -> Iterator[str]:
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(columns=["text"], batch_size=BATCH):
            yield from batch.column(0).to_pylist()
        return
    with open(path, encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            for line in f:
                if line.strip():
                    yield json.loads(line)["text"]
        else:
            for line in f:
                line = line.rstrip("\n")
                if line.strip():
                    yield line


def run(files: list[str], tokenizer_dir: str, output: str) -> dict:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    eos_token = atomic.read_json(os.path.join(tokenizer_dir, "tokenizer_config.json"))["eos_token"]
    eos = tok.token_to_id(eos_token if isinstance(eos_token, str) else eos_token["content"])
    dtype = np.uint16 if tok.get_vocab_size(with_added_tokens=True) <= 65536 else np.uint32
    docs = tokens = 0
    texts = itertools.chain.from_iterable(_texts(p) for p in files)
    with open(output, "wb") as out:
        while batch := list(itertools.islice(texts, BATCH)):
            ids = [e.ids for e in tok.encode_batch(batch, add_special_tokens=True)]
            ids = [x if x and x[-1] == eos else x + [eos] for x in ids]
            flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype)
            out.write(flat.tobytes())
            docs += len(ids)
            tokens += len(flat)
    return {"documents": docs, "tokens": tokens}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="bare tokenizers reference pipeline (depthbench bench --data)")
    p.add_argument("files", nargs="+")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("-o", "--output", required=True)
    args = p.parse_args(argv)
    print(json.dumps(run(args.files, args.tokenizer, args.output)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
