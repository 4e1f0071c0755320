"""``prepare_data``'s output is pinned: for a fixed small corpus (generated here from a seeded word list, in every
input format) and a fixed tiny tokenizer, the shard files, their sha256 digests, ``meta.json``'s ``content_hash`` and
the eval split equal the values that the pipeline before issue 37's rewrite (main at 544df28: per-document
``tokenizer(texts)`` calls, whole-file sha256 pre-pass, buffered shard writes) produced. Faster pipelines must write
the same bytes (the format is ``FORMAT_VERSION`` 1, unchanged).

The expected digests depend on the ``tokenizers`` BPE trainer being deterministic for a given version (it is); a
``tokenizers`` upgrade that changes BPE training would change them, and the test then says so.
"""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from depthbench.data import make_tiny_tokenizer, prepare_data

_WORDS = (
    "the of and to in is that it was for on are as with his they at be this from have or by one had not but what "
    "all were when we there can an your which their said if do will each about how up out them then she many some "
    "so these would other into has more her two like him see time could no make than first been its who now people "
    "my made over did down only way find use may water long little very after words called just where most know "
    "river mountain harbour library engine garden winter council letter morning village question history"
).split()


def pinned_corpus() -> list:
    """~600 documents of English-like prose (and a few odd ones: unicode, an EOS already at the end, blank, a
    number), deterministic."""
    rng = random.Random(37)
    docs: list = []
    for i in range(600):
        sentences = []
        for _ in range(rng.randint(1, 6)):
            words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 18))]
            sentences.append(" ".join(words).capitalize() + rng.choice([".", ".", ".", "?", "!"]))
        docs.append(" ".join(sentences))
        if i % 97 == 5:
            docs.append("Caf\u00e9 na\u00efve \u2014 \u00fcber \u65e5\u672c\u8a9e \U0001f600 done.")
        if i % 131 == 7:
            docs.append("already ends in eos<|endoftext|>")
        if i % 149 == 3:
            docs.append("   ")
    return docs


def write_inputs(folder) -> dict:
    """The corpus as a JSON-lines file (with a null text and a number), a text file (CRLF lines, blank lines), a
    JSON list and a parquet file; returns ``{kind: path}``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = pinned_corpus()
    folder.mkdir(parents=True, exist_ok=True)
    paths = {k: folder / f"corpus.{k}" for k in ("jsonl", "txt", "json", "parquet")}
    with open(paths["jsonl"], "w", encoding="utf-8") as f:
        for i, d in enumerate(docs[:300]):
            f.write(json.dumps({"text": d, "id": i}) + "\n")
        f.write('{"text": null}\n\n{"text": 12345}\n')
    with open(paths["txt"], "wb") as f:
        for d in docs[300:420]:
            f.write(d.encode("utf-8") + (b"\r\n" if len(d) % 3 == 0 else b"\n\n"))
    paths["json"].write_text(json.dumps([{"text": d} for d in docs[420:500]]), encoding="utf-8")
    pq.write_table(pa.table({"text": docs[500:]}), paths["parquet"], row_group_size=17)
    return {k: str(p) for k, p in paths.items()}


def _digests(out, meta) -> dict:
    shards = {s["file"]: s["sha256"] for split in meta["splits"].values() for s in split["shards"]}
    for name, digest in shards.items():  # the recorded digest is the file's
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name
    return {"content_hash": meta["content_hash"], "shards": shards,
            "counts": {k: (v["documents"], v["tokens"]) for k, v in meta["splits"].items()}}


# Produced by main at 544df28 (before issue 37) with _pinned_run below.
EXPECTED = {   'content_hash': '485aa4dc51a65c0191657a61bb753133f632b4f7a9a71ee228c2f6597f9fa4ae',
    'counts': {'eval': (162, 12323), 'train': (451, 37482)},
    'shards': {   'eval/shard_00000.bin': '1c06df9630ab171cbf074870169b18a5fbc235d1330e2ef63c1fc838320706a5',
                  'eval/shard_00001.bin': '09af6ad1716fb1fa7e5d7a6f851e7c201b104709aa801d755cfbb4855680c821',
                  'eval/shard_00002.bin': '7fd4d99b47199d492a5c41ae4fc4d6ca7d40de27445e07e4f70b5344ca93ebac',
                  'train/shard_00000.bin': '8aa44fbfe9260109f0767dc984ada838fccedf5cf694aa0359f72c3d225e2ebe',
                  'train/shard_00001.bin': 'fe7ebd3b21d526163600a737a8fa332ff21c01eb198cbbf60289ccc00dab7400',
                  'train/shard_00002.bin': 'e69427253bb55d41543e4515a417045dfc535e1bb39002784b7826a9b49a5c18',
                  'train/shard_00003.bin': '2e7db751dd97a3f49a22eb148648b9b7ee05eb6f9d845199a6a1740581e66346',
                  'train/shard_00004.bin': 'a706e970232ec3c65ff67e437107849a6d0452e96c759206d37e868d795ffd0a',
                  'train/shard_00005.bin': '5d73e18a9997b067b55b26f6f9412e9cf30739efe2443d1fe3b0f58c1d5a4f5f',
                  'train/shard_00006.bin': 'ae32550a6005c5f2d12763ce2dd7b46eb4fede3102c74dbebf3494296da6cf57'}}


def _pinned_run(tmp_path, num_workers: int) -> dict:
    inputs = write_inputs(tmp_path / "in")
    tok = make_tiny_tokenizer(pinned_corpus(), vocab_size=400, save_dir=str(tmp_path / "tok"))
    out = tmp_path / f"out{num_workers}"
    meta = prepare_data([inputs["jsonl"], inputs["txt"], inputs["json"]], str(tmp_path / "tok"), str(out),
                        eval_fraction=0.1, eval_files=[inputs["parquet"]], shard_tokens=6000,
                        num_workers=num_workers, progress=False)
    assert meta["vocab_size"] == len(tok) == 400
    return _digests(out, meta)


@pytest.mark.parametrize("num_workers", [1, 2])
def test_output_is_byte_identical_to_the_pinned_pipeline(tmp_path, num_workers):
    got = _pinned_run(tmp_path, num_workers)
    assert got == EXPECTED


if __name__ == "__main__":  # print the expected values (run with the pipeline the values are pinned to)
    import pathlib
    import pprint
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        pprint.pprint(_pinned_run(pathlib.Path(d), 1), width=118)
