"""Inputs of ``prepare_data`` (``depthbench.data.sources``): parquet, JSON lines, JSON and text files, folders and
globs, files held out for a split, missing or empty inputs, and a Hub dataset id offline."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from depthbench.data import prepare_data
from tests.helpers import expected_ids, pydoc_paragraphs, read_split, split_documents, write_jsonl


def test_parquet_inputs_with_eval_file(tmp_path, tok):
    paras = pydoc_paragraphs(90)
    ddir = tmp_path / "data"
    ddir.mkdir()
    for i in range(3):
        chunk = paras[i * 30 : (i + 1) * 30]
        table = pa.table({"text": chunk, "score": [float(j) for j in range(len(chunk))]})
        pq.write_table(table, ddir / f"part_{i}.parquet", row_group_size=7)
    out = tmp_path / "out"
    meta = prepare_data(
        [str(ddir / "*.parquet")], tok, str(out), eval_files=[str(ddir / "part_1.parquet")], progress=False
    )
    assert meta["splits"]["train"]["documents"] == 60 and meta["splits"]["eval"]["documents"] == 30
    train_docs = split_documents(read_split(out, "train"), tok.eos_token_id)
    eval_docs = split_documents(read_split(out, "eval"), tok.eos_token_id)
    assert train_docs == [expected_ids(tok, t) for t in paras[:30] + paras[60:]]
    assert eval_docs == [expected_ids(tok, t) for t in paras[30:60]]
    splits = {os.path.basename(s["path"]): s["split"] for s in meta["sources"]}
    assert splits == {"part_0.parquet": "auto", "part_2.parquet": "auto", "part_1.parquet": "eval"}
    # a directory input is the same as the glob
    meta_dir = prepare_data([str(ddir)], tok, str(tmp_path / "out2"), progress=False)
    assert meta_dir["splits"]["train"]["documents"] == 90
    with pytest.raises(ValueError, match="no column 'body'"):
        prepare_data([str(ddir)], tok, str(tmp_path / "out3"), text_field="body", progress=False)


def test_txt_json_inputs_and_max_documents(tmp_path, tok):
    (tmp_path / "a.txt").write_text("first line\n\nsecond line\n   \nthird\n", encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps([{"content": "json one"}, {"content": "json two"}]), encoding="utf-8")
    meta = prepare_data([str(tmp_path / "a.txt")], tok, str(tmp_path / "o1"), progress=False)
    assert meta["splits"]["train"]["documents"] == 3
    docs = split_documents(read_split(tmp_path / "o1"), tok.eos_token_id)
    assert docs == [expected_ids(tok, t) for t in ("first line", "second line", "third")]
    meta = prepare_data([str(tmp_path / "b.json")], tok, str(tmp_path / "o2"), text_field="content", progress=False)
    assert meta["splits"]["train"]["documents"] == 2
    meta = prepare_data(
        [str(tmp_path / "a.txt"), str(tmp_path / "b.json")],
        tok,
        str(tmp_path / "o3"),
        text_field="content",
        max_documents=4,
        progress=False,
    )
    assert meta["splits"]["train"]["documents"] == 4


def test_missing_or_empty_inputs_raise(tmp_path, tok):
    pattern = str(tmp_path / "nothing_here" / "*.parquet")
    with pytest.raises(ValueError, match="nothing_here"):
        prepare_data([pattern], tok, str(tmp_path / "o"), progress=False)
    with pytest.raises(ValueError, match="missing.jsonl"):
        prepare_data([str(tmp_path / "missing.jsonl")], tok, str(tmp_path / "o"), progress=False)
    empty = write_jsonl(tmp_path / "empty.jsonl", ["", "  ", "\n"])
    with pytest.raises(ValueError, match="zero non-empty documents.*empty.jsonl"):
        prepare_data([empty], tok, str(tmp_path / "o"), progress=False)
    with pytest.raises(ValueError, match="no field 'body'"):
        prepare_data([empty], tok, str(tmp_path / "o"), text_field="body", progress=False)
    with pytest.raises(ValueError, match="no inputs"):
        prepare_data([], tok, str(tmp_path / "o"), progress=False)


def test_hub_dataset_id_fails_clearly_offline(tmp_path, tok, monkeypatch):
    import datasets
    from huggingface_hub import constants

    def no_network(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hub")

    monkeypatch.setattr(datasets, "load_dataset", no_network)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(ValueError, match="Hugging Face dataset id.*failed"):
        prepare_data(["someorg/some-dataset"], tok, str(tmp_path / "o"), progress=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE"):
        prepare_data(["someorg/some-dataset"], tok, str(tmp_path / "o"), progress=False)


@pytest.mark.parametrize("name, content, match", [
    ("binary.txt", b"fine line\n\x89PNG\r\n\x1a\n\x00\xff\xfe", r"binary.txt:2: not UTF-8 text .*binary file"),
    ("bad.jsonl", b'{"text": "a"}\n{"text": "b"}\n{"text": "c\n', r"bad.jsonl:3: malformed JSON line"),
    ("bad.jsonl", b'{"text": "a"}\n\xff\n', r"bad.jsonl:2: not UTF-8 text"),
])
def test_bad_input_files_name_the_file_and_line(tmp_path, name, content, match):
    from tests.helpers import make_tokenizer

    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError, match=match):
        prepare_data([str(tmp_path / name)], make_tokenizer(), str(tmp_path / "out"), progress=False)
