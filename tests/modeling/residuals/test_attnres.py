"""Full and Block Attention Residuals (``attnres``, ``block_attnres``): the depth-mixing math, the bank/partial
recursion, init, Pre-LN equivalence, config resolution, analysis hooks and parameter bookkeeping.

Oracles from the Attention Residuals paper (arXiv 2603.15031) and the DepthBench study's bank/partial recursion and
analysis states (arXiv 2609.32534). Run with::

    python -m pytest tests/modeling/residuals/test_attnres.py -q
"""

from __future__ import annotations

import math

import pytest
import torch
from depthbench.modeling import modeling_attnres as ar
from depthbench.modeling.numerics import inv_rms

from depthbench.registry import build_config, get
from tests.helpers import build_tiny, eval_logits, seeded_ids

TINY = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4)
L = TINY["num_hidden_layers"]
D = TINY["hidden_size"]


def build(arch: str, seed: int = 0, **overrides):
    return build_tiny(arch, TINY, seed, **overrides)


def ids(batch: int = 2, length: int = 7, seed: int = 1) -> torch.Tensor:
    return seeded_ids(TINY["vocab_size"], batch, length, seed)


logits = eval_logits


def mixers(model) -> dict[str, torch.nn.Module]:
    """Every module owning a pseudo-query, by name (residuals and the final mixer on the wiring)."""
    return {n: m for n, m in model.named_modules() if getattr(m, "query", None) is not None}


@torch.no_grad()
def randomize_mixers(model, seed: int = 3, scale: float = 1.0) -> None:
    generator = torch.Generator().manual_seed(seed)
    for module in mixers(model).values():
        module.query.copy_(scale * torch.randn(module.query.shape, generator=generator))
        module.key_gain.copy_(1 + 0.3 * torch.randn(module.key_gain.shape, generator=generator))


def record_mix_sizes(monkeypatch) -> list[int]:
    """Patch the module's depth_mix to record how many sources each call mixes (sublayers in order, then final)."""
    sizes: list[int] = []
    original = ar.depth_mix

    def recording(query, key_gain, sources, inv_rms_values, **kwargs):
        sizes.append(len(sources))
        return original(query, key_gain, sources, inv_rms_values, **kwargs)

    monkeypatch.setattr(ar, "depth_mix", recording)
    return sizes


def capture_inputs(modules) -> tuple[list, list]:
    """Forward-pre-hooks recording the first positional input of each module; returns (records, handles)."""
    records, handles = [], []
    for module in modules:
        handles.append(module.register_forward_pre_hook(lambda m, args: records.append(args[0].detach().clone())))
    return records, handles


def capture_branch_outputs(model) -> tuple[list, list]:
    """Branch outputs y_0 .. y_{2L-1} (attention output, MLP output) in sublayer order."""
    records, handles = [], []

    def hook(module, args, output):
        records.append((output[0] if isinstance(output, tuple) else output).detach().clone())

    for layer in model.model.layers:
        handles += [layer.self_attn.register_forward_hook(hook), layer.mlp.register_forward_hook(hook)]
    return records, handles


# ================================================================================================ depth mixing math
def test_zero_queries_give_exactly_uniform_weights_for_any_input():
    generator = torch.Generator().manual_seed(0)
    for n in (2, 3, 7):
        sources = [torch.randn(2, 5, D, generator=generator) * 10.0 ** k for k in range(n)]
        inv = [inv_rms(s, 1e-6) for s in sources]
        weights = ar.depth_weights(torch.zeros(D), 1 + torch.randn(D, generator=generator), sources, inv)
        assert weights.dtype == torch.float32
        assert torch.equal(weights, torch.full_like(weights, 1.0 / n))


def test_weights_sum_to_one_and_ignore_source_scale():
    generator = torch.Generator().manual_seed(1)
    sources = [torch.randn(2, 5, D, generator=generator) for _ in range(4)]
    query, key_gain = torch.randn(D, generator=generator), 1 + 0.2 * torch.randn(D, generator=generator)

    def weights(srcs):  # invariance holds up to eps; keep eps negligible against the smallest source scale
        return ar.depth_weights(query, key_gain, srcs, [inv_rms(s, 1e-12) for s in srcs])

    base = weights(sources)
    torch.testing.assert_close(base.sum(0), torch.ones(2, 5), rtol=0, atol=1e-6)
    assert base.std() > 0.05  # non-trivial weights
    rescaled = weights([sources[0], 13.0 * sources[1], sources[2], 0.07 * sources[3]])
    torch.testing.assert_close(rescaled, base, rtol=0, atol=1e-5)
    # ... while the mixture itself sees the new value
    mixed = ar.depth_mix(query, key_gain, sources, [inv_rms(s, 1e-6) for s in sources])
    assert not torch.allclose(mixed, ar.depth_mix(query, key_gain, [sources[0], 13.0 * sources[1], *sources[2:]],
                                                  [inv_rms(s, 1e-6) for s in sources]), atol=1e-3)


def test_depth_mix_matches_explicit_rmsnorm_keys_with_gradients():
    """Reference form: k_i = g * v_i / sqrt(mean(v_i^2) + eps), a = softmax_i(<q, k_i>), o = sum_i a_i v_i."""
    eps = 1e-6
    generator = torch.Generator().manual_seed(2)
    leaves = [torch.randn(2, 4, D, generator=generator, dtype=torch.float64) for _ in range(5)]
    q0, g0 = torch.randn(D, generator=generator, dtype=torch.float64), torch.randn(D, generator=generator).double()

    def run(fast: bool):
        srcs = [s.clone().float().requires_grad_() for s in leaves]
        q, g = q0.clone().float().requires_grad_(), g0.clone().float().requires_grad_()
        if fast:
            out = ar.depth_mix(q, g, srcs, [inv_rms(s, eps) for s in srcs])
        else:
            stacked = torch.stack(srcs)  # [S, B, T, d]
            keys = g * stacked * torch.rsqrt(stacked.pow(2).mean(-1, keepdim=True) + eps)
            out = (torch.softmax(keys @ q, dim=0).unsqueeze(-1) * stacked).sum(0)
        out.pow(3).sum().backward()
        return out, [s.grad for s in srcs] + [q.grad, g.grad]

    out_fast, grads_fast = run(True)
    out_ref, grads_ref = run(False)
    torch.testing.assert_close(out_fast, out_ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads_fast, grads_ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_bf16_mix_runs_softmax_in_fp32_and_returns_bf16():
    generator = torch.Generator().manual_seed(4)
    sources = [torch.randn(2, 3, D, generator=generator).bfloat16() for _ in range(3)]
    inv = [inv_rms(s, 1e-6) for s in sources]
    query, key_gain = torch.randn(D).bfloat16(), torch.ones(D).bfloat16()
    assert inv[0].dtype == torch.float32
    assert ar.depth_weights(query, key_gain, sources, inv).dtype == torch.float32
    out = ar.depth_mix(query, key_gain, sources, inv)
    assert out.dtype == torch.bfloat16
    reference = ar.depth_mix(query.float(), key_gain.float(), [s.float() for s in sources], inv)
    torch.testing.assert_close(out.float(), reference, rtol=2e-2, atol=2e-2)


# ================================================================================================ init and loading
@pytest.mark.parametrize("arch", ["attnres", "block_attnres"])
def test_fresh_model_has_zero_queries_and_unit_key_gains(arch):
    model = build(arch)
    found = mixers(model)
    assert len(found) == 2 * L  # sublayers 1 .. 2L-1 plus the final mixer
    for module in found.values():
        assert torch.equal(module.query, torch.zeros(D)) and torch.equal(module.key_gain, torch.ones(D))
    assert model.model.layers[0].attn_residual.query is None  # one source: nothing to learn


@pytest.mark.parametrize("arch", ["attnres", "block_attnres"])
def test_queries_survive_save_and_load(arch, tmp_path):
    model = build(arch)
    model.save_pretrained(tmp_path / "zero")
    loaded = type(model).from_pretrained(tmp_path / "zero").eval()
    for module in mixers(loaded).values():
        assert torch.equal(module.query, torch.zeros(D)) and torch.equal(module.key_gain, torch.ones(D))
    randomize_mixers(model)  # trained (non-zero) queries must not be re-initialised by loading either
    model.save_pretrained(tmp_path / "trained")
    loaded = type(model).from_pretrained(tmp_path / "trained").eval()
    for name, module in mixers(model).items():
        assert torch.equal(dict(loaded.named_modules())[name].query, module.query), name
    torch.testing.assert_close(logits(loaded, ids()), logits(model, ids()), rtol=0, atol=0)


@pytest.mark.parametrize("arch", ["attnres", "block_attnres"])
def test_pre_ln_checkpoint_loads_with_zero_queries(arch, tmp_path):
    pre = build("pre_ln", seed=5)
    pre.save_pretrained(tmp_path)
    model = get(arch).causal_lm_class.from_pretrained(tmp_path).eval()
    for module in mixers(model).values():
        assert torch.equal(module.query, torch.zeros(D)) and torch.equal(module.key_gain, torch.ones(D))
    shared = pre.state_dict()
    for name, tensor in model.state_dict().items():
        if name in shared:
            assert torch.equal(tensor, shared[name]), name


# ================================================================================================ equivalences
@pytest.mark.parametrize("arch, overrides", [
    ("attnres", {}), ("block_attnres", {}), ("block_attnres", {"attnres_block_size": 3}),
    ("block_attnres", {"attnres_block_size": 6}),
])
def test_zero_queries_match_pre_ln_logits(arch, overrides):
    """With uniform weights every mix is the Pre-LN residual / #sources and the norm removes the factor. The
    equality is exact only for eps -> 0, so both models use a negligible eps."""
    eps = {"rms_norm_eps": 1e-12}
    pre = build("pre_ln", seed=7, **eps)
    model = build(arch, seed=11, **eps, **overrides)
    missing, unexpected = model.load_state_dict(pre.state_dict(), strict=False)
    assert unexpected == [] and all(k.endswith(("query", "key_gain")) for k in missing)
    x = ids(2, 9)
    torch.testing.assert_close(logits(model, x), logits(pre, x), rtol=0, atol=1e-4)


def test_block_size_one_equals_full_attnres_bit_for_bit():
    full = build("attnres")
    randomize_mixers(full)
    block = build("block_attnres", seed=9, attnres_block_size=1)
    block.load_state_dict(full.state_dict())
    x = ids(2, 8)
    assert torch.equal(logits(block, x), logits(full, x))
    for model in (full, block):
        model.train()
        model(input_ids=x, labels=x).loss.backward()
    block_params = dict(block.named_parameters())
    for name, p in full.named_parameters():
        assert torch.equal(p.grad, block_params[name].grad), name


def test_trained_queries_change_the_function():
    model = build("attnres")
    before = logits(model, ids())
    randomize_mixers(model)
    assert not torch.allclose(logits(model, ids()), before, atol=1e-3)


# ================================================================================================ bank / partial
@pytest.mark.parametrize("block_size", [1, 2, 3, 4, 6])
def test_number_of_sources_per_sublayer(block_size, monkeypatch):
    model = build("block_attnres", attnres_block_size=block_size)
    sizes = record_mix_sizes(monkeypatch)
    logits(model, ids())
    expected = [1 + j // block_size + (1 if j % block_size else 0) for j in range(2 * L)]
    expected.append(1 + math.ceil(2 * L / block_size))  # final mix: completed blocks + the last partial
    assert sizes == expected
    if block_size == 1:  # Full AttnRes: the embedding plus every earlier output, j + 1 at sublayer j
        assert sizes == list(range(1, 2 * L + 2))


@pytest.mark.parametrize("block_size", [1, 2, 4])
def test_block_representations_are_sums_of_branch_outputs(block_size):
    model = build("block_attnres", attnres_block_size=block_size)
    randomize_mixers(model)
    outputs, handles = capture_branch_outputs(model)
    streams = []
    exit_ = model.model.wiring.exit
    model.model.wiring.exit = lambda stream, norm: streams.append(stream) or exit_(stream, norm)
    x = ids()
    embeddings = model.model.embed_tokens(x).detach()
    logits(model, x)
    for handle in handles:
        handle.remove()
    stream = streams[0]
    groups = [outputs[k: k + block_size] for k in range(0, 2 * L, block_size)]
    assert len(stream.bank) == len(groups)  # embedding + completed groups; the last group is the partial
    assert torch.equal(stream.bank[0], embeddings)
    for entry, group in zip(list(stream.bank[1:]) + [stream.partial], groups):
        torch.testing.assert_close(entry, sum(group[1:], group[0]), rtol=0, atol=1e-6)


def test_sublayer_reads_its_own_norm_of_the_mix():
    """The branch sees N_j(mix): the input of input_layernorm in block l >= 1 equals the mix of its sources."""
    model = build("attnres")
    randomize_mixers(model)
    outputs, handles = capture_branch_outputs(model)
    norm_inputs, norm_handles = capture_inputs([model.model.layers[1].input_layernorm])
    x = ids()
    embeddings = model.model.embed_tokens(x).detach()
    logits(model, x)
    for handle in handles + norm_handles:
        handle.remove()
    residual = model.model.layers[1].attn_residual  # sublayer 2: sources e, y_0, y_1
    sources = [embeddings, outputs[0], outputs[1]]
    with torch.no_grad():
        expected = ar.depth_mix(residual.query, residual.key_gain, sources, [inv_rms(s, 1e-6) for s in sources])
    torch.testing.assert_close(norm_inputs[0], expected, rtol=1e-5, atol=1e-6)


# ================================================================================================ config
def test_full_config_has_block_size_one():
    config = build_config("attnres", **TINY)
    assert config.attnres_sublayers_per_block == 1 and config.model_type == "depthbench_attnres"


@pytest.mark.parametrize("layers", [1, 2, 3, 4, 7, 8, 9, 16, 24, 32, 70])
def test_block_default_resolves_to_whole_blocks_for_any_depth(layers):
    config = build_config("block_attnres", **{**TINY, "num_hidden_layers": layers})
    size = config.attnres_sublayers_per_block
    assert config.attnres_block_size is None
    assert size == min(2 * math.ceil(layers / 8), 2 * layers)
    assert size % 2 == 0 and 2 <= size <= 2 * layers
    assert math.ceil(2 * layers / size) <= 8  # at most attnres_num_blocks groups
    assert build_config("block_attnres", **{**TINY, "num_hidden_layers": layers, "attnres_num_blocks": 2}) \
        .attnres_sublayers_per_block == 2 * math.ceil(layers / 2)


def test_block_default_matches_paper_scale_example():
    config = build_config("block_attnres", **{**TINY, "num_hidden_layers": 24})
    assert config.attnres_sublayers_per_block == 6  # 48 sublayers in 8 blocks of 3 transformer blocks


@pytest.mark.parametrize("value", [0, -1, 2 * L + 1, 2.0, True, "4"])
def test_block_size_out_of_range_is_rejected_naming_the_field(value):
    with pytest.raises(ValueError, match=r"attnres_block_size=.*\[1, 6\]"):
        build_config("block_attnres", **TINY, attnres_block_size=value)


def test_num_blocks_must_be_positive():
    with pytest.raises(ValueError, match="attnres_num_blocks"):
        build_config("block_attnres", **TINY, attnres_num_blocks=0)


def test_block_config_round_trips(tmp_path):
    config = build_config("block_attnres", **TINY, attnres_block_size=4)
    config.save_pretrained(tmp_path)
    loaded = type(config).from_pretrained(tmp_path)
    assert loaded.attnres_block_size == 4 and loaded.attnres_sublayers_per_block == 4
    assert loaded.attnres_num_blocks == 8


# ================================================================================================ bookkeeping
@pytest.mark.parametrize("arch", ["attnres", "block_attnres"])
def test_extra_parameters_are_4dL(arch):
    model, pre = build(arch), build("pre_ln")
    extra = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in pre.parameters())
    assert extra == 4 * D * L == 2 * D * (2 * L) == model.config.num_extra_parameters()
    assert model.config.parameter_counts()["total"] == sum(p.numel() for p in model.parameters())
    assert {n for n, _ in model.named_parameters()} - {n for n, _ in pre.named_parameters()} == {
        f"model.{prefix}.{p}"
        for prefix in ["wiring"] + [f"layers.{i // 2}.{('attn', 'mlp')[i % 2]}_residual" for i in range(1, 2 * L)]
        for p in ("query", "key_gain")
    }


def test_queries_and_key_gains_get_no_weight_decay():
    model = build("block_attnres")
    no_decay = model.no_weight_decay_names()
    names = {n for n, _ in model.named_parameters() if n.endswith(("query", "key_gain"))}
    assert len(names) == 4 * L and names <= no_decay
    assert "model.layers.0.mlp.up_proj.weight" not in no_decay


def test_family_is_attnres():
    assert get("attnres").family == get("block_attnres").family == "attnres"


# ================================================================================================ analysis hooks
@pytest.mark.parametrize("block_size", [1, 4])
def test_depth_states_and_readout_follow_the_boundary_rule(block_size):
    model = build("block_attnres", attnres_block_size=block_size)
    randomize_mixers(model)
    layers = model.model.layers
    norm_inputs, handles = capture_inputs([layer.input_layernorm for layer in layers] + [model.model.norm])
    outputs, branch_handles = capture_branch_outputs(model)
    x = ids()
    embeddings = model.model.embed_tokens(x).detach()
    with torch.no_grad():
        hidden = model(input_ids=x, use_cache=False, output_hidden_states=True).hidden_states
    for handle in handles + branch_handles:
        handle.remove()
    attn_mix, final_mix = norm_inputs[:L], norm_inputs[L]
    states = model.depth_states(x)
    assert len(states) == len(hidden) == L + 1
    assert torch.equal(states[0], embeddings) and torch.equal(hidden[0], embeddings)
    torch.testing.assert_close(states[L], final_mix, rtol=0, atol=1e-6)
    for block in range(1, L):
        torch.testing.assert_close(hidden[block], attn_mix[block], rtol=0, atol=1e-6)  # readout: consumer's raw mix
        if (2 * block) % block_size == 0:  # true boundary: the mix consumed there
            torch.testing.assert_close(states[block], attn_mix[block], rtol=0, atol=1e-6)
        else:  # the plain block output: the running partial of the current source block
            start = (2 * block // block_size) * block_size
            partial = sum(outputs[start + 1: 2 * block], outputs[start])
            torch.testing.assert_close(states[block], partial, rtol=0, atol=1e-6)
            assert not torch.allclose(states[block], attn_mix[block], atol=1e-4)


def test_skip_block_feeds_the_newest_source_to_the_next_boundary():
    model = build("attnres")
    randomize_mixers(model)
    x = ids()
    baseline = logits(model, x)
    outputs, handles = capture_branch_outputs(model)
    norm_inputs, norm_handles = capture_inputs([model.model.layers[2].input_layernorm, model.model.norm])
    with model.skip_block(1):
        skipped = logits(model, x)
    for handle in handles + norm_handles:
        handle.remove()
    assert len(outputs) == 2 * (L - 1)  # block 1 did not run
    # block 2's attention (a boundary) reads the newest source: block 0's MLP output
    torch.testing.assert_close(norm_inputs[0], outputs[1], rtol=0, atol=0)
    assert not torch.allclose(skipped, baseline, atol=1e-4)
    assert torch.equal(logits(model, x), baseline)


def test_skipping_the_last_block_feeds_the_newest_source_to_the_final_norm():
    model = build("attnres")
    randomize_mixers(model)
    outputs, handles = capture_branch_outputs(model)
    norm_inputs, norm_handles = capture_inputs([model.model.norm])
    with model.skip_block(L - 1):
        logits(model, ids())
    for handle in handles + norm_handles:
        handle.remove()
    torch.testing.assert_close(norm_inputs[0], outputs[-1], rtol=0, atol=0)


def test_skip_block_before_a_non_boundary_mixes_normally(monkeypatch):
    model = build("block_attnres", attnres_block_size=4)  # boundaries at sublayers 0 and 4
    randomize_mixers(model)
    sizes = record_mix_sizes(monkeypatch)
    with model.skip_block(0):
        logits(model, ids())
    # sublayer 2 (not a boundary) mixes [e]; 3: [e, y2]; 4 commits: [e, y2+y3]; 5: [e, b, y4]; final: same 3
    assert sizes == [1, 2, 2, 3, 3]


def test_swap_blocks_moves_right_boundary_mixers_and_restores():
    model = build("attnres", num_hidden_layers=4)
    randomize_mixers(model)
    layers, wiring = model.model.layers, model.model.wiring
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = ids()
    baseline = logits(model, x)
    with model.swap_blocks(1, 3):
        state = model.state_dict()
        # own attention-side input mixers stay
        for block in (1, 3):
            assert torch.equal(layers[block].attn_residual.query, before[f"model.layers.{block}.attn_residual.query"])
        # everything else of the blocks is exchanged, MLP-side mixers included
        for name in ("self_attn.q_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight",
                     "mlp_residual.query", "mlp_residual.key_gain"):
            assert torch.equal(state[f"model.layers.1.{name}"], before[f"model.layers.3.{name}"]), name
            assert torch.equal(state[f"model.layers.3.{name}"], before[f"model.layers.1.{name}"]), name
        # right boundaries: block 1's is block 2's attention mixer, block 3's is the final mixer
        for p in ("query", "key_gain"):
            assert torch.equal(state[f"model.layers.2.attn_residual.{p}"], before[f"model.wiring.{p}"])
            assert torch.equal(state[f"model.wiring.{p}"], before[f"model.layers.2.attn_residual.{p}"])
        assert not torch.allclose(logits(model, x), baseline, atol=1e-4)
        with model.swap_blocks(3, 1):  # swapping twice restores
            assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert torch.equal(logits(model, x), baseline)
    assert wiring.query is model.model.wiring.query


def test_swap_with_block_zero_leaves_its_missing_mixer_alone():
    model = build("attnres")
    randomize_mixers(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with model.swap_blocks(0, 2):
        state = model.state_dict()
        assert torch.equal(state["model.layers.2.attn_residual.query"], before["model.layers.2.attn_residual.query"])
        assert torch.equal(state["model.layers.1.attn_residual.query"], before["model.wiring.query"])
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


# ================================================================================================ memory
def _saved_activation_bytes(model, input_ids) -> int:
    """Bytes of distinct storages autograd saves for backward, excluding parameters."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=input_ids, labels=input_ids).loss.backward()
    return sum(storages.values())


def test_full_attnres_saves_no_quadratic_activations():
    """Stacking the sources at every sublayer would save sum_j (j + 1) = O(L^2) activations of [B, T, d]; the
    implementation saves each source once (2L + 1 of them) plus a few fp32 [B, T] scalars per (sublayer, source)
    pair (logits, inverse RMS, weights), i.e. O(L^2) only in 1/d-sized per-token scalars."""
    shape = dict(num_hidden_layers=8, hidden_size=64, intermediate_size=128, vocab_size=128)
    x = ids(2, 16)
    pre = _saved_activation_bytes(build("pre_ln", **shape).train(), x)
    full = _saved_activation_bytes(build("attnres", **shape).train(), x)
    activation = x.numel() * shape["hidden_size"] * 4  # bytes of one fp32 [B, T, d]
    scalar = x.numel() * 4  # bytes of one fp32 [B, T]
    num_sources = 2 * shape["num_hidden_layers"] + 1
    pairs = sum(range(1, num_sources + 1))  # (mix, source) pairs over all sublayers and the final mix
    assert full - pre <= num_sources * activation + 4 * pairs * scalar
    assert full - pre < 0.25 * pairs * activation


@pytest.mark.parametrize("arch", ["attnres", "block_attnres"])
def test_mix_eps_applies_to_every_norm_that_reads_a_mixture(arch):
    """``attnres_mix_eps``: key norms, the sublayer norms of every sublayer but block 0's attention (which reads the
    raw embedding) and the final norm use it; block 0's attention norm keeps ``rms_norm_eps``. The logits equal a
    model whose every norm uses the mix eps except that first one, set by hand."""
    extra = {"attnres_block_size": 2} if arch == "block_attnres" else {}
    model = build(arch, rms_norm_eps=1e-6, attnres_mix_eps=1e-2, **extra)
    randomize_mixers(model)
    layers = model.model.layers
    assert layers[0].input_layernorm.variance_epsilon == 1e-6
    assert {layers[i].input_layernorm.variance_epsilon for i in range(1, L)} == {1e-2}
    assert {layer.post_attention_layernorm.variance_epsilon for layer in layers} == {1e-2}
    assert model.model.norm.variance_epsilon == 1e-2
    assert {m.eps for m in mixers(model).values()} == {1e-2}
    by_hand = build(arch, rms_norm_eps=1e-2, **extra)
    by_hand.load_state_dict(model.state_dict())
    by_hand.model.layers[0].input_layernorm.variance_epsilon = 1e-6
    x = ids()
    assert torch.equal(logits(model, x), logits(by_hand, x))
    plain = build(arch, rms_norm_eps=1e-6, **extra)
    plain.load_state_dict(model.state_dict())
    assert (logits(plain, x) - logits(model, x)).abs().max() > 1e-4  # the eps matters at this scale
    with pytest.raises(ValueError, match="attnres_mix_eps"):
        build_config(arch, attnres_mix_eps=0.0)
