"""transformers' own common model tests, at the installed release, over every architecture and a Llama control.

``ModelTesterMixin`` lives in ``tests/test_modeling_common.py`` of the transformers repository; the release's sdist
on PyPI ships that file (but not ``tests/generation/`` nor ``tests/exporters/``, which it imports). This module
finds the file, never copying it into this repository:

1. ``$DEPTHBENCH_TRANSFORMERS_TESTS``: a folder that holds ``test_modeling_common.py`` (an sdist's ``tests/``);
2. the cache ``~/.cache/depthbench/transformers-tests/<version>/`` (``$DEPTHBENCH_CACHE`` moves it), filled on
   first use by ``pip download transformers==<installed version> --no-binary :all: --no-deps`` (PyPI).

It is imported as the package ``transformers_tests_<version>``; its two missing relative imports resolve to
stand-ins: ``.generation.test_utils.GenerationTesterMixin`` is :mod:`.generation_checks` (our generation
contract checks) and ``.exporters.test_export.ExportTesterMixin`` an empty mixin (the ``torch.export`` tests are
not run). :class:`CausalLMTester` plays the part of transformers' ``CausalLMModelTester`` (the same tiny shape
and inputs for every model), and :func:`register_model_names` enters the architectures' classes in transformers'
Auto-class name tables, as a model native to transformers is, so the tests that branch on those tables (which
class is a base model, which head gets which labels) treat them as they treat Llama.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import tarfile
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

import torch
import transformers

from tests.modeling.transformers_common import generation_checks

ENV_FOLDER = "DEPTHBENCH_TRANSFORMERS_TESTS"
COMMON_FILE = "test_modeling_common.py"


def _cache_root() -> Path:
    base = os.environ.get("DEPTHBENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "depthbench")
    return Path(base) / "transformers-tests" / transformers.__version__


def _download(target: Path) -> None:
    """Extract ``tests/test_modeling_common.py`` of the installed release's sdist (from PyPI) into ``target``."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", f"transformers=={transformers.__version__}",
               "--no-binary", ":all:", "--no-deps", "-q", "-d", tmp,
               "--timeout", "30", "--retries", "1"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        archives = sorted(Path(tmp).glob("transformers-*.tar.gz"))
        if proc.returncode != 0 or not archives:
            raise RuntimeError(f"pip download of the transformers {transformers.__version__} sdist failed: "
                               f"{(proc.stderr or proc.stdout)[-500:]}")
        with tarfile.open(archives[0]) as archive:
            member = next((m for m in archive.getmembers() if m.name.endswith(f"/tests/{COMMON_FILE}")), None)
            if member is None:
                raise RuntimeError(f"the transformers {transformers.__version__} sdist has no tests/{COMMON_FILE}")
            target.mkdir(parents=True, exist_ok=True)
            (target / COMMON_FILE).write_bytes(archive.extractfile(member).read())


def common_tests_folder() -> Path:
    """The folder holding transformers' ``test_modeling_common.py`` for the installed release (fetched once)."""
    given = os.environ.get(ENV_FOLDER)
    if given:
        folder = Path(given)
        if not (folder / COMMON_FILE).is_file():
            raise FileNotFoundError(f"${ENV_FOLDER}={given} holds no {COMMON_FILE}")
        return folder
    folder = _cache_root()
    if not (folder / COMMON_FILE).is_file():
        _download(folder)
    return folder


def import_model_tester_mixin() -> types.ModuleType:
    """transformers' ``test_modeling_common`` module, imported as a package with our two stand-in modules."""
    package = "transformers_tests_" + transformers.__version__.replace(".", "_").replace("+", "_")
    if f"{package}.test_modeling_common" in sys.modules:
        return sys.modules[f"{package}.test_modeling_common"]
    folder = common_tests_folder()
    root = types.ModuleType(package)
    root.__path__ = [str(folder)]
    sys.modules[package] = root
    exporters = types.ModuleType(f"{package}.exporters.test_export")
    exporters.ExportTesterMixin = type("ExportTesterMixin", (), {})  # torch.export tests: not run
    stand_ins = {
        f"{package}.generation": types.ModuleType(f"{package}.generation"),
        f"{package}.generation.test_utils": generation_checks,
        f"{package}.exporters": types.ModuleType(f"{package}.exporters"),
        f"{package}.exporters.test_export": exporters,
    }
    sys.modules.update(stand_ins)
    return importlib.import_module(f"{package}.test_modeling_common")


# ================================================================================================ the tester
class CausalLMTester:
    """transformers' ``CausalLMModelTester`` in brief: its tiny shape (vocab 99, d=32, 2 blocks of 2 heads, batch
    13 of 7 tokens, a lower-triangular attention mask) for any config class, the Llama control's and ours."""

    batch_size, seq_length, is_training = 13, 7, True
    vocab_size, hidden_size, num_hidden_layers, intermediate_size = 99, 32, 2, 37
    num_attention_heads = num_key_value_heads = 2

    def __init__(self, parent, config_class: type):
        self.parent = parent
        self.config_class = config_class

    def get_config(self):
        return self.config_class(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, num_key_value_heads=self.num_key_value_heads,
            intermediate_size=self.intermediate_size, max_position_embeddings=512,
            pad_token_id=0, bos_token_id=1, eos_token_id=2,
        )

    def prepare_config_and_inputs_for_common(self):
        generator = torch.Generator().manual_seed(0)
        input_ids = torch.randint(0, self.vocab_size, (self.batch_size, self.seq_length), generator=generator)
        attention_mask = torch.tril(torch.ones_like(input_ids))
        return self.get_config(), {"input_ids": input_ids, "attention_mask": attention_mask}


# ================================================================================================ name tables
_TABLES = {  # transformers' Auto-class name table -> the Auto class whose model it lists
    "MODEL_MAPPING_NAMES": "AutoModel",
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": "AutoModelForCausalLM",
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": "AutoModelForSequenceClassification",
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": "AutoModelForTokenClassification",
    "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES": "AutoModelForQuestionAnswering",
}


@contextlib.contextmanager
def register_model_names(architectures) -> Iterator[None]:
    """Enter each architecture's classes in transformers' Auto-class name tables for the duration, then remove
    exactly what was added (the tables are module globals of ``transformers.models.auto.modeling_auto``)."""
    from transformers.models.auto import modeling_auto

    added = []
    for arch in architectures:
        classes = arch.auto_classes
        for table_name, auto_name in _TABLES.items():
            table = getattr(modeling_auto, table_name)
            if arch.model_type not in table:
                table[arch.model_type] = classes[auto_name].__name__
                added.append((table, arch.model_type))
    try:
        yield
    finally:
        for table, key in added:
            table.pop(key, None)
