"""transformers' common model tests (``ModelTesterMixin`` of the installed release, plus our generation checks)
over every registered architecture, with stock ``LlamaForCausalLM`` as the control.

Each architecture gets the test class a model native to transformers gets: a ``unittest.TestCase`` with
``ModelTesterMixin`` and ``GenerationTesterMixin``, its decoder, causal LM and sequence/token classification heads
as ``all_model_classes`` and :class:`~tests.modeling.transformers_common.suite.CausalLMTester` as its model tester;
``TestLlamaControl`` runs the same tests on Llama. Every test that passes for Llama must pass for every
architecture (docs/compatibility.md#transformers-own-model-tests lists what is skipped for all models here and why).

The run takes 4-12 minutes on 2 cores and needs ``parameterized`` and transformers' test file (fetched from PyPI on
first use, see ``suite.py``), so it is opt-in; CI runs it (``.ci/transformers_common_tests.sh``)::

    pip install parameterized && DEPTHBENCH_TRANSFORMERS_COMMON=1 python -m pytest tests/modeling/transformers_common -q
    DEPTHBENCH_TRANSFORMERS_COMMON=1 python -m pytest tests/modeling/transformers_common -q -k "moda or Llama"
"""

from __future__ import annotations

import os
import unittest
import zlib

import pytest

if os.environ.get("DEPTHBENCH_TRANSFORMERS_COMMON") != "1":
    pytest.skip("transformers' common model tests are opt-in (4-12 min): set DEPTHBENCH_TRANSFORMERS_COMMON=1 "
                "(CI: .ci/transformers_common_tests.sh)", allow_module_level=True)

from transformers import (  # noqa: E402
    LlamaConfig,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
    LlamaForTokenClassification,
    LlamaModel,
)

from depthbench.registry import ARCHITECTURES  # noqa: E402
from tests.modeling.transformers_common.generation_checks import GenerationTesterMixin  # noqa: E402
from tests.modeling.transformers_common.suite import (  # noqa: E402
    CausalLMTester,
    import_model_tester_mixin,
    register_model_names,
)

_COMMON = import_model_tester_mixin()  # asked for: fails here if it cannot be had
ModelTesterMixin = _COMMON.ModelTesterMixin

# The suite's pytest.ini ignores FutureWarning; transformers' tests assert on deprecation warnings they expect.
pytestmark = pytest.mark.filterwarnings("default::FutureWarning", "default::DeprecationWarning")

HEADS = ("AutoModel", "AutoModelForCausalLM", "AutoModelForSequenceClassification", "AutoModelForTokenClassification")


@pytest.fixture(scope="module", autouse=True)
def _architectures_in_transformers_name_tables():
    with register_model_names(ARCHITECTURES.values()):
        yield


def _test_class(name: str, config_class: type, model_classes: tuple) -> type:
    """The common test class of one model family (``model_classes``: decoder, causal LM, the two heads)."""

    def setUp(self):  # noqa: N802  (unittest's name)
        self.model_tester = CausalLMTester(self, config_class)
        # transformers draws test inputs (``ids_tensor``, ``floats_tensor``) from one unseeded module-level RNG, so
        # an outcome near a test's tolerance would be a draw. Seeded by the test's name, every run, and the Llama
        # control and every architecture, get the same inputs for the same test.
        _COMMON.global_rng.seed(zlib.crc32(self._testMethodName.encode()))

    return type(name, (ModelTesterMixin, GenerationTesterMixin, unittest.TestCase), {
        "all_model_classes": model_classes,
        "all_generative_model_classes": (model_classes[1],),
        "setUp": setUp,
        "__module__": __name__,
    })


TestLlamaControl = _test_class(
    "TestLlamaControl", LlamaConfig,
    (LlamaModel, LlamaForCausalLM, LlamaForSequenceClassification, LlamaForTokenClassification),
)
for _arch in ARCHITECTURES.values():
    _name = f"TestCommon_{_arch.id}"
    globals()[_name] = _test_class(_name, _arch.config_class, tuple(_arch.auto_classes[h] for h in HEADS))
