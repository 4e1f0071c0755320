"""What ``prepare_data`` guarantees besides its output (issue 37 keeps all of it): a run killed with SIGKILL while
writing resumes with its finished shards untouched and ends with the same bytes as an uninterrupted run, leaving no
temporary file; bad input (a binary file named .txt, a malformed JSON line, an empty corpus) is one clear line
naming the file and line, and nothing is written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from depthbench.cli import main
from depthbench.data import make_tiny_tokenizer, prepare_data
from tests.data.test_pinned_output import pinned_corpus
from tests.helpers import write_jsonl

_SLOW_PREPARE = """
import sys, time
import depthbench.data.writer as writer
real = writer.SplitWriter.flush
def slow_flush(self, doc_end):  # a slow disk: one shard every 0.2 s, so the kill lands mid-run
    time.sleep(0.2)
    real(self, doc_end)
writer.SplitWriter.flush = slow_flush
from depthbench.data import prepare_data
prepare_data([sys.argv[1]], sys.argv[2], sys.argv[3], shard_tokens=2000, eval_fraction=0.1, num_workers=2,
             progress=False)
"""


def test_kill_9_mid_run_resumes_with_finished_shards_untouched(tmp_path):
    docs = pinned_corpus() * 3
    src = write_jsonl(tmp_path / "d.jsonl", docs)
    make_tiny_tokenizer(docs[:200], vocab_size=300, save_dir=str(tmp_path / "tok"))
    whole = prepare_data([src], str(tmp_path / "tok"), str(tmp_path / "whole"), shard_tokens=2000, eval_fraction=0.1,
                         progress=False)
    n_shards = len(whole["splits"]["train"]["shards"])
    assert n_shards >= 10
    out = tmp_path / "out"
    child = subprocess.Popen([sys.executable, "-c", _SLOW_PREPARE, src, str(tmp_path / "tok"), str(out)],
                             cwd=os.getcwd())
    deadline = time.time() + 120
    while time.time() < deadline and child.poll() is None:
        done = [f for f in os.listdir(out / "train")] if (out / "train").is_dir() else []
        if sum(f.endswith(".done.json") for f in done) >= 3:
            break
        time.sleep(0.02)
    assert child.poll() is None, "the run ended before it could be killed"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert not (out / "meta.json").exists()
    finished = sorted(f for f in os.listdir(out / "train") if f.endswith(".done.json"))
    assert 3 <= len(finished) < n_shards
    kept = {out / "train" / f.replace(".done.json", ".bin") for f in finished}
    stamps = {f: f.stat().st_mtime_ns for f in kept}
    resumed = prepare_data([src], str(tmp_path / "tok"), str(out), shard_tokens=2000, eval_fraction=0.1,
                           progress=False)
    assert resumed["content_hash"] == whole["content_hash"] and resumed["splits"] == whole["splits"]
    assert {f: f.stat().st_mtime_ns for f in kept} == stamps  # finished shards untouched
    leftovers = [f for split in ("train", "eval") for f in os.listdir(out / split) if ".tmp" in f]
    assert leftovers == []


def _tokenizer(tmp_path) -> str:
    make_tiny_tokenizer(["some text to train on"] * 20, vocab_size=270, save_dir=str(tmp_path / "tok"))
    return str(tmp_path / "tok")


@pytest.mark.parametrize("case", ["binary_txt", "malformed_jsonl", "empty"])
def test_bad_input_is_one_clear_line_and_writes_nothing(tmp_path, capsys, case):
    tok = _tokenizer(tmp_path)
    if case == "binary_txt":
        path = tmp_path / "data.txt"
        path.write_bytes(b"fine first line\n" + bytes(range(128, 256)) * 4 + b"\n")
        expect = [f"{path}:2: not UTF-8 text", "binary file"]
    elif case == "malformed_jsonl":
        path = tmp_path / "data.jsonl"
        path.write_text('{"text": "good"}\n' * 1500 + '{"text": "unterminated\n' + '{"text": "after"}\n')
        expect = [f"{path}:1501: malformed JSON line"]
    else:
        path = tmp_path / "data.jsonl"
        path.write_text('{"text": ""}\n\n{"text": "   "}\n')
        expect = ["zero non-empty documents", str(path)]
    out = tmp_path / "out"
    code = main(["prepare-data", str(path), "--tokenizer", tok, "-o", str(out), "--quiet", "--num-workers", "2",
                 "--shard-tokens", "100"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    for needle in expect:
        assert needle in err
    assert not (out / "meta.json").exists()
    written = [f for f in os.listdir(out / "train") if ".tmp" in f or f.endswith(".done.json")] \
        if (out / "train").exists() else []
    # shards completed before the bad line are kept (a fixed input resumes from them); no half-written file
    assert all(".tmp" not in f for f in written)
