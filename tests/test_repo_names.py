"""Tests of ``depthbench.repo_names``: the organisation's repository names, written and read, against names
spelled out by hand (the study's released checkpoints, DepthBench README section 'Checkpoints').

Run: ``python -m pytest tests/test_repo_names.py -q``
"""

from __future__ import annotations

import pytest

from depthbench.registry import arch_ids
from depthbench.repo_names import (
    ORG,
    REPO_ARCH_NAMES,
    REPO_NAME_SOURCES,
    REPO_NAME_VARIANTS,
    converted_repo_name,
    default_repo_name,
    format_budget,
    format_lr,
    parse_repo_name,
    repo_arch_name,
)


def test_budget_labels_have_two_significant_digits_below_100m_and_one_up_to_1b():
    # hand-rounded: docs/hub.md's rule (one significant digit from 100M to 1B, two otherwise)
    cases = {266_816: "270K", 2_040_000: "2M", 20_100_000: "20M", 405_400_000: "400M", 1_615_300_000: "1.6B",
             999_600: "1M", 45_678: "46K", 152_000_000: "200M", 99_960_000: "100M"}
    assert {n: format_budget(n) for n in cases} == cases


def test_learning_rates_are_spelled_as_the_organisation_does():
    assert {lr: format_lr(lr) for lr in (0.002, 2e-3, 0.01, 1e-4, 0.0015, 3e-3, 1.0)} == {
        0.002: "2e-3", 0.01: "1e-2", 1e-4: "1e-4", 0.0015: "1.5e-3", 3e-3: "3e-3", 1.0: "1e0"}


def test_registry_ids_get_the_organisations_spelling_and_read_back():
    assert repo_arch_name("pre_ln") == "preln" and repo_arch_name("peri_ln") == "periln"
    assert repo_arch_name("block_attnres") == "block-attnres" and repo_arch_name("mix_ln") == "mix-ln"
    for arch in arch_ids():
        if repo_arch_name(arch) in REPO_ARCH_NAMES:
            assert REPO_ARCH_NAMES[repo_arch_name(arch)] == arch
    assert set(REPO_ARCH_NAMES.values()) <= set(arch_ids())
    assert set(REPO_NAME_SOURCES) <= set(REPO_ARCH_NAMES) and set(REPO_NAME_VARIANTS) <= set(REPO_ARCH_NAMES)


def test_default_and_converted_names():
    assert ORG == "aspect-ratio-scaling"
    assert default_repo_name("block_attnres", 405_400_000, 32, 0.002) == (
        "aspect-ratio-scaling/block-attnres-lr2e-3-llama-400M-L32-pretrain")
    assert default_repo_name("pre_ln", 20_100_000, 4, None, org="me", seed=2) == "me/preln-llama-20M-L4-pretrain-s2"
    assert converted_repo_name("aspect-ratio-scaling/hc-lr2e-3-llama-400M-L16-pretrain") == (
        "aspect-ratio-scaling/hc-lr2e-3-llama-400M-L16-pretrain-hf")
    assert converted_repo_name("a/b", org="me") == "me/b-hf" and converted_repo_name("b") == f"{ORG}/b-hf"


@pytest.mark.parametrize(("repo", "expected"), [
    ("aspect-ratio-scaling/block-attnres-lr2e-3-llama-400M-L32-pretrain",
     {"arch": "block_attnres", "lr": 0.002, "budget": "400M", "depth": 32, "suffix": "pretrain",
      "name": "block-attnres", "variant": None}),
    ("base-lr1e-2-llama-200M-L8-pretrain",
     {"arch": "pre_ln", "lr": 0.01, "budget": "200M", "depth": 8, "suffix": "pretrain", "name": "base",
      "variant": None}),
    ("org/postnorm-moda-lr2e-3-llama-400M-L24-pretrain/",
     {"arch": "moda", "lr": 0.002, "budget": "400M", "depth": 24, "suffix": "pretrain", "name": "postnorm-moda",
      "variant": "post_norm"}),
    ("me/PreLN-lr0.001-llama-1.6B-L12-pretrain-s3",
     {"arch": "pre_ln", "lr": 0.001, "budget": "1.6B", "depth": 12, "suffix": "pretrain-s3", "name": "preln",
      "variant": None}),
])
def test_release_names_are_read_into_their_settings(repo, expected):
    assert parse_repo_name(repo) == expected


def test_names_off_the_convention_are_clear_errors():
    with pytest.raises(ValueError, match=r"'hc-llama-400M' does not follow <arch>-lr<lr>-llama-<budget>-L<depth>"):
        parse_repo_name("org/hc-llama-400M")
    with pytest.raises(ValueError, match="unknown architecture 'nope'; known: .*block-attnres"):
        parse_repo_name("nope-lr2e-3-llama-400M-L16-pretrain")


def test_a_default_name_reads_back_its_settings():
    parsed = parse_repo_name(default_repo_name("mhc", 266_816, 6, 3e-3, seed=1))
    assert (parsed["arch"], parsed["lr"], parsed["budget"], parsed["depth"], parsed["suffix"]) == (
        "mhc", 0.003, "270K", 6, "pretrain-s1")
