"""`depthbench prepare-data` end to end through the CLI entry point (in-process)."""

import json

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
