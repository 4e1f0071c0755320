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


def test_reading_a_parquet_file_takes_the_same_memory_at_ten_times_its_size(tmp_path):
    """The reader's Arrow memory (everything pyarrow allocates for it) peaks at the same level for a file of 4 and of
    40 row groups: it reads batch by batch, never ahead through the file."""
    from depthbench.data.sources import Source, iter_source_texts

    table = pa.table({"text": [f"document {i}: " + "some words of text " * 50 for i in range(512)]})

    def peak(groups: int) -> tuple[int, int]:
        path = tmp_path / f"g{groups}.parquet"
        with pq.ParquetWriter(path, table.schema) as writer:
            for _ in range(groups):
                writer.write_table(table)
        top = documents = 0
        for _ in iter_source_texts(Source("parquet", str(path), None), "text", None, "train"):
            documents += 1
            top = max(top, pa.total_allocated_bytes())
        return top, documents

    (small, n_small), (large, n_large) = peak(4), peak(40)
    assert (n_small, n_large) == (4 * 512, 40 * 512)
    assert large <= small * 1.05, (small, large)


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


# ------------------------------------------------------------------------------------- streamed .json (issue 37)
_JSON_FILES = {
    "list": json.dumps([{"text": "a\u00e9\U0001f600 \\u0041", "x": [1, 2.5e3, None]}, "plain", {"text": "b" * 300}]),
    "pretty": json.dumps([{"text": f"doc {i} \u65e5\u672c"} for i in range(40)], indent=2, ensure_ascii=False),
    "empty_list": " [ ] ",
    "column_dict": json.dumps({"text": ["x", "y"], "id": [1, 2]}),
    "data_dict": json.dumps({"data": [{"text": "z"}]}),
    "one_record": json.dumps({"text": "only one"}),
    "json_lines": "\n".join(json.dumps({"text": f"line {i} \u00fc"}) for i in range(30)) + "\n\n",
}


def _stdlib_records(text: str) -> list:
    """What the standard library's whole-file ``json.loads`` makes of the file (the independent reading)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(data, dict):
        data = data["text"] if isinstance(data.get("text"), list) else data.get("data", [data])
    return [r if isinstance(r, str) else r["text"] for r in data]


@pytest.mark.parametrize("window", [1, 7, 64, 1 << 20])
def test_json_is_streamed_as_json_loads_reads_it(tmp_path, monkeypatch, window):
    from depthbench.data import sources

    monkeypatch.setattr(sources._JsonStream, "_READ", window)  # every value crosses windows
    for name, text in _JSON_FILES.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text, encoding="utf-8")
        assert list(sources._iter_json(str(path), "text")) == _stdlib_records(text), name


def test_json_list_memory_is_bounded_by_the_record_not_the_file(tmp_path, monkeypatch):
    from depthbench.data import sources

    path = tmp_path / "big.json"
    records = [{"text": f"document {i} " + "word " * (i % 50)} for i in range(20_000)]  # ~3 MB
    path.write_text(json.dumps(records), encoding="utf-8")
    longest = max(len(json.dumps(r)) for r in records)
    windows = []
    fill = sources._JsonStream._fill

    def spy(self, at_least):
        windows.append(len(self.buf) - self.pos)
        return fill(self, at_least)

    monkeypatch.setattr(sources._JsonStream, "_READ", 4096)
    monkeypatch.setattr(sources._JsonStream, "_fill", spy)
    texts = list(sources._iter_json(str(path), "text"))
    assert texts == [r["text"] for r in records]
    assert len(windows) > 500 and max(windows) <= 4096 + 2 * longest  # the window never holds the file


@pytest.mark.parametrize(("text", "expect"), [
    ('[{"text": "a"},\n {"text": "b"\n "x": 1}]', ":3: malformed JSON (Expecting ',' delimiter at column 2)"),
    ('[{"text": "a"},]', ":1: malformed JSON (Expecting value at column 16)"),
    ('[{"text": "a"}, {"text": "b', ":1: malformed JSON (Unterminated string starting at at column 26)"),
    ('[{"text": "a"}] [1]', ":1: malformed JSON (Extra data after the top-level list at column 17)"),
    ('{"text": "a"}\n{"text": "b"}\n{"text" "c"}\n', ":3: malformed JSON line (Expecting ':' delimiter at column 9)"),
    ("", ":1: malformed JSON (empty file)"),
    ('"a string"', ": expected a JSON list of records, a column dict or a record, got str"),
])
def test_malformed_json_names_file_and_line(tmp_path, monkeypatch, text, expect):
    from depthbench.data import sources

    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    for window in (5, 1 << 20):
        monkeypatch.setattr(sources._JsonStream, "_READ", window)
        with pytest.raises(ValueError) as info:
            list(sources._iter_json(str(path), "text"))
        assert str(info.value).startswith(f"{path}{expect}"), (window, str(info.value))


def test_binary_json_names_the_byte(tmp_path, monkeypatch):
    from depthbench.data import sources

    path = tmp_path / "bin.json"
    data = b'[{"text": "ab\xc3\xa9cd"}, {"text": "x\xff"}]'
    path.write_bytes(data)
    at = data.index(b"\xff")
    for window in (3, 1 << 20):
        monkeypatch.setattr(sources._JsonStream, "_READ", window)
        with pytest.raises(ValueError, match=rf"bin\.json: not UTF-8 text \(byte 0xff at position {at}\)"):
            list(sources._iter_json(str(path), "text"))


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
