"""``depthbench.hub.translators``: what each architecture adds to the study's OLMo-core checkpoint format.

The connector tensors are checked against the fork's own formulas (tests/hub/fork_reference.py, which imports
nothing of depthbench) on fixture tensors in the fork's layout; the settings each translator reads against hand
computations. End to end (every architecture's converted logits against the fork's forward) is
test_released_exact.py's, and the refusals through ``convert`` are test_convert.py's.

Run: ``python -m pytest tests/hub/test_translators.py -q``
"""

from __future__ import annotations

import math

import pytest
import torch

from depthbench.hub import translators as tr
from tests.hub.fork_reference import D, fork_config, fork_state, rms

N = 4  # streams of the fixture connectors (fork_reference's default)


def test_every_registered_architecture_has_a_translator():
    """A new architecture cannot miss its translator (``Translator()`` when the format adds nothing), and no two
    architectures claim one ``model.block.name``."""
    from depthbench.hub.translators import BLOCK_NAMES, TRANSLATORS, Translator
    from depthbench.registry import ARCHITECTURES

    assert list(TRANSLATORS) == list(ARCHITECTURES)  # the registry's order: the table reads like _TABLE
    assert all(isinstance(t, Translator) for t in TRANSLATORS.values())
    claimed = [name for t in TRANSLATORS.values() for name in t.block_names]
    assert len(claimed) == len(set(claimed)) == len(BLOCK_NAMES)
    assert set(BLOCK_NAMES.values()) <= set(ARCHITECTURES)



def _mhc_fixture(kind: str, **hc) -> tuple[dict, dict]:
    model = fork_config("default", 64, block={"hyper_connections": {"kind": kind, "num_residual_streams": N, **hc}},
                        n_layers=1)["model"]
    return model, fork_state(model, seed=3)


def _depthbench_logits(out: dict, q: str, x: torch.Tensor) -> torch.Tensor:
    """depthbench's mHC logits (modeling/modeling_mhc.py): z = α ⊙ (x̂ Φᵀ) per part, plus the bias."""
    m = x @ out[q + "phi"].t()
    gains = torch.cat([out[q + f"alpha_{g}"].expand(k) for g, k in (("pre", N), ("post", N), ("res", N * N))])
    return gains * m + out[q + "bias"]


def test_native_mhc_connector_gives_the_fork_s_logits_with_h_res_transposed():
    """The fork's native connector (``HyperConnection._forward_mhc``) computes gate * (x̂ P) + bias for pre, post
    and the residual matrix R[s, t], applied as Σ_s H[s, t] H_s; depthbench's row-major residual logits are
    indexed [t, s], so they must equal Rᵀ."""
    _, state = _mhc_fixture("mhc")
    p, q = "blocks.0.attention_hyper_connection.", "model.layers.0.attn_residual."
    fork = {k[len(p):]: v for k, v in state.items() if k.startswith(p) and ".branch." not in k}
    x = rms(torch.randn(5, N * D, generator=torch.Generator().manual_seed(0)), None, 1e-8)
    pre = fork["pre_gate"] * (x @ fork["pre_dynamic_proj"]) + fork["pre_bias"]
    post = fork["post_gate"] * (x @ fork["post_dynamic_proj"]) + fork["post_bias"]
    res = fork["residual_gate"] * (x @ fork["residual_dynamic_proj"]).unflatten(-1, (N, N)) + fork["residual_bias"]
    out = tr.ManifoldHyperConnections().tensors_from_olmo(dict(state), 1, N, liger=False)
    z = _depthbench_logits(out, q, x)
    torch.testing.assert_close(z[:, :N], pre)
    torch.testing.assert_close(z[:, N:2 * N], post)
    torch.testing.assert_close(z[:, 2 * N:].unflatten(-1, (N, N)), res.transpose(-1, -2))


def test_liger_mhc_connector_gives_the_fork_s_logits_with_the_bias_inside_the_gains():
    """The Liger forward: mix = x̂ Φ + b, pre α_pre mix + liger_pre_eps, post α_post mix, res α_res mix applied as
    Σ_s H[t, s] H_s (depthbench's orientation): the bias moves inside the gains, the pre eps into the pre bias."""
    model, state = _mhc_fixture("liger_mhc", liger_pre_eps=0.25)
    p, q = "blocks.0.feed_forward_hyper_connection.", "model.layers.0.mlp_residual."
    options = tr.ManifoldHyperConnections().map_options(model["block"], {"mhc_num_streams": N})
    assert options == {"n_streams": N, "liger": True, "pre_eps": 0.25}
    x = rms(torch.randn(5, N * D, generator=torch.Generator().manual_seed(1)), None, 1e-6)
    mix = x @ state[p + "phi"].float() + state[p + "b"]
    pre = state[p + "alpha_pre"] * mix[:, :N] + 0.25
    post = state[p + "alpha_post"] * mix[:, N:2 * N]
    res = state[p + "alpha_res"] * mix[:, 2 * N:]
    out = tr.ManifoldHyperConnections().tensors_from_olmo(dict(state), 1, N, liger=True, pre_eps=0.25)
    z = _depthbench_logits(out, q, x)
    torch.testing.assert_close(z, torch.cat([pre, post, res], -1), rtol=1e-5, atol=1e-5)
    assert out[q + "phi"].dtype == torch.float32  # the bf16-stored Φ is widened, not computed in bf16


def test_the_stream_collapse_and_which_hc_block_a_default_block_is():
    assert [tr.reduce_mode({}, k) for k in ("hc", "mhc", "liger_mhc")] == ["sum", "sum", "mean"]
    assert tr.reduce_mode({"collapse": "sum"}, "liger_mhc") == "sum" and tr.reduce_mode({"collapse": "mean"}, "hc") \
        == "mean"
    refine = tr.HyperConnections.refine_block_name
    assert refine("pre_ln", {}) == "pre_ln"
    assert refine("pre_ln", {"hyper_connections": {"num_residual_streams": 4}}) == "hc"  # kind hc by default
    assert refine("pre_ln", {"hyper_connections": {"kind": "liger_mhc"}}) == "mhc"
    assert refine("peri_ln", {"hyper_connections": {"kind": "mhc"}}) == "peri_ln"  # only OLMo-core's default block


def _settings(translator: tr.Translator, model_cfg: dict, state: dict | None = None, **fields):
    fields, problems, notes = {"num_hidden_layers": 4, "hidden_size": D, **fields}, [], []
    arch = translator.settings(model_cfg, state or {}, fields, problems, notes)
    return arch, fields, problems, notes


def test_hc_kinds_map_to_hc_or_mhc_and_the_static_ablation_is_refused_by_name():
    arch, fields, problems, _ = _settings(tr.HyperConnections(), {"block": {"hyper_connections": {"collapse": "mean"}}})
    assert (arch, fields["hc_readout"], fields["hc_num_streams"], problems) == ("hc", "mean", 4, [])
    assert _settings(tr.HyperConnections(), {"block": {}})[1]["hc_readout"] is None  # a sum collapse: undecided
    arch, fields, problems, notes = _settings(tr.HyperConnections(), {"block": {"hyper_connections": {
        "kind": "liger_mhc", "liger_post_mult": 3.0, "tanh": True, "sinkhorn_tau": 0.5}}})
    assert arch == "mhc" and fields["mhc_sinkhorn_ends_on"] == "columns" and fields["mhc_readout"] == "mean"
    assert problems == ["hyper_connections.tanh=true with kind=liger_mhc (depthbench's mHC maps are linear)",
                        "hyper_connections.liger_post_mult=3.0 (depthbench's H_post is 2 sigmoid)"]
    assert notes and "sinkhorn_tau=0.5" in notes[0]
    arch, _, problems, _ = _settings(tr.HyperConnections(), {"block": {"hyper_connections": {"kind": "static"}}})
    assert arch is None and problems and "hyper_connections.kind='static'" in problems[0]


def test_depth_width_base_width_is_read_from_the_init_stds():
    """examples/pretrain_preln_mup.py: embedding_init_std = σ_base, init_std = σ_base (d / d_base)^(-1/2). With
    d = 32, d_base = 8: init_std = 0.02 / 2 = 0.01, and the logits are multiplied by d_base / d = 0.25."""
    model = {"block": {"residual_scaling_base_depth": 2}, "init_std": 0.01, "embedding_init_std": 0.02}
    _, fields, problems, notes = _settings(tr.DepthScaled(), model)
    assert problems == []
    assert (fields["depth_scaling_axis"], fields["depth_scaling_base_width"], fields["initializer_range"],
            fields["depth_scaling_base_depth"]) == ("depth-width", 8, 0.02, 2)
    assert notes == ["depth-width axis (read from init_std / embedding_init_std): base width 8, logits multiplied "
                     "by 0.25 (d_base / d)"]


def test_lns_and_keel_constants():
    state = {f"blocks.{i}.ln_scale": torch.tensor(1 / math.sqrt(i + 1)) for i in range(3)}
    assert _settings(tr.LNS(), {"block": {}}, state)[2] == []
    state["blocks.2.ln_scale"] = torch.tensor(0.5)
    assert _settings(tr.LNS(), {"block": {}}, state)[2] == [
        "blocks.2.ln_scale=0.5 (depthbench's LNS uses 1/sqrt(l+1))"]
    assert "keel_alpha" not in _settings(tr.Keel(), {"block": {"keel_alpha": 8}})[1]  # 2L with L = 4: the default
    assert _settings(tr.Keel(), {"block": {"keel_alpha": 3.0}})[1]["keel_alpha"] == 3.0


def test_attnres_block_size_refines_the_id_and_must_be_recorded_for_block_attnres():
    refine = tr.AttnRes.refine
    assert refine("pre_ln", {}, {}) == "pre_ln"
    assert refine("attnres", {}, {}) == "attnres" and refine("pre_ln", {"attnres_block_size": 1}, {}) == "attnres"
    assert refine("attnres", {"attnres_block_size": 4}, {}) == "block_attnres"
    with pytest.raises(tr.ConversionError, match=r"must record its block size.*--config"):
        refine("block_attnres", {}, {"arch": "block_attnres"})
    block = {"attnres_block_size": 2, "attnres_use_bias": True}
    _, fields, problems, _ = _settings(tr.BlockAttnRes(), {"block": block}, norm_type="layernorm")
    assert fields["attnres_block_size"] == 2 and fields["attnres_mix_eps"] == tr.OLMO_DEFAULT_NORM_EPS
    assert problems == ["block.attnres_use_bias=True (AttnRes ablation depthbench does not implement)",
                        "a LayerNorm block norm with AttnRes (the fork's depth mixes always apply an RMSNorm)"]


def test_moda_unwraps_its_sublayers_and_accepts_only_the_last_block_s_override():
    source = {"blocks.0.attention.attention.w_q.weight": 1, "blocks.1.feed_forward.feed_forward.w2.weight": 2,
              "blocks.0.feed_forward.kv_proj.weight": 3, "blocks.1.feed_forward.kv_proj.weight": 4,
              "blocks.1.attention_norm.weight": 5}
    renamed = tr.MoDA().rename_from_olmo(source, 2)
    assert renamed == {"blocks.0.attention.w_q.weight": 1, "blocks.1.feed_forward.w2.weight": 2,
                       "blocks.0.feed_forward.kv_proj.weight": 3, "blocks.1.attention_norm.weight": 5}
    assert tr.MoDA().rename_to_olmo(renamed) == {k: v for k, v in source.items() if v != 4}
    block = {"name": "moda", "moda": {}}
    last = {"n_layers": 3, "block": block, "block_overrides": {"2": {**block, "moda_skip_ffn_kv": True}}}
    assert tr.MoDA().block_overrides_problem(last) is None
