"""Layer analyses (``depthbench.analysis``): every metric against a direct hand computation on a tiny model, the
logit lens of every registered architecture, a plain ``LlamaForCausalLM``, batched == sequential interventions, and
models restored exactly after every intervention.

Run with ``python -m pytest tests/analysis/test_metrics.py -q``.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

import depthbench
from depthbench.analysis import analyze
from depthbench.analysis.common import AnalysisContext
from depthbench.analysis.sampling import WindowSpec, draw_windows
from depthbench.analysis.state import ModelAdapter, token_losses
from depthbench.analysis.token_collapse import spectrum_stats
from tests.helpers import ARCH_IDS

SHAPE = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)
WINDOWS = np.random.default_rng(0).integers(0, 96, size=(4, 16))


def build(arch: str, seed: int = 0, **extra) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = depthbench.build_model(arch, **SHAPE, **extra).eval()
    # trained-looking, not init-symmetric weights: perturb everything (special inits would make metrics trivial)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def llama(seed: int = 0) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(**SHAPE, tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).eval()


def ctx_for(model, batched: bool = True, windows=WINDOWS, **kw) -> AnalysisContext:
    spec = WindowSpec(num_samples=len(windows), seq_len=windows.shape[1])
    return AnalysisContext(model, windows, spec, micro_batch_size=2, batched=batched, progress=False, **kw)


def run(model, metric, batched=True, **options):
    return analyze(model, WINDOWS, [metric], micro_batch_size=2, batched=batched, progress=False,
                   options={metric: options})[metric]


def state_snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def mean_loss(model, ids) -> float:
    with torch.no_grad():
        return float(token_losses(model(input_ids=ids).logits.float(), ids).mean())


IDS = torch.from_numpy(WINDOWS)


# ================================================================================================ sampling
def test_windows_stay_inside_documents_without_replacement():
    eos = 0
    docs = [np.r_[np.arange(100 * k + 1, 100 * k + n), eos] for k, n in enumerate((40, 7, 33, 65, 12))]
    tokens = np.concatenate(docs)
    spec = WindowSpec(num_samples=5, seq_len=16, seed=3)
    w = draw_windows(tokens, eos, spec)
    assert w.shape == (5, 16)
    # inside one document: no EOS before the last position, and tokens consecutive within a document
    assert all((row[:-1] != eos).all() and (np.diff(row[:-1]) == 1).all() for row in w)
    assert len({tuple(r) for r in w}) == 5  # distinct windows (no replacement)
    assert (draw_windows(tokens, eos, spec) == w).all()  # seeded
    with pytest.raises(ValueError, match="inside single documents"):
        draw_windows(tokens, eos, WindowSpec(num_samples=9, seq_len=16))
    assert draw_windows(tokens, eos, WindowSpec(num_samples=9, seq_len=16, cross_documents=True)).shape == (9, 16)


# ================================================================================================ hand computations
@pytest.mark.parametrize("kind", ["pre_ln", "llama"])
def test_angular_distance_matches_numpy_on_hidden_states(kind):
    model = llama() if kind == "llama" else build("pre_ln")
    result = run(model, "angular")
    with torch.no_grad():
        hs = [h.double().numpy().reshape(-1, SHAPE["hidden_size"])
              for h in model(input_ids=IDS, output_hidden_states=True).hidden_states]
    L = SHAPE["num_hidden_layers"]
    for i in range(L):  # hidden_states[0..L-1] are the block inputs (the last one is after the final norm)
        for j in range(i + 1, L):
            a, b = hs[i], hs[j]
            cos = np.clip((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1), -1, 1)
            assert result.values["matrix"][i, j] == pytest.approx(np.mean(np.arccos(cos)) / np.pi, abs=1e-6)


def test_angular_distance_at_the_last_token_as_gromov_et_al():
    model = build("pre_ln")
    result = run(model, "angular", tokens="last")
    assert result.values["tokens"] == "last"
    with torch.no_grad():
        hs = [h[:, -1].double().numpy() for h in model(input_ids=IDS, output_hidden_states=True).hidden_states]
    for i in range(SHAPE["num_hidden_layers"]):
        for j in range(i + 1, SHAPE["num_hidden_layers"]):
            a, b = hs[i], hs[j]  # one row per window: its final token
            cos = np.clip((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1), -1, 1)
            assert result.values["matrix"][i, j] == pytest.approx(np.mean(np.arccos(cos)) / np.pi, abs=1e-6)
    assert run(model, "angular").values["tokens"] == "all"  # the study's default: every token
    with pytest.raises(ValueError, match="'all' .* or 'last'"):
        run(model, "angular", tokens="first")


@pytest.mark.parametrize("arch", ["pre_ln", "hc", "attnres"])
def test_causal_score_matches_two_forwards(arch):
    model = build(arch)
    result = run(model, "causal")
    s = 1
    base = [z.float() for z in model.depth_states(IDS)]
    with model.skip_block(s):
        skipped = [z.float() for z in model.depth_states(IDS)]
    for layer in range(s + 1, SHAPE["num_hidden_layers"]):
        u = base[layer + 1] - base[layer]
        u_skip = skipped[layer + 1] - skipped[layer]
        expected = ((u_skip - u).norm(dim=-1) / u.norm(dim=-1).clamp_min(1e-8)).mean()
        assert result.values["matrix"][s, layer] == pytest.approx(float(expected), rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("arch", ["pre_ln", "attnres", "moda"])
def test_pruning_delta_equals_loss_under_skip_block(arch):
    model = build(arch)
    result = run(model, "pruning")
    base = mean_loss(model, IDS)
    assert result.values["base"] == pytest.approx(base, rel=1e-5)
    for layer in range(SHAPE["num_hidden_layers"]):
        with model.skip_block(layer):
            pruned = mean_loss(model, IDS)
        assert result.values["delta"][layer] == pytest.approx(pruned - base, abs=1e-4)


@pytest.mark.parametrize("arch", ["pre_ln", "hc", "mhc", "attnres", "moda", "denseformer"])
def test_permutation_score_matches_swap_blocks(arch):
    model = build(arch)
    result = run(model, "permutation", anchors=[2])
    base = mean_loss(model, IDS)
    for i, j in [(0, 2), (2, 3)]:
        with model.swap_blocks(i, j):
            swapped = mean_loss(model, IDS)
        assert result.values["matrix"][i, j] == pytest.approx(abs(swapped - base) / base, abs=1e-5)
    assert np.isnan(result.values["matrix"][0, 1])  # anchor 2 only


#: Enough windows for the usefulness fit of every test model (HC: D = 4 * 32, fitted on 12 windows = 192 tokens).
MANY_WINDOWS = np.random.default_rng(1).integers(0, 96, size=(24, 16))


@pytest.mark.parametrize("arch", ["pre_ln", "hc", "attnres", "moda"])
def test_usefulness_of_an_exactly_affine_block_is_zero(arch):
    model = build(arch)
    with torch.no_grad():  # block 1 adds nothing: an affine (identity / transport / zero-branch) block
        model.model.layers[1].self_attn.o_proj.weight.zero_()
        model.model.layers[1].mlp.down_proj.weight.zero_()
        for residual in (model.model.layers[1].attn_residual, model.model.layers[1].mlp_residual):
            for name in ("dynamic_alpha_scale", "dynamic_beta_scale"):  # HC: the static (affine) transport only
                if hasattr(residual, name):
                    getattr(residual, name).zero_()
    result = analyze(model, MANY_WINDOWS, ["usefulness"], micro_batch_size=4, progress=False)["usefulness"]
    inc = result.values["loss_increase"]
    assert abs(inc[1]) < 1e-4
    assert max(abs(x) for x in inc) > 10 * abs(inc[1])  # the other blocks are not affine


def _block_io(model, ids: torch.Tensor) -> list[tuple[np.ndarray, np.ndarray]]:
    """(input, output) token rows [N, d] of every decoder block (forward hooks; the output before the final norm)."""
    io = []
    hooks = [layer.register_forward_hook(lambda m, args, out: io.append((args[0], out)))
             for layer in model.model.layers]
    with torch.no_grad():
        model(input_ids=ids)
    for h in hooks:
        h.remove()
    return [(x.double().reshape(-1, x.shape[-1]).numpy(), y.double().reshape(-1, y.shape[-1]).numpy()) for x, y in io]


def test_usefulness_fits_on_half_the_windows_and_scores_on_the_other_half():
    model = build("pre_ln")
    windows = MANY_WINDOWS[:8]  # 4 fitting windows = 64 tokens >= d + 1 = 33 unknowns per output channel
    result = analyze(model, windows, ["usefulness"], micro_batch_size=3, progress=False)["usefulness"]
    fit, score = torch.from_numpy(windows[0::2]), torch.from_numpy(windows[1::2])
    base = mean_loss(model, score)
    assert result.values["base_loss"] == pytest.approx(base, rel=1e-6)
    for blk, (x, y) in enumerate(_block_io(model, fit)):
        coef = np.linalg.lstsq(np.c_[x, np.ones(len(x))], y, rcond=None)[0]  # float64 least squares
        w, b = torch.from_numpy(coef[:-1]).float(), torch.from_numpy(coef[-1]).float()
        layer = model.model.layers[blk]
        layer.forward = lambda stream, *args, w=w, b=b, **kwargs: stream @ w + b
        replaced = mean_loss(model, score)
        del layer.forward
        assert result.values["loss_increase"][blk] == pytest.approx(replaced - base, rel=1e-4, abs=1e-6)
    assert result.values["fit_tokens"] == 64 and result.values["score_tokens"] == 4 * 15


@pytest.mark.parametrize("arch", ["hc", "pre_ln"])
def test_usefulness_refuses_a_fit_with_fewer_tokens_than_unknowns(arch):
    model = build(arch)  # HC: D = 4 * 32 = 128; 24 windows of 16 tokens fit on 12 * 16 = 192 tokens; 4 windows: 32
    width = SHAPE["hidden_size"] * (4 if arch == "hc" else 1)
    windows = 2 * -(-(width + 1) // 16) - 1  # ceil((D + 1) / 16) fitting windows, every other one of them
    with pytest.raises(ValueError, match=rf"needs at least {width + 1} tokens to fit.* --num-samples {windows} "):
        run(model, "usefulness")


def test_token_collapse_ranks_of_known_singular_values():
    s = torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)
    q1, _ = torch.linalg.qr(torch.randn(10, 3, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(6, 3, dtype=torch.float64))
    h = q1 @ torch.diag(s) @ q2.T
    stats = spectrum_stats(torch.linalg.svdvals(h))
    p = np.array([9, 4, 1]) / 14
    assert float(stats["stable_rank"]) == pytest.approx(14 / 9)
    assert float(stats["erank"]) == pytest.approx(math.exp(-(p * np.log(p)).sum()))
    assert float(stats["l1_l2_ratio"]) == pytest.approx(6 / math.sqrt(14))
    result = run(build("hc"), "token_collapse")  # architecture-aware states: n*d wide for HC
    assert len(result.values["erank"]) == SHAPE["num_hidden_layers"] + 1


@pytest.mark.parametrize("mode", ["per_token", "averaged_total"])
def test_jacobian_of_an_exactly_linear_block(mode):
    model = build("pre_ln")
    d = SHAPE["hidden_size"]
    a = torch.eye(d) + 0.1 * torch.randn(d, d, generator=torch.Generator().manual_seed(1))
    layer = model.model.layers[2]
    layer.forward = lambda stream, *args, **kwargs: stream @ a.T
    result = run(model, "jacobian", mode=mode, positions=3)
    expected = float(torch.linalg.matrix_norm(a - torch.eye(d)) / math.sqrt(d))
    assert result.values["deviation"][2] == pytest.approx(expected, rel=1e-5)
    assert result.values["deviation"][0] > 0


def test_jacobian_progress_moves_per_window_position_and_block(monkeypatch):
    import tqdm.auto

    bars = []

    class Recorder(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "disable": False, "file": io.StringIO()})
            self.updates = 0
            bars.append(self)

        def update(self, n=1):
            self.updates += 1
            return super().update(n)

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorder)
    analyze(build("pre_ln"), WINDOWS, ["jacobian"], micro_batch_size=2, progress=True,
            options={"jacobian": {"positions": 3, "windows": 3}})
    (bar,) = [b for b in bars if b.desc.startswith("jacobian")]
    expected = 3 * 3 * SHAPE["num_hidden_layers"]  # windows x positions x blocks, each one Jacobian
    assert bar.total == expected and bar.n == expected and bar.updates == expected  # a total: tqdm shows the ETA


def test_jacobian_refuses_structured_streams_and_wide_streams():
    with pytest.raises(ValueError, match="structured stream"):
        run(build("attnres"), "jacobian")
    with pytest.raises(ValueError, match="size limit"):
        run(build("hc"), "jacobian", max_dim=64)


# ================================================================================================ logit lens
@pytest.mark.parametrize("arch", ARCH_IDS + ["hc:sum_norm"])
def test_logit_lens_last_state_is_the_model_output(arch):
    arch, _, readout = arch.partition(":")
    model = build(arch, **({"hc_readout": readout} if readout else {}))
    result = run(model, "logit_lens")
    assert result.values["kl_to_final"][-1] == 0.0
    assert result.values["top5_overlap"][-1] == 1.0
    assert result.values["final_logits_max_abs_diff"] == 0.0
    assert result.values["final_loss"] == pytest.approx(mean_loss(model, IDS), rel=1e-5)


def test_llama_fallback_logit_lens_and_pruning():
    model = llama()
    lens = run(model, "logit_lens")
    assert lens.values["kl_to_final"][-1] == 0.0
    with torch.no_grad():  # hand logit lens at state 1: final norm + head on hidden_states[1]
        hs = model(input_ids=IDS, output_hidden_states=True).hidden_states
        logits = model.lm_head(model.model.norm(hs[1])).float()
    assert lens.values["early_exit_ce"][1] == pytest.approx(float(token_losses(logits, IDS).mean()), rel=1e-5)
    pruning = run(model, "pruning")
    layer = model.model.layers[1]
    layer.forward = lambda hidden_states, *a, **k: hidden_states
    pruned = mean_loss(model, IDS)
    del layer.forward
    assert pruning.values["delta"][1] == pytest.approx(pruned - mean_loss(model, IDS), abs=1e-4)


# ================================================================================================ interventions
@pytest.mark.parametrize("metric", ["causal", "permutation", "pruning"])
@pytest.mark.parametrize("arch", ["pre_ln", "hc", "attnres", "moda", "keel", "lns"])
def test_batched_interventions_equal_sequential_and_restore_the_model(arch, metric):
    model = build(arch)
    before = state_snapshot(model)
    with torch.no_grad():
        logits = model(input_ids=IDS).logits
    batched = run(model, metric, batched=True)
    sequential = run(model, metric, batched=False)
    key = "delta" if metric == "pruning" else "matrix"
    np.testing.assert_allclose(np.asarray(batched.values[key], dtype=float),
                               np.asarray(sequential.values[key], dtype=float), rtol=1e-4, atol=1e-6)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    with torch.no_grad():
        assert torch.equal(model(input_ids=IDS).logits, logits)


def test_usefulness_and_llama_swaps_restore_the_model():
    for model, metrics in ((build("attnres"), ["usefulness"]), (llama(), ["permutation", "usefulness", "causal"])):
        before = state_snapshot(model)
        analyze(model, MANY_WINDOWS[:8], metrics, micro_batch_size=2, progress=False)
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
        assert not any("forward" in vars(layer) for layer in ModelAdapter(model).layers)


# ================================================================================================ figures
def test_depth_mixing_rows_sum_to_one_and_zero_queries_are_uniform():
    model = depthbench.build_model("attnres", **SHAPE).eval()  # zero pseudo-queries: uniform weights
    result = run(model, "depth_mixing")
    m = np.asarray(result.values["matrix"], dtype=float)
    np.testing.assert_allclose(np.nansum(m, axis=1), 1.0, atol=1e-5)
    for row in m:
        k = np.isfinite(row).sum()
        np.testing.assert_allclose(row[:k], 1.0 / k, atol=1e-5)
    assert result.values["dead_fraction"] == 0.0
    with pytest.raises(ValueError, match="attention-residual"):
        run(build("pre_ln"), "depth_mixing")


def test_hc_transport_static_init_is_identity_and_mhc_is_doubly_stochastic():
    hc = depthbench.build_model("hc", **SHAPE).eval()  # static init: identity transport, erank n
    r = run(hc, "hc_transport")
    assert r.values["product_erank"] == pytest.approx(4.0, abs=1e-6)
    assert np.nanmin(np.asarray(r.values["path_weights"], dtype=float)) >= 0
    mhc = build("mhc")
    r = run(mhc, "hc_transport")
    # a doubly stochastic product keeps the stream average: its top singular value is 1 along 1/sqrt(n)
    assert r.values["spectrum"][0] == pytest.approx(1.0, abs=1e-4)
    assert r.values["direction_overlap"] == pytest.approx(1.0, abs=1e-3)


def test_efficiency_config_and_measured_kv_cache_agree():
    model = build("pre_ln")
    r = run(model, "efficiency", seq_len=32)
    kv = r.values["measured"]["kv_cache_bytes"] * 2 // r.values["measured"]["kv_cache_dtype_bytes"]
    assert kv == r.values["config"]["kv_cache_bytes"]
    assert 0.8 < r.values["measured"]["prefill_flops"] / r.values["config"]["prefill_flops"] < 1.25


def _transport_reference(model) -> float:
    """Direction overlap by hand: per token the product of the sublayer transports (float64 numpy), its dominant
    right singular vector v_1, and |<v_1, 1/sqrt(n)>| averaged over tokens."""
    adapter = ModelAdapter(model)
    seen = []
    hooks = [getattr(layer, name).register_forward_pre_hook(lambda m, a, k: seen.append((m, a[0])), with_kwargs=True)
             for layer in adapter.layers for name in ("attn_residual", "mlp_residual")]
    with torch.no_grad():
        model(input_ids=IDS)
    for h in hooks:
        h.remove()
    prod = None
    for module, stream in seen:
        width, _ = adapter.wiring.stream_maps(module, stream)
        n = stream.shape[-2]
        full = np.broadcast_to(width.detach().double().numpy(), (*stream.shape[:2], n + 1, n))
        t = full[..., 1:, :].reshape(-1, n, n)
        prod = t if prod is None else np.einsum("kij,kjl->kil", t, prod)
    _, _, vh = np.linalg.svd(prod)
    return float(np.mean(np.abs(vh[:, 0, :].sum(-1)) / math.sqrt(prod.shape[-1])))


@pytest.mark.parametrize("arch", ["hc", "mhc"])
def test_hc_transport_direction_overlap_is_the_inner_product_with_the_stream_mean(arch):
    model = build(arch, seed=3)
    r = run(model, "hc_transport")
    assert r.values["direction_overlap"] == pytest.approx(_transport_reference(model), abs=1e-6)


def test_hc_transport_direction_orthogonal_to_the_mean_scores_zero():
    model = depthbench.build_model("hc", **SHAPE).eval()
    n = model.config.hc_num_streams
    v = np.zeros(n)
    v[:2] = [1 / math.sqrt(2), -1 / math.sqrt(2)]  # orthogonal to the stream mean 1/sqrt(n)
    t = torch.eye(n, dtype=torch.float64) + 2 * torch.from_numpy(np.outer(v, v))  # top singular direction v
    width = torch.cat([torch.full((1, n), 1.0 / n, dtype=torch.float64), t], dim=0)
    model.model.wiring.stream_maps = lambda module, stream: (width, torch.ones(n, dtype=torch.float64))
    r = run(model, "hc_transport")
    assert r.values["spectrum"][0] == pytest.approx(3.0 ** (2 * SHAPE["num_hidden_layers"]), rel=1e-9)
    assert r.values["direction_overlap"] == pytest.approx(0.0, abs=1e-9)


def test_windows_past_the_model_positions_are_refused():
    long = np.random.default_rng(2).integers(0, 96, size=(2, SHAPE["max_position_embeddings"] + 1))
    with pytest.raises(ValueError, match=r"65 tokens .* max_position_embeddings=64 .* --seq-len to 64"):
        analyze(build("pre_ln"), long, ["angular"], progress=False)
    with pytest.raises(ValueError, match=r"--anchor-layer 4 out of range: the model has blocks 0..3"):
        analyze(build("pre_ln"), WINDOWS, ["angular", "permutation"], progress=False,
                options={"permutation": {"anchors": [4]}})
