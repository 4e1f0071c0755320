"""`depthbench prepare-data` end to end through the CLI entry point (in-process), and its exit codes (those of every
command, ``depthbench.errors``: 2 for bad input such as a missing or unreadable file or an unwritable output, 1 when
the work fails, e.g. on a full disk)."""

import errno
import json
import os

import depthbench.data.sources as sources_mod
import depthbench.data.writer as writer_mod
from depthbench.cli import main
from depthbench.data import TokenShards, make_tiny_tokenizer


def test_prepare_data_cli_writes_shards_and_eval_split(tmp_path, capsys):
    docs = [f"document number {i} says hello to the world" for i in range(40)]
    (tmp_path / "in.txt").write_text("\n".join(docs) + "\n")
    (tmp_path / "held.txt").write_text("held out text one\nheld out text two\n")
    make_tiny_tokenizer(docs, vocab_size=300, save_dir=str(tmp_path / "tok"))
    out = tmp_path / "data"
    code = main(["prepare-data", str(tmp_path / "in.txt"), "--tokenizer", str(tmp_path / "tok"), "-o", str(out),
                 "--eval-files", str(tmp_path / "held.txt"), "--quiet"])
    assert code in (0, None)
    printed = capsys.readouterr().out
    assert "train: 40 documents" in printed and "eval: 2 documents" in printed
    meta = json.loads((out / "meta.json").read_text())
    train = TokenShards(str(out), split="train")
    assert train.num_tokens == meta["splits"]["train"]["tokens"] > 40
    tokens = train.read(0, train.num_tokens)
    assert int((tokens == train.eos_token_id).sum()) == 40  # one EOS per document


def test_prepare_data_cli_missing_input_is_a_clear_error(tmp_path, capsys):
    make_tiny_tokenizer(["a b c"] * 10, vocab_size=260, save_dir=str(tmp_path / "tok"))
    code = main(["prepare-data", str(tmp_path / "nothing-*.txt"), "--tokenizer", str(tmp_path / "tok"),
                 "-o", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err
    assert "no input files match" in err and "nothing-*.txt" in err
    assert not (tmp_path / "out" / "meta.json").exists()


def _inputs(tmp_path):
    """An input file and a saved tokenizer folder."""
    docs = [f"line {i} of the input" for i in range(20)]
    (tmp_path / "in.txt").write_text("\n".join(docs) + "\n")
    make_tiny_tokenizer(docs, vocab_size=270, save_dir=str(tmp_path / "tok"))
    return tmp_path / "in.txt", tmp_path / "tok"


def test_unreadable_input_exits_2(tmp_path, capsys, monkeypatch):
    source, tokenizer = _inputs(tmp_path)
    real_open = open

    def open_refusing_the_input(path, *args, **kwargs):  # the tests may run as root, who reads any file
        if os.fspath(path) == str(source):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(sources_mod, "open", open_refusing_the_input, raising=False)
    code = main(["prepare-data", str(source), "--tokenizer", str(tokenizer), "-o", str(tmp_path / "out"), "--quiet"])
    assert code == 2
    err = capsys.readouterr().err
    assert "Permission denied" in err and str(source) in err and "Traceback" not in err
    assert not (tmp_path / "out" / "meta.json").exists()


def test_unwritable_output_exits_2(tmp_path, capsys):
    source, tokenizer = _inputs(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code = main(["prepare-data", str(source), "--tokenizer", str(tokenizer), "-o", str(blocker / "out"), "--quiet"])
    assert code == 2
    err = capsys.readouterr().err
    assert "Not a directory" in err and str(blocker) in err and "Traceback" not in err


def test_full_disk_exits_1(tmp_path, capsys, monkeypatch):
    source, tokenizer = _inputs(tmp_path)

    class FullDisk:  # a shard's temporary file on a full disk: its first write fails (naming no file, as the OS does)
        def __init__(self, f):
            self.f = f

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

    real_open = open

    def open_full(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return FullDisk(f) if ".bin.tmp" in os.fspath(path) else f

    monkeypatch.setattr(writer_mod, "open", open_full, raising=False)
    out = tmp_path / "out"
    code = main(["prepare-data", str(source), "--tokenizer", str(tokenizer), "-o", str(out), "--quiet"])
    assert code == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "shard_00000.bin" in err and "Traceback" not in err
    assert not (out / "meta.json").exists() and not (out / "train" / "shard_00000.done.json").exists()
    assert sorted(os.listdir(out / "train")) == []  # nothing half-written: no shard, no temporary file
