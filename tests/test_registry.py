"""The architecture registry is consistent: unique ids, resolvable classes, Auto-class registration, model cards.

Run it with ``python -m pytest tests/test_registry.py -q``.
"""

from __future__ import annotations

import re

import pytest
from depthbench.modeling.configuration_depthbench import DepthBenchConfig
from depthbench.modeling.modeling_depthbench import DepthBenchForCausalLM, DepthBenchModel
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

import depthbench
from depthbench import registry
from tests.helpers import ARCH_IDS

ARCH = pytest.mark.parametrize("arch_id", ARCH_IDS)


def test_ids_are_unique_and_well_formed():
    ids = [a.id for a in registry._TABLE]
    assert len(ids) == len(set(ids)), f"duplicate ids: {[i for i in ids if ids.count(i) > 1]}"
    assert list(registry.ARCHITECTURES) == ids == registry.arch_ids()
    for arch_id in ids:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", arch_id), arch_id
    assert "pre_ln" in ids


def test_model_types_are_unique_and_not_native_transformers():
    types = [registry.get(a).model_type for a in ARCH_IDS]
    assert len(types) == len(set(types))
    for model_type in types:
        assert model_type.startswith("depthbench_")


@ARCH
def test_entry_resolves_to_its_classes(arch_id):
    arch = registry.get(arch_id)
    assert arch.id == arch_id
    module_name, class_name = arch.causal_lm.split(".")
    assert module_name.startswith("modeling_") and class_name.endswith("ForCausalLM")  # a file may hold a family
    assert issubclass(arch.causal_lm_class, DepthBenchForCausalLM)
    assert issubclass(arch.model_class, DepthBenchModel) and arch.model_class is not DepthBenchModel
    assert issubclass(arch.config_class, DepthBenchConfig) and issubclass(arch.config_class, PretrainedConfig)
    assert issubclass(arch.causal_lm_class, PreTrainedModel)
    assert arch.causal_lm_class.config_class is arch.config_class
    assert arch.model_class.config_class is arch.config_class
    assert arch.model_type == f"depthbench_{arch_id}"
    assert arch.description.strip()
    assert re.fullmatch(r"\d{4}\.\d{4,5}", arch.arxiv), arch.arxiv
    assert arch.paper_url == f"https://arxiv.org/abs/{arch.arxiv}"
    assert isinstance(arch.family, str) and arch.family
    assert arch.family == arch.model_class.wiring_class.family  # the table's family is the wiring's
    assert arch.config_class.model_type == arch.model_type


def test_get_unknown_id_lists_valid_ids():
    with pytest.raises(ValueError, match="nope") as excinfo:
        registry.get("nope")
    for arch_id in ARCH_IDS:
        assert arch_id in str(excinfo.value)


def test_resolve_archs():
    assert registry.resolve_archs("all") == ARCH_IDS
    assert registry.resolve_archs(f" {ARCH_IDS[0]} ,") == [ARCH_IDS[0]]
    assert registry.resolve_archs([ARCH_IDS[-1], ARCH_IDS[0]]) == [ARCH_IDS[-1], ARCH_IDS[0]]
    with pytest.raises(ValueError, match="nope"):
        registry.resolve_archs("pre_ln,nope")
    with pytest.raises(ValueError):
        registry.resolve_archs("")


@ARCH
def test_auto_classes_resolve_after_import(arch_id):
    arch = depthbench.get(arch_id)
    assert CONFIG_MAPPING[arch.model_type] is arch.config_class
    config = AutoConfig.for_model(arch.model_type)
    assert type(config) is arch.config_class
    small = arch.config_class(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2)
    assert type(AutoModel.from_config(small)) is arch.model_class
    assert type(AutoModelForCausalLM.from_config(small)) is arch.causal_lm_class


@ARCH
def test_build_helpers(arch_id):
    fields = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    config = depthbench.build_config(arch_id, **fields)
    assert type(config) is registry.get(arch_id).config_class
    model = depthbench.build_model(arch_id, **fields)
    assert type(model) is registry.get(arch_id).causal_lm_class
    assert type(depthbench.build_model(arch_id, config=config)) is registry.get(arch_id).causal_lm_class


@ARCH
def test_card_names_its_paper(arch_id):
    arch = registry.get(arch_id)
    card = arch.card
    assert card.strip() and card != arch.description
    assert arch.arxiv in card or arch.paper_url in card, f"{arch_id} card does not cite arXiv {arch.arxiv}"


@pytest.mark.parametrize("typo, meant", [("preln", "pre_ln"), ("pre-ln", "pre_ln"), ("Pre_LN", "pre_ln"),
                                         ("attn_res", "attnres"), ("denseformr", "denseformer"), ("mhc2", "mhc")])
def test_a_mistyped_id_gets_a_did_you_mean(typo, meant):
    """Lookups name the closest registered id (``_``, ``-`` and case ignored) before the list of valid ids; an id
    close to none gets the list alone."""
    with pytest.raises(ValueError, match=rf"unknown architecture '{typo}' \(did you mean '{meant}'\?\); valid "):
        registry.get(typo)
    with pytest.raises(ValueError) as excinfo:
        registry.resolve_archs(f"hc,{typo}")
    assert f"did you mean '{meant}'?" in str(excinfo.value)
    with pytest.raises(ValueError) as excinfo:
        registry.get("nope")
    assert "did you mean" not in str(excinfo.value)
