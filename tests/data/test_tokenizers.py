"""The tokenizer helpers (``depthbench.data.tokenizers``): ``make_tiny_tokenizer`` is deterministic and reloadable,
and the tokenizers the package writes are self-describing: ``tokenizer_config.json`` names the tokenizer class and
the maximum length of the model they belong to (prepare-data, the demo corpus via ``make_tiny_tokenizer``, and the
Hugging Face exports of training checkpoints, which write the trained model's ``max_position_embeddings``).

Run it with ``python -m pytest tests/data/test_tokenizers.py -q``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from depthbench.data import finalize_tokenizer_config, make_tiny_tokenizer, prepare_data
from tests.helpers import TOKENIZER_TEXTS, pydoc_texts, tiny_model

TEXTS = TOKENIZER_TEXTS * 4


def _tokenizer_config(directory) -> dict:
    return json.loads((directory / "tokenizer_config.json").read_text())


def test_make_tiny_tokenizer_deterministic_and_reloadable(tmp_path, tok):
    other = make_tiny_tokenizer(pydoc_texts(), vocab_size=512, save_dir=str(tmp_path / "tok"))
    assert other.backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()
    assert len(tok) == 512
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token == "<|pad|>"
    assert tok.eos_token_id != tok.pad_token_id
    from transformers import AutoTokenizer

    again = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    text = "def f(x):\n    return x ** 2  # héllo"
    assert again("x = 1")["input_ids"] == tok("x = 1")["input_ids"]
    assert tok.decode(tok(text)["input_ids"]) == text
    with pytest.raises(ValueError, match="vocab_size"):
        make_tiny_tokenizer(["abc"], vocab_size=100)


def test_tiny_tokenizer_saves_its_class_and_the_model_max_length(tmp_path):
    make_tiny_tokenizer(TEXTS, vocab_size=300, save_dir=str(tmp_path), model_max_length=16)
    config = _tokenizer_config(tmp_path)
    assert config["model_max_length"] == 16 and config["tokenizer_class"]
    loaded = AutoTokenizer.from_pretrained(str(tmp_path))
    assert loaded.model_max_length == 16
    assert len(loaded(" ".join(TEXTS), truncation=True)["input_ids"]) == 16  # truncates at the model's length


def test_prepare_data_and_cli_write_the_model_max_length(tmp_path):
    from depthbench.cli import main

    source = tmp_path / "docs.txt"
    source.write_text("\n".join(TEXTS) + "\n")
    tokenizer = make_tiny_tokenizer(TEXTS, vocab_size=300, save_dir=str(tmp_path / "tok"))
    assert tokenizer.model_max_length > 1e20  # transformers' "unset" without a model
    prepare_data([str(source)], tokenizer, str(tmp_path / "data"), progress=False, model_max_length=32)
    assert _tokenizer_config(tmp_path / "data" / "tokenizer")["model_max_length"] == 32
    assert main(["prepare-data", str(source), "--tokenizer", str(tmp_path / "tok"), "-o", str(tmp_path / "cli"),
                 "--model-max-length", "48", "--quiet"]) == 0
    assert _tokenizer_config(tmp_path / "cli" / "tokenizer")["model_max_length"] == 48


def test_checkpoint_export_writes_the_trained_models_max_length(tmp_path):
    from accelerate import Accelerator

    from depthbench.training.checkpoint import Checkpointer

    tokenizer_dir = tmp_path / "tokenizer"
    make_tiny_tokenizer(TEXTS, vocab_size=300, save_dir=str(tokenizer_dir))
    model = tiny_model("pre_ln")
    manager = Checkpointer(str(tmp_path / "ckpts"), Accelerator(cpu=True))
    manager.export_hf(str(tmp_path / "final"), model, str(tokenizer_dir))
    config = _tokenizer_config(tmp_path / "final")
    assert config["model_max_length"] == model.config.max_position_embeddings
    assert config["tokenizer_class"]
    assert _tokenizer_config(tokenizer_dir)["model_max_length"] > 1e20  # the prepared data's copy is untouched


def test_finalize_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="tokenizer_config.json"):
        finalize_tokenizer_config(str(tmp_path))
    make_tiny_tokenizer(TEXTS, vocab_size=300, save_dir=str(tmp_path))
    with pytest.raises(ValueError, match="model_max_length"):
        finalize_tokenizer_config(str(tmp_path), model_max_length=0)
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": ')
    with pytest.raises(ValueError, match=r"tokenizer_config.json is not valid JSON"):
        finalize_tokenizer_config(str(tmp_path))


@pytest.mark.slow  # a fresh interpreter importing transformers (~5-13 s)
def test_tokenizer_loads_without_the_package_and_without_a_prompt(tmp_path):
    """A fresh interpreter without depthbench and with no stdin: AutoTokenizer reads the class from the file."""
    make_tiny_tokenizer(TEXTS, vocab_size=300, save_dir=str(tmp_path), model_max_length=24)
    code = ("import sys; sys.modules['depthbench'] = None\n"
            "from transformers import AutoTokenizer\n"
            f"t = AutoTokenizer.from_pretrained({str(tmp_path)!r})\n"
            "print(type(t).__name__, t.model_max_length)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Do you wish to run the custom code" not in proc.stdout + proc.stderr
    assert proc.stdout.split()[-1] == "24"
