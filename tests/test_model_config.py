"""``depthbench.model_config``: the HF config of a run's model from a shape, a config file or fields, the data's
vocabulary and special ids, and its refusals.

Run: ``python -m pytest tests/test_model_config.py -q``
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from depthbench import registry
from depthbench.config import ModelConfig, RunConfigError, load_run_config
from depthbench.data import TokenShards
from depthbench.model_config import check_field_names, resolve_model_config
from depthbench.shapes import get_shape
from depthbench.training.trainer import train
from tests.helpers import TINY_FIELDS
from tests.tiny_runs import tiny_run


def test_unknown_model_fields_are_refused_naming_the_key(train_data, tmp_path):
    cfg = load_run_config(tiny_run(train_data, tmp_path / "run"), ["model.fields.hiden_size=32"])
    with pytest.raises(RunConfigError, match=r"unknown config key 'model.fields.hiden_size'.*did you mean hidden_size"):
        resolve_model_config(cfg.model, TokenShards(str(train_data)), seq_len=cfg.data.seq_len)
    with pytest.raises(RunConfigError, match="model.fields.hiden_size"):  # before anything is written
        train(cfg)
    assert not (tmp_path / "run" / "run_config.json").exists()


@dataclass
class Data:
    """What the model config reads of the training data (``depthbench.model_config.TokenData``)."""

    data_dir: str = "data"
    vocab_size: int = 300
    eos_token_id: int = 2
    pad_token_id: int | None = 0


def resolve(model: dict, seq_len: int = 32):
    return resolve_model_config(ModelConfig(**model), Data(), seq_len=seq_len)


def test_a_shape_gives_the_grid_fields_and_fields_win():
    shape = get_shape("tiny-L4").config_fields()
    arch, config = resolve({"arch": "hc", "shape": "tiny-L4", "fields": {"intermediate_size": 48}})
    assert arch == "hc" and type(config) is registry.get("hc").config_class
    for key, value in {**shape, "intermediate_size": 48}.items():
        assert getattr(config, key) == value, key
    assert (config.eos_token_id, config.pad_token_id) == (2, 0)  # the data's special ids


def test_the_vocabulary_is_the_models_else_the_tokenizers_and_must_fit_the_tokenizer():
    assert resolve({"fields": TINY_FIELDS})[1].vocab_size == 300  # no size given: the tokenizer's
    assert resolve({"fields": TINY_FIELDS, "vocab_size": 512})[1].vocab_size == 512
    assert resolve({"fields": {**TINY_FIELDS, "vocab_size": 320}})[1].vocab_size == 320
    with pytest.raises(RunConfigError, match=r"vocabulary \(300 tokens, data/meta.json\) exceeds the model's "
                                             r"vocab_size=256; use a model with vocab_size >= 300"):
        resolve({"fields": TINY_FIELDS, "vocab_size": 256})
    _, config = resolve({"fields": {**TINY_FIELDS, "eos_token_id": 5, "pad_token_id": None}})
    assert (config.eos_token_id, config.pad_token_id) == (5, None)  # given fields win over the data's ids


def test_windows_longer_than_the_positions_and_invalid_fields_are_refused():
    with pytest.raises(RunConfigError, match=r"data.seq_len=65 exceeds the model's max_position_embeddings=64"):
        resolve({"fields": TINY_FIELDS}, seq_len=65)
    with pytest.raises(RunConfigError, match=r"invalid model config for 'hc': hc_num_streams=0 is not allowed"):
        resolve({"arch": "hc", "fields": {**TINY_FIELDS, "hc_num_streams": 0}})
    with pytest.raises(RunConfigError, match="model.arch is required"):
        resolve({"arch": None, "fields": TINY_FIELDS})


def test_a_config_file_gives_the_architecture_and_its_fields(tmp_path):
    expected = registry.get("mhc").config_class(**TINY_FIELDS, vocab_size=300)
    expected.save_pretrained(tmp_path)  # an HF config.json, as transformers writes it
    saved = json.loads((tmp_path / "config.json").read_text())
    for target in (tmp_path, tmp_path / "config.json"):
        arch, config = resolve({"arch": None, "config_path": str(target)})
        assert arch == "mhc"
        for key in ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size"):
            assert getattr(config, key) == saved[key]
    arch, _ = resolve({"arch": "hc", "config_path": str(tmp_path)})  # a given arch wins over model_type
    assert arch == "hc"


def test_bad_config_files_are_named(tmp_path):
    with pytest.raises(RunConfigError, match=r"model.config_path: .*missing.json does not exist"):
        resolve({"config_path": str(tmp_path / "missing.json")})
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(RunConfigError, match="does not hold a JSON object"):
        resolve({"config_path": str(tmp_path / "list.json")})
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(RunConfigError, match=r"model.config_path: .*bad.json is not valid JSON"):
        resolve({"config_path": str(tmp_path / "bad.json")})
    (tmp_path / "llama.json").write_text(json.dumps({"model_type": "gpt2", **TINY_FIELDS}))
    with pytest.raises(RunConfigError, match=r"model_type 'gpt2' is not a depthbench architecture; set model.arch "
                                             r"\(one of .*pre_ln"):
        resolve({"arch": None, "config_path": str(tmp_path / "llama.json")})


def test_field_names_are_those_of_the_config_class_and_its_bases():
    config_class = registry.get("hc").config_class
    check_field_names(config_class, {"hidden_size": 8, "hc_num_streams": 2, "rope_theta": 1.0})
    with pytest.raises(RunConfigError, match=r"'model.fields.hc_num_stream'.*did you mean hc_num_streams"):
        check_field_names(config_class, {"hc_num_stream": 2})
    with pytest.raises(RunConfigError, match=r"has no field 'zzz'; valid fields: "):
        check_field_names(config_class, {"zzz": 1})
