"""Tests of ``depthbench.sweeps.heldout``: the held-out loss equals cross-entropy by hand over the windows read
from the shard files with numpy (every window, or those within ``--max-tokens``), the tokenizer check (same
tokenizer, the release config's ids only, nothing to check, a mismatch naming both), and the errors for a folder
that is not prepared, a split it does not have and too few tokens.

Run: ``python -m pytest tests/sweeps/test_heldout.py -q``
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from depthbench.sweeps.heldout import (
    HeldOutDataError,
    TokenizerMismatch,
    check_tokenizer,
    heldout_loss,
    open_heldout,
)
from tests.helpers import TINY_FIELDS, build_tiny, make_train_data
from tests.sweeps.released.releases import reference_loss


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_train_data(tmp_path_factory.mktemp("heldout") / "data", max_topics=12)


@pytest.fixture(scope="module")
def model():
    return build_tiny("pre_ln", {**TINY_FIELDS, "vocab_size": 300})


def eval_tokens(data_dir: Path) -> int:
    meta = json.loads((data_dir / "meta.json").read_text())
    return sum(int(np.fromfile(data_dir / s["file"], dtype=np.dtype(meta["dtype"])).size)
               for s in meta["splits"]["eval"]["shards"])


def test_the_loss_is_cross_entropy_by_hand_over_every_window(data_dir, model):
    seq_len = 16
    seen = []
    result = heldout_loss(model, open_heldout(str(data_dir), "eval"), seq_len, batch_size=3,
                          progress=lambda done, n: seen.append((done, n)))
    windows = eval_tokens(data_dir) // seq_len
    assert windows > 3 and windows % 3  # a short last batch: each window weighs the same
    assert (result["windows"], result["tokens"], result["seq_len"]) == (windows, windows * (seq_len - 1), seq_len)
    assert math.isclose(result["loss"], reference_loss(model, data_dir, seq_len), rel_tol=1e-5)
    assert seen[-1] == (windows, windows) and [d for d, _ in seen] == sorted({min(windows, k + 3)
                                                                             for k in range(0, windows, 3)})


def test_max_tokens_takes_the_first_whole_windows(data_dir, model):
    shards = open_heldout(str(data_dir), "eval")
    few = heldout_loss(model, shards, 16, max_tokens=2 * 16 + 15)
    assert (few["windows"], few["tokens"]) == (2, 2 * 15)
    meta = json.loads((data_dir / "meta.json").read_text())
    first = meta["splits"]["eval"]["shards"][0]
    ids = torch.from_numpy(np.fromfile(data_dir / first["file"], dtype=np.dtype(meta["dtype"]))[:32].astype(np.int64))
    with torch.no_grad():
        logits = model(input_ids=ids.view(2, 16)).logits.double()
    by_hand = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                ids.view(2, 16)[:, 1:].reshape(-1))
    assert math.isclose(few["loss"], float(by_hand), rel_tol=1e-5)
    with pytest.raises(HeldOutDataError, match="--max-tokens 10 than one 16-token window: pass a smaller --seq-len"):
        heldout_loss(model, shards, 16, max_tokens=10)


def test_a_folder_that_is_not_prepared_or_lacks_the_split_is_a_clear_error(data_dir, tmp_path):
    with pytest.raises(HeldOutDataError, match="is not a prepared token-shard folder \\(no meta.json\\)"):
        open_heldout(str(tmp_path), "eval")
    with pytest.raises(HeldOutDataError, match="has no split 'test'; its splits: eval, eval_synthetic, train"):
        open_heldout(str(data_dir), "test")


def test_the_folder_s_own_tokenizer_matches_and_another_is_named(data_dir, tmp_path):
    shards = open_heldout(str(data_dir), "eval")
    assert check_tokenizer(shards, "r", str(data_dir / "tokenizer"), None)["status"] == "match"
    other = AutoTokenizer.from_pretrained(data_dir / "tokenizer")
    other.add_tokens(["zzzunseen"])
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(TokenizerMismatch, match=r"was not tokenized with the tokenizer of r \(301 tokens, EOS 0; 1 "
                                                r"token ids differ\)"):
        check_tokenizer(shards, "r", str(tmp_path / "other"), None)


def test_tokenizer_check_without_a_release_tokenizer_uses_the_config_ids(data_dir):
    shards = open_heldout(str(data_dir), "eval")
    tok = AutoTokenizer.from_pretrained(data_dir / "tokenizer")
    ids = {"dataset": {"tokenizer": {"vocab_size": len(tok), "eos_token_id": tok.eos_token_id}}}
    assert check_tokenizer(shards, "r", None, ids)["status"] == "ids-match"
    assert check_tokenizer(shards, "r", None, {"model": {}})["status"] == "unchecked"
    wrong = {"dataset": {"tokenizer": {"vocab_size": 50280, "eos_token_id": 50279}}}
    with pytest.raises(TokenizerMismatch, match="vocab size 300 here, 50280 in the release; EOS id 0 here, 50279"):
        check_tokenizer(shards, "r", None, wrong)
