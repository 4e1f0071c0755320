"""Tokenizing chunks of documents (``depthbench.data.encode``): the ids are the tokenizer's own call's (transformers
is the oracle), every document ends in exactly one EOS, chunks come back in order from every path (this thread,
worker threads, a process pool), and every worker tokenizes on one core: the tokenizers library's own thread pool is
off while the pipeline runs, so ``num_workers`` is the number of cores used."""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest

import depthbench.data.encode as encode_mod
import depthbench.data.prepare as prepare_mod
from depthbench.data import prepare_data
from tests.data.test_prepare import _EosAppendingTokenizer
from tests.helpers import expected_ids, pydoc_paragraphs, read_split, split_documents, write_jsonl


def test_stand_in_tokenizers_are_called_as_such(tmp_path, tok):
    """A tokenizer that is not a transformers fast tokenizer is called (``tokenizer(texts)``), whatever attributes it
    has; a fast tokenizer whose backend would give other ids than its own call is called too."""
    texts = pydoc_paragraphs(50)
    src = write_jsonl(tmp_path / "d.jsonl", texts)
    assert encode_mod.fast_backend(_EosAppendingTokenizer(tok)) is None and encode_mod.fast_backend(tok) is not None
    encoder = encode_mod.Encoder(tok)
    encoder.check(texts)
    assert encoder.backend is not None and encoder(texts) == tok(texts)["input_ids"]
    odd = copy.deepcopy(tok)
    odd.split_special_tokens = True  # its call now splits "<|endoftext|>"; the check must see that
    encoder = encode_mod.Encoder(odd)
    encoder.backend.encode_special_tokens = False
    encoder.check(["a<|endoftext|>b"])
    assert encoder.backend is None
    meta = prepare_data([src], odd, str(tmp_path / "o"), progress=False, num_workers=2)
    docs = split_documents(read_split(tmp_path / "o"), tok.eos_token_id)
    assert docs == [expected_ids(odd, t) for t in texts] and meta["splits"]["train"]["documents"] == 50


def _chunks(texts: list[str], sizes: list[int]) -> list[tuple[int, list[str]]]:
    out, start = [], 0
    for i, size in enumerate(sizes):
        out.append((i, texts[start:start + size]))
        start += size
    return out


@pytest.mark.parametrize("workers", [1, 2, encode_mod.THREADS_UP_TO + 1])  # this thread, threads, a process pool
def test_chunks_come_back_in_order_with_the_tokenizers_own_ids(tok, workers):
    texts = pydoc_paragraphs(120)
    texts[3] = texts[3] + tok.eos_token  # already ends in EOS: not doubled
    chunks = _chunks(texts, [1, 37, 2, 50, 30])
    out = list(encode_mod.encode_chunks(chunks, tok, workers, tok.eos_token_id, True, np.dtype(np.uint16), ""))
    assert [meta for meta, _, _ in out] == [0, 1, 2, 3, 4]
    for (_, chunk), (_, flat, lengths) in zip(chunks, out):
        want = [expected_ids(tok, t) for t in chunk]
        assert flat.dtype == np.uint16 and lengths.tolist() == [len(w) for w in want]
        assert flat.tolist() == [i for w in want for i in w]
    assert tok(texts[3])["input_ids"][-1] == tok.eos_token_id and out[1][2][2] == len(tok(texts[3])["input_ids"])


@pytest.mark.parametrize("workers", [1, 2, encode_mod.THREADS_UP_TO])
def test_every_worker_tokenizes_with_the_librarys_thread_pool_off(tok, workers, monkeypatch):
    """One worker is one core: each call of the tokenizer runs with ``TOKENIZERS_PARALLELISM=false`` (read by the
    tokenizers library at each call), in this thread and in worker threads; the caller's setting comes back."""
    seen = []
    real = encode_mod.encode_documents

    def recording(encoder, texts, *args):
        seen.append(os.environ.get("TOKENIZERS_PARALLELISM"))
        return real(encoder, texts, *args)

    monkeypatch.setattr(encode_mod, "encode_documents", recording)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    texts = pydoc_paragraphs(40)
    out = list(encode_mod.encode_chunks(_chunks(texts, [10, 10, 10, 10]), tok, workers, tok.eos_token_id, True,
                                        np.dtype(np.uint16), ""))
    assert len(out) == 4 and seen == ["false"] * 4
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"


def test_an_id_that_does_not_fit_the_dtype_is_refused(tok):
    with pytest.raises(ValueError, match=r"token id out of range for dtype uint8: min \d+, max \d+"):
        encode_mod.encode_documents(encode_mod.Encoder(tok), ["a long enough sentence"], tok.eos_token_id, True,
                                    np.dtype(np.uint8))


def test_prepare_data_uses_every_usable_core_by_default(tmp_path, tok, monkeypatch):
    """``num_workers=None`` (the default, and ``prepare-data`` without ``--num-workers``) is
    :func:`depthbench.procfs.usable_cores`; a given number is kept."""
    asked = []
    real = prepare_mod.encode_chunks

    def recording(chunks, encoder, num_workers, *args):
        asked.append(num_workers)
        return real(chunks, encoder, num_workers, *args)

    monkeypatch.setattr(prepare_mod, "encode_chunks", recording)
    monkeypatch.setattr(prepare_mod, "usable_cores", lambda: 3)
    src = write_jsonl(tmp_path / "d.jsonl", pydoc_paragraphs(20))
    prepare_data([src], tok, str(tmp_path / "a"), progress=False)
    prepare_data([src], tok, str(tmp_path / "b"), progress=False, num_workers=1)
    assert asked == [3, 1]
