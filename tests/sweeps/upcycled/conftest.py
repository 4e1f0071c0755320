"""Fixtures of ``depthbench upcycle-study``'s tests: a small prepared corpus, a tiny random ``LlamaForCausalLM``
source saved by transformers, and the study run once on them (session: shared by the folder's test files)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from depthbench.sweeps.upcycled.study import run_study
from tests.helpers import make_train_data
from tests.sweeps.upcycled.tiny_study import definition


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    return make_train_data(tmp_path_factory.mktemp("study_data") / "data")


@pytest.fixture(scope="session")
def source(tmp_path_factory, data_dir) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(data_dir / "tokenizer")
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         eos_token_id=0, pad_token_id=1)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("study_source") / "llama"
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def study(tmp_path_factory, source, data_dir) -> dict:
    out = tmp_path_factory.mktemp("study") / "out"
    messages: list[str] = []
    paths = run_study(definition(source, data_dir), str(out), log=messages.append)
    return {"out": out, "paths": paths, "log": messages}
