"""``depthbench.training.optim.param_groups``: no-weight-decay grouping, architecture optimizer rules (depth-muP /
CompleteP depth-only and depth-width multipliers) and AdamW compatibility.

Run with ``python -m pytest tests/training/test_optim.py -q``.
"""

import pytest
import torch

import depthbench
from depthbench.training.optim import param_groups

TINY = {"vocab_size": 128, "hidden_size": 32, "intermediate_size": 96, "num_hidden_layers": 4,
        "num_attention_heads": 4}
HIDDEN = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def group_of(groups: list[dict]) -> dict[str, dict]:
    return {name: g for g in groups for name in g["param_names"]}


def test_pre_ln_groups_split_on_weight_decay_only():
    model = depthbench.build_model("pre_ln", **TINY)
    groups = param_groups(model, lr=1e-3, weight_decay=0.1, eps=1e-8)
    assert [g["name"] for g in groups] == ["default", "default/no_decay"]
    by_name = group_of(groups)
    assert set(by_name) == {n for n, _ in model.named_parameters()}
    assert {n for n, g in by_name.items() if g["weight_decay"] == 0.0} == model.no_weight_decay_names()
    assert by_name["model.norm.weight"]["weight_decay"] == 0.0
    assert by_name["model.layers.0.input_layernorm.weight"]["weight_decay"] == 0.0
    assert by_name["model.embed_tokens.weight"]["weight_decay"] == 0.1
    assert all(g["lr"] == 1e-3 and g["eps"] == 1e-8 for g in groups)
    for g in groups:  # params and names line up
        params = dict(model.named_parameters())
        assert all(p is params[n] for p, n in zip(g["params"], g["param_names"]))


def test_architecture_no_decay_names_are_respected():
    model = depthbench.build_model("peri_ln", **TINY)
    by_name = group_of(param_groups(model, lr=1e-3, weight_decay=0.1))
    assert by_name["model.layers.2.attn_residual.out_norm.weight"]["weight_decay"] == 0.0


@pytest.mark.parametrize(("arch", "a"), [("depth_mup", 0.5), ("completep", 1.0)])
def test_depth_only_rule(arch, a):
    model = depthbench.build_model(arch, **{**TINY, "num_hidden_layers": 16}, depth_scaling_base_depth=4)
    m_l = 4.0
    groups = param_groups(model, lr=2e-3, weight_decay=0.1, eps=1e-8)
    by_name = group_of(groups)
    for name, group in by_name.items():
        if ".layers." in name:
            assert group["lr"] == pytest.approx(2e-3 * m_l ** (a - 1))
            assert group["eps"] == pytest.approx(1e-8 * m_l ** (-a))
            assert group["weight_decay"] == (0.0 if name.endswith("layernorm.weight") else pytest.approx(0.1))
            assert group["name"].startswith("blocks")
        else:
            assert (group["lr"], group["eps"]) == (2e-3, 1e-8)
            assert group["name"].startswith("default")
    assert {g["name"] for g in groups} == {"blocks", "blocks/no_decay", "default", "default/no_decay"}


def test_depth_width_rule():
    a, m_l, m_n = 0.5, 4.0, 0.5
    model = depthbench.build_model("depth_mup", **{**TINY, "num_hidden_layers": 16}, depth_scaling_base_depth=4,
                                   depth_scaling_axis="depth-width", depth_scaling_base_width=64)
    by_name = group_of(param_groups(model, lr=1.0, weight_decay=0.1, eps=1.0))
    q = by_name["model.layers.3.self_attn.q_proj.weight"]
    assert all(by_name[f"model.layers.0.{'self_attn' if h[0] in 'qkvo' else 'mlp'}.{h}.weight"] is q for h in HIDDEN)
    assert q["lr"] == pytest.approx(m_l ** (a - 1) / m_n)
    assert q["weight_decay"] == pytest.approx(0.1 * m_n)
    assert q["eps"] == pytest.approx(m_l ** (-a) / m_n)
    norm = by_name["model.layers.3.input_layernorm.weight"]
    assert (norm["lr"], norm["weight_decay"]) == (pytest.approx(m_l ** (a - 1)), 0.0)
    assert norm["eps"] == pytest.approx(m_l ** (-a) / m_n)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert by_name[name]["lr"] == 1.0 and by_name[name]["eps"] == pytest.approx(1.0 / m_n)
        assert by_name[name]["weight_decay"] == pytest.approx(0.1)
    assert by_name["model.norm.weight"]["name"] == "default/no_decay"


@pytest.mark.parametrize("arch", ["pre_ln", "depth_mup", "completep"])
def test_adamw_accepts_the_groups_and_steps(arch):
    model = depthbench.build_model(arch, **TINY)
    groups = param_groups(model, lr=1e-3, weight_decay=0.1, eps=1e-8, betas=(0.9, 0.95))
    optimizer = torch.optim.AdamW(groups)
    assert all(g["betas"] == (0.9, 0.95) and "name" in g for g in optimizer.param_groups)
    before = model.lm_head.weight.detach().clone()
    ids = torch.randint(0, 128, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    assert not torch.equal(model.lm_head.weight, before)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))


def test_frozen_parameters_are_left_out_and_foreign_modules_work():
    model = depthbench.build_model("pre_ln", **TINY)
    model.model.embed_tokens.weight.requires_grad_(False)
    names = {n for g in param_groups(model, lr=1e-3, weight_decay=0.1) for n in g["param_names"]}
    assert "model.embed_tokens.weight" not in names
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    groups = {g["name"]: g["param_names"] for g in param_groups(mlp, lr=1e-3, weight_decay=0.1)}
    assert groups == {"default": ["0.weight"], "default/no_decay": ["0.bias", "1.weight", "1.bias"]}
