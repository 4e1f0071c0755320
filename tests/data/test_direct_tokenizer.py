"""``prepare-data --tokenizer DIR`` without transformers (issue 37): the first run loads DIR with transformers and
records what it found (``depthbench.data.tokenizers.record_direct``); a later run on the same bytes loads a
``DirectTokenizer`` from ``tokenizer.json`` alone and must write exactly what the transformers run wrote (shards,
``meta.json``, the saved tokenizer folder), without importing transformers or torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from depthbench.data import make_tiny_tokenizer, prepare_data
from depthbench.data.tokenizers import DirectTokenizer, load_direct
from tests.helpers import pydoc_texts


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    texts = pydoc_texts()
    make_tiny_tokenizer(texts[:200], vocab_size=400, save_dir=str(tmp_path / "tok"))
    corpus = tmp_path / "c.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for t in texts[:300]:
            f.write(json.dumps({"text": t}) + "\n")
        f.write(json.dumps({"text": "ends in eos<|endoftext|>"}) + "\n")
    return tmp_path, str(tmp_path / "tok"), str(corpus)


def _files(folder) -> dict:
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            data = open(path, "rb").read()
            if name == "meta.json":
                meta = json.loads(data)
                meta.pop("created")
                data = json.dumps(meta, sort_keys=True).encode()
            out[os.path.relpath(path, folder)] = data
    return out


_RUN = """
import sys
from depthbench.data import prepare_data
prepare_data([sys.argv[1]], sys.argv[2], sys.argv[3], eval_fraction=0.05, shard_tokens=20000, num_workers=2,
             progress=False, model_max_length=int(sys.argv[4]) if len(sys.argv) > 4 else None)
print(sorted(m for m in ("transformers", "torch") if m in sys.modules))
"""


def _run(*args) -> str:
    proc = subprocess.run([sys.executable, "-c", _RUN, *map(str, args)], capture_output=True, text=True, check=True,
                          env=dict(os.environ))
    return proc.stdout.strip().splitlines()[-1]


def test_second_run_skips_transformers_and_writes_the_same_bytes(setup):
    tmp, tok, corpus = setup
    assert load_direct(tok) is None  # nothing recorded yet
    assert _run(corpus, tok, tmp / "first") == "['torch', 'transformers']"
    assert isinstance(load_direct(tok), DirectTokenizer)
    assert _run(corpus, tok, tmp / "second") == "[]"  # neither imported
    first, second = _files(tmp / "first"), _files(tmp / "second")
    assert len([f for f in first if f.endswith(".bin")]) > 2  # several shards, both splits
    assert first == second
    # and what transformers itself makes of the saved folder is what a run with it writes
    from transformers import AutoTokenizer

    saved = AutoTokenizer.from_pretrained(str(tmp / "second" / "tokenizer"))
    assert saved.eos_token_id == load_direct(tok).eos_token_id and len(saved) == len(load_direct(tok))


@pytest.mark.slow  # 12-32 s on 2 cores: the default suite stays near 10 minutes
def test_model_max_length_and_changed_bytes_need_their_own_check(setup):
    tmp, tok, corpus = setup
    _run(corpus, tok, tmp / "a")
    assert load_direct(tok, model_max_length=256) is None  # a different saved tokenizer_config.json
    assert _run(corpus, tok, tmp / "b", 256) == "['torch', 'transformers']"
    assert _run(corpus, tok, tmp / "c", 256) == "[]"
    assert _files(tmp / "b") == _files(tmp / "c")
    assert json.loads((tmp / "c" / "tokenizer" / "tokenizer_config.json").read_text())["model_max_length"] == 256
    config = os.path.join(tok, "tokenizer_config.json")
    with open(config, "a", encoding="utf-8") as f:
        f.write("\n")
    assert load_direct(tok) is None and load_direct(tok, model_max_length=256) is None


def test_a_record_that_does_not_match_the_backend_is_ignored(setup):
    tmp, tok, corpus = setup
    _run(corpus, tok, tmp / "a")
    (record,) = (tmp / "hf" / "depthbench" / "tokenizer_checks").iterdir()
    data = json.loads(record.read_text())
    data["eos_token_id"] = 1  # now the fingerprint it was recorded with does not hold
    record.write_text(json.dumps(data))
    assert load_direct(tok) is None


def test_in_memory_tokenizers_are_not_recorded(setup, tok):
    tmp, _, corpus = setup
    prepare_data([corpus], tok, str(tmp / "m"), progress=False)
    assert not (tmp / "hf" / "depthbench" / "tokenizer_checks").exists()
