"""The model contract every registered architecture must satisfy (parametrized over the registry).

A new architecture gets all of these checks by adding its line to ``depthbench.registry._TABLE``; nothing here
names an architecture except ``pre_ln``, the Llama-equivalent reference whose checkpoints every other
architecture must load by name. Remote code lives in ``test_remote_code.py``, lm-eval in ``test_lm_eval.py``, the
Trainer in ``test_trainer.py`` and the registry itself in ``test_registry.py``.

Run it (all architectures, or one) with::

    python -m pytest tests/modeling/test_contract.py -q
    python -m pytest tests/modeling/test_contract.py -q -k "hc"
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from depthbench.modeling.configuration_depthbench import DepthBenchConfig
from safetensors.torch import load_file
from transformers import AutoConfig, DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from depthbench.registry import ARCHITECTURES
from tests.helpers import (
    ARCH_IDS,
    TINY,
    arch_config_class,
    cache_of,
    eval_logits,
    greedy,
    left_pad,
    max_abs_diff,
    positions_from_mask,
    random_ids,
    tiny_config,
    tiny_model,
)

ARCH = pytest.mark.parametrize("arch_id", ARCH_IDS)
ATOL = 1e-5  # fp32 agreement of two computations of the same function
REFERENCE = "pre_ln"  # the Llama-equivalent architecture whose checkpoints every architecture loads by name
NUM_LAYERS = TINY["num_hidden_layers"]


# The keyword generate() takes a cache under: `cache` in transformers 5.24, `past_key_values` in 5.23.
_GENERATE_CACHE_KW = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


# ============================================================================================ 1. configuration
@ARCH
def test_config_model_type_is_unique(arch_id):
    cls = arch_config_class(arch_id)
    assert issubclass(cls, DepthBenchConfig)
    assert cls.model_type == f"depthbench_{arch_id}"
    types = [arch_config_class(a).model_type for a in ARCH_IDS]
    assert types.count(cls.model_type) == 1


@ARCH
def test_config_defaults_and_round_trips(arch_id, tmp_path):
    cls = arch_config_class(arch_id)
    default = cls()  # every field has a valid default
    assert default.model_type == f"depthbench_{arch_id}"
    config = tiny_config(arch_id)
    as_dict = config.to_dict()
    assert cls.from_dict(as_dict).to_dict() == as_dict
    assert cls.from_dict(json.loads(config.to_json_string())).to_dict() == as_dict
    config.save_pretrained(tmp_path)  # also writes auto_map (remote code), which the in-memory config lacks
    loaded = cls.from_pretrained(tmp_path)
    assert type(loaded) is cls
    assert _without_auto_map(loaded.to_dict()) == _without_auto_map(as_dict)
    auto = AutoConfig.from_pretrained(tmp_path)
    assert type(auto) is cls and _without_auto_map(auto.to_dict()) == _without_auto_map(as_dict)
    for field, value in TINY.items():
        assert getattr(loaded, field) == value, field


def _without_auto_map(d: dict) -> dict:
    """Config dict minus what saving/loading legitimately adds (``auto_map``, the load path)."""
    return {k: v for k, v in d.items() if k not in ("auto_map", "_name_or_path")}


BAD_BACKBONE = [
    pytest.param({"hidden_size": 60, "num_attention_heads": 4}, "head_dim", id="odd-head_dim-derived"),
    pytest.param({"head_dim": 15}, "head_dim", id="odd-head_dim"),
    pytest.param({"num_attention_heads": 4, "num_key_value_heads": 3}, "num_key_value_heads", id="gqa-indivisible"),
    pytest.param({"num_hidden_layers": 0}, "num_hidden_layers", id="zero-layers"),
    pytest.param({"num_hidden_layers": -2}, "num_hidden_layers", id="negative-layers"),
    pytest.param({"norm_type": "batchnorm"}, "norm_type", id="unknown-norm"),
]


@ARCH
@pytest.mark.parametrize("overrides, field", BAD_BACKBONE)
def test_config_rejects_bad_backbone(arch_id, overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(arch_id, **overrides)


# ============================================================================================ 2. parameter names
@ARCH
def test_shared_weights_have_pre_ln_names_and_shapes(arch_id):
    reference = tiny_model(REFERENCE).state_dict()
    state = tiny_model(arch_id).state_dict()
    missing = [k for k in reference if k not in state]
    assert not missing, f"{arch_id} renamed or dropped shared backbone tensors: {missing}"
    wrong = [k for k, v in reference.items() if state[k].shape != v.shape]
    assert not wrong, f"{arch_id} changed the shape of shared tensors: {wrong}"


@ARCH
def test_pre_ln_checkpoint_loads_by_name(arch_id, checkpoints):
    source = checkpoints.get(REFERENCE)
    saved = load_file(source.path / "model.safetensors")
    cls = ARCHITECTURES[arch_id].causal_lm_class
    model, info = cls.from_pretrained(source.path, config=tiny_config(arch_id), output_loading_info=True)
    state = model.state_dict()
    for name, tensor in saved.items():
        assert torch.equal(state[name], tensor), f"{name} was not copied exactly"
    assert not info["unexpected_keys"] and not info["mismatched_keys"], info
    assert set(info["missing_keys"]) <= set(state) - set(saved), info["missing_keys"]
    for name, tensor in state.items():  # the architecture's own tensors got a real init, not meta/garbage
        assert torch.isfinite(tensor).all(), f"{name} is not finite after loading a pre_ln checkpoint"
    assert torch.isfinite(eval_logits(model.eval(), source.input_ids)).all()


def test_pre_ln_is_a_llama_checkpoint():
    if REFERENCE not in ARCHITECTURES:
        pytest.skip("pre_ln is not registered")
    from transformers import LlamaConfig, LlamaForCausalLM

    model = tiny_model(REFERENCE)
    c = model.config
    llama_config = LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim,
        max_position_embeddings=c.max_position_embeddings, rms_norm_eps=c.rms_norm_eps, hidden_act="silu",
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta}, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False,
    )
    llama = LlamaForCausalLM(llama_config).eval()
    result = llama.load_state_dict(model.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    ids = random_ids(2, 12, seed=5)
    with torch.no_grad():
        ours = model(input_ids=ids, labels=ids, use_cache=False)
        theirs = llama(input_ids=ids, labels=ids, use_cache=False)
    assert max_abs_diff(ours.logits, theirs.logits) < ATOL
    assert abs(ours.loss.item() - theirs.loss.item()) < ATOL


# ============================================================================================ 4. loss
@ARCH
def test_loss_is_shifted_cross_entropy_ignoring_minus_100(arch_id):
    model = tiny_model(arch_id)
    ids = random_ids(2, 12, seed=1)
    labels = ids.clone()
    labels[0, :4] = -100
    labels[1, -3:] = -100
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels, use_cache=False)
    logits = out.logits.float()
    flat_logits = logits[:, :-1].reshape(-1, logits.shape[-1])
    flat_labels = labels[:, 1:].reshape(-1)
    expected_mean = F.cross_entropy(flat_logits, flat_labels, ignore_index=-100)
    assert abs(out.loss.item() - expected_mean.item()) < ATOL
    expected_sum = F.cross_entropy(flat_logits, flat_labels, ignore_index=-100, reduction="sum")
    for num_items in (7, torch.tensor(7)):
        with torch.no_grad():
            scaled = model(input_ids=ids, labels=labels, use_cache=False, num_items_in_batch=num_items).loss
        assert abs(scaled.item() - expected_sum.item() / 7) < ATOL


# ============================================================================================ 5. outputs
@ARCH
def test_logits_to_keep(arch_id):
    model = tiny_model(arch_id)
    ids = random_ids(2, 9, seed=2)
    full = eval_logits(model, ids)
    assert full.shape == (2, 9, TINY["vocab_size"])
    for keep in (1, 3):
        kept = eval_logits(model, ids, logits_to_keep=keep)
        assert kept.shape == (2, keep, TINY["vocab_size"])
        assert max_abs_diff(kept, full[:, -keep:]) < ATOL
    index = torch.tensor([0, 4, 8])
    assert max_abs_diff(eval_logits(model, ids, logits_to_keep=index), full[:, index]) < ATOL


@ARCH
def test_hidden_states_and_tuple_output(arch_id):
    model = tiny_model(arch_id)
    ids = random_ids(2, 7, seed=3)
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
        as_tuple = model(input_ids=ids, labels=ids, use_cache=False, return_dict=False)
    hidden = out.hidden_states
    assert len(hidden) == NUM_LAYERS + 1
    for h in hidden:
        assert h.shape == (2, 7, TINY["hidden_size"])
        assert torch.isfinite(h).all()
    assert max_abs_diff(model.lm_head(hidden[-1]), out.logits) < ATOL  # the last entry is the final normed state
    assert isinstance(as_tuple, tuple)
    loss, logits = as_tuple[0], as_tuple[1]
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert max_abs_diff(logits, out.logits) < ATOL


@ARCH
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_left_padding_matches_unpadded(arch_id, attn):
    model = tiny_model(arch_id, attn_implementation=attn)
    rows = [random_ids(1, 10, seed=11)[0], random_ids(1, 6, seed=12)[0], random_ids(1, 1, seed=13)[0]]
    ids, mask = left_pad(rows)
    padded = eval_logits(model, ids, attention_mask=mask, position_ids=positions_from_mask(mask))
    for i, row in enumerate(rows):
        alone = eval_logits(model, row[None])[0]
        assert max_abs_diff(padded[i, -len(row):], alone) < ATOL, f"row {i}"


# ============================================================================================ 6. generation
@ARCH
def test_greedy_generate_with_cache_equals_without(arch_id):
    model = tiny_model(arch_id)
    ids = random_ids(2, 5, seed=4)
    with_cache = greedy(model, ids, 8, use_cache=True)
    without_cache = greedy(model, ids, 8, use_cache=False)
    assert with_cache.shape == (2, 13)
    assert torch.equal(with_cache, without_cache)


@ARCH
def test_incremental_decoding_matches_full_forward(arch_id):
    model = tiny_model(arch_id)
    ids = random_ids(2, 12, seed=6)
    full = eval_logits(model, ids)
    cache = DynamicCache(config=model.config)
    pieces = []
    with torch.no_grad():
        out = model(input_ids=ids[:, :5], cache=cache, use_cache=True)
        pieces.append(out.logits)
        for t in range(5, 12):
            cache = cache_of(out)
            assert cache is not None and cache.get_seq_length() == t
            out = model(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True)
            pieces.append(out.logits)
    assert max_abs_diff(torch.cat(pieces, dim=1), full) < ATOL


@ARCH
def test_left_padded_batch_generates_like_each_sequence_alone(arch_id):
    model = tiny_model(arch_id)
    rows = [random_ids(1, 7, seed=21)[0], random_ids(1, 3, seed=22)[0]]
    ids, mask = left_pad(rows)
    batch = greedy(model, ids, 6, attention_mask=mask)
    for i, row in enumerate(rows):
        alone = greedy(model, row[None], 6)
        assert torch.equal(batch[i, -6:], alone[0, -6:]), f"row {i}"


@ARCH
def test_generate_continues_from_returned_cache(arch_id):
    model = tiny_model(arch_id)
    ids = random_ids(1, 5, seed=7)
    first = greedy(model, ids, 4, return_dict_in_generate=True)
    cache = cache_of(first)
    assert cache is not None
    continued = greedy(model, first.sequences, 4, **{_GENERATE_CACHE_KW: cache})
    reference = greedy(model, ids, 8)
    assert torch.equal(continued, reference)


# ============================================================================================ 8. backends, dtypes
@ARCH
def test_eager_and_sdpa_agree(arch_id):
    eager = tiny_model(arch_id, attn_implementation="eager")
    sdpa = tiny_model(arch_id, attn_implementation="sdpa")
    sdpa.load_state_dict(eager.state_dict())
    assert eager.config._attn_implementation == "eager" and sdpa.config._attn_implementation == "sdpa"
    ids = random_ids(2, 11, seed=8)
    assert max_abs_diff(eval_logits(eager, ids), eval_logits(sdpa, ids)) < ATOL
    padded, mask = left_pad([ids[0], ids[1, :6]])
    positions = positions_from_mask(mask)
    a = eval_logits(eager, padded, attention_mask=mask, position_ids=positions)
    b = eval_logits(sdpa, padded, attention_mask=mask, position_ids=positions)
    real = mask.bool()
    assert max_abs_diff(a[real], b[real]) < ATOL


def _count_calls(module, counter: dict, key: str) -> None:
    """Count ``module.forward`` calls in ``counter[key]`` (module hooks do not fire in checkpoint recomputes)."""
    forward = module.forward

    def counted(*args, **kwargs):
        counter[key] += 1
        return forward(*args, **kwargs)

    module.forward = counted


@ARCH
def test_gradient_checkpointing_gives_same_loss_and_grads(arch_id):
    plain = tiny_model(arch_id).train()
    checkpointed = tiny_model(arch_id).train()
    checkpointed.load_state_dict(plain.state_dict())
    checkpointed.gradient_checkpointing_enable()
    assert checkpointed.is_gradient_checkpointing
    calls = {"plain": 0, "checkpointed": 0}
    for name, model in (("plain", plain), ("checkpointed", checkpointed)):
        _count_calls(model.model.layers[0].mlp, calls, name)
    ids = random_ids(2, 10, seed=9)
    losses = {}
    for name, model in (("plain", plain), ("checkpointed", checkpointed)):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses[name] = loss.item()
    assert calls["plain"] == 1 and calls["checkpointed"] == 2  # the block was really recomputed in backward
    assert abs(losses["plain"] - losses["checkpointed"]) < 1e-6
    grads = dict(checkpointed.named_parameters())
    for name, p in plain.named_parameters():
        if p.grad is not None:
            assert max_abs_diff(p.grad, grads[name].grad) < 1e-6, name


@ARCH
def test_resize_token_embeddings(arch_id):
    model = tiny_model(arch_id)
    old_embed = model.get_input_embeddings().weight.detach().clone()
    old_head = model.get_output_embeddings().weight.detach().clone()
    new_vocab = TINY["vocab_size"] + 32
    model.resize_token_embeddings(new_vocab, mean_resizing=False)
    assert model.config.vocab_size == new_vocab
    assert model.get_input_embeddings().weight.shape == (new_vocab, TINY["hidden_size"])
    assert model.get_output_embeddings().weight.shape == (new_vocab, TINY["hidden_size"])
    assert torch.equal(model.get_input_embeddings().weight[: TINY["vocab_size"]], old_embed)
    assert torch.equal(model.get_output_embeddings().weight[: TINY["vocab_size"]], old_head)
    ids = random_ids(2, 6, seed=10, vocab_size=new_vocab)
    ids[0, 2] = new_vocab - 1
    logits = eval_logits(model, ids)
    assert logits.shape == (2, 6, new_vocab) and torch.isfinite(logits).all()


@ARCH
def test_bf16_from_pretrained(arch_id, checkpoints):
    ckpt = checkpoints.get(arch_id)
    model = ARCHITECTURES[arch_id].causal_lm_class.from_pretrained(ckpt.path, dtype=torch.bfloat16).eval()
    backbone = set(tiny_model(REFERENCE).state_dict())
    for name, p in model.named_parameters():
        if name in backbone:
            assert p.dtype == torch.bfloat16, name
    logits = eval_logits(model, ckpt.input_ids)
    assert torch.isfinite(logits.float()).all()


@ARCH
def test_bf16_cast_forward_is_finite(arch_id):
    model = tiny_model(arch_id).to(torch.bfloat16)
    ids = random_ids(2, 12, seed=14)
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids, use_cache=False)
    assert torch.isfinite(out.logits.float()).all() and torch.isfinite(out.loss)
    reference = eval_logits(tiny_model(arch_id), ids)
    assert max_abs_diff(out.logits, reference) < 0.1  # bf16 is the same function, coarsely


# ============================================================================================ 8b. float64
@ARCH
def test_float64_runs_in_float64(arch_id):
    """"At least fp32" for the delicate math: a float64 model computes in float64 end to end (nothing is dropped to
    fp32), agrees with its fp32 self, and keeps the cache and padding contracts at float64 precision."""
    model = tiny_model(arch_id).double()
    ids = random_ids(2, 12, seed=21)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False, output_hidden_states=True)
    assert out.logits.dtype == torch.float64  # (transformers' own loss function computes the loss in fp32)
    assert all(h.dtype == torch.float64 for h in out.hidden_states)
    assert torch.isfinite(out.logits).all()
    assert max_abs_diff(out.logits, eval_logits(tiny_model(arch_id), ids)) < 1e-4  # the same function as in fp32

    # A directional derivative of the loss: autograd vs central differences at step 1e-6. In float64 they agree to
    # ~1e-8 relative; one fp32 round trip anywhere on the path makes the difference quotient noise (~1e-1).
    def loss_of(embeds: torch.Tensor) -> torch.Tensor:
        logits = model(inputs_embeds=embeds, use_cache=False).logits
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())

    embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_of(embeds), embeds)
    direction = torch.randn(embeds.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(22))
    eps = 1e-6
    with torch.no_grad():
        plus, minus = loss_of(embeds + eps * direction), loss_of(embeds - eps * direction)
    numeric, analytic = float((plus - minus) / (2 * eps)), float((grad * direction).sum())
    assert abs(numeric - analytic) <= 1e-6 * max(1.0, abs(analytic)), (numeric, analytic)

    # the cache and padding contracts hold to float64 precision
    cache = DynamicCache(config=model.config)
    pieces = []
    with torch.no_grad():
        step = model(input_ids=ids[:, :5], cache=cache, use_cache=True)
        pieces.append(step.logits)
        for t in range(5, 12):
            step = model(input_ids=ids[:, t:t + 1], cache=cache_of(step), use_cache=True)
            pieces.append(step.logits)
    assert max_abs_diff(torch.cat(pieces, dim=1), out.logits) < 1e-10
    rows = [ids[0], ids[1, :4]]
    padded_ids, mask = left_pad(rows)
    padded = eval_logits(model, padded_ids, attention_mask=mask, position_ids=positions_from_mask(mask))
    assert padded.dtype == torch.float64
    assert max_abs_diff(padded[1, -4:], eval_logits(model, rows[1][None])[0]) < 1e-10


# ============================================================================================ 9. causality
@ARCH
def test_causality(arch_id):
    model = tiny_model(arch_id)
    ids = random_ids(2, 10, seed=15)
    base = eval_logits(model, ids)
    for t in (0, 4, 8):
        changed = ids.clone()
        changed[:, t + 1] = changed[:, t + 1] % (TINY["vocab_size"] - 1) + 1  # a different non-pad token
        out = eval_logits(model, changed)
        assert max_abs_diff(out[:, : t + 1], base[:, : t + 1]) < 1e-6, f"position <= {t} saw token {t + 1}"
        assert max_abs_diff(out[:, t + 1], base[:, t + 1]) > 0, "changing a token must change its own logits"


# ============================================================================================ 10. parameter count
SHAPES = [
    pytest.param({}, id="tiny"),
    pytest.param({"num_hidden_layers": 2, "num_key_value_heads": 4}, id="L2-mha"),
    pytest.param(
        {"num_hidden_layers": 6, "hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1,
         "intermediate_size": 88, "vocab_size": 96},
        id="L6-mqa",
    ),
    pytest.param({"tie_word_embeddings": True}, id="tied"),
]


@ARCH
@pytest.mark.parametrize("overrides", SHAPES)
def test_parameter_count_matches_config(arch_id, overrides):
    config = tiny_config(arch_id, **overrides)
    model = ARCHITECTURES[arch_id].causal_lm_class(config)
    counts = config.parameter_counts()
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["extra"] == config.num_extra_parameters() >= 0
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert tied == bool(overrides.get("tie_word_embeddings", False))


# ============================================================================================ 11. training sanity
@ARCH
def test_every_parameter_gets_a_finite_gradient(arch_id):
    model = tiny_model(arch_id).train()
    ids = random_ids(2, 10, seed=16)
    loss = model(input_ids=ids, labels=ids).loss
    assert torch.isfinite(loss)
    loss.backward()
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None, f"{name} got no gradient (unused parameter?)"
            assert torch.isfinite(p.grad).all(), f"{name} has a non-finite gradient"


@ARCH
def test_adamw_steps_reduce_loss(arch_id):
    model = tiny_model(arch_id).train()
    ids = random_ids(4, 16, seed=17)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    losses = []
    for _ in range(6):
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0] - 0.05, losses


# ============================================================================================ 12. analysis API
@ARCH
def test_depth_states(arch_id):
    model = tiny_model(arch_id)
    ids = random_ids(2, 7, seed=18)
    states = model.depth_states(ids)
    assert len(states) == NUM_LAYERS + 1
    width = states[0].shape[-1]
    for z in states:
        assert z.shape[:2] == (2, 7) and z.ndim == 3
        assert z.shape[-1] == width and width % TINY["hidden_size"] == 0
        assert torch.isfinite(z).all()


def _snapshot(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_state_equal(model, snapshot) -> None:
    state = model.state_dict()
    assert state.keys() == snapshot.keys()
    for k, v in snapshot.items():
        assert torch.equal(state[k], v), f"{k} was not restored exactly"


@ARCH
def test_skip_block_changes_output_and_restores(arch_id):
    model = tiny_model(arch_id)
    ids = random_ids(2, 8, seed=19)
    snapshot, base = _snapshot(model), eval_logits(model, ids)
    changed = []
    for layer in range(NUM_LAYERS):
        with model.skip_block(layer):
            changed.append(max_abs_diff(eval_logits(model, ids), base) > 1e-6)
        assert torch.equal(eval_logits(model, ids), base)
    assert any(changed), "skipping any single block never changed the output"
    _assert_state_equal(model, snapshot)


@ARCH
def test_swap_blocks_changes_output_and_restores(arch_id):
    model = tiny_model(arch_id)
    ids = random_ids(2, 8, seed=20)
    snapshot, base = _snapshot(model), eval_logits(model, ids)
    with model.swap_blocks(0, NUM_LAYERS - 1):
        swapped = eval_logits(model, ids)
    assert max_abs_diff(swapped, base) > 1e-6, "swapping the first and last block changed nothing"
    _assert_state_equal(model, snapshot)
    assert torch.equal(eval_logits(model, ids), base)
    with model.swap_blocks(1, 1):  # a self-swap is a no-op
        assert torch.equal(eval_logits(model, ids), base)


@ARCH
def test_block_index_out_of_range_raises(arch_id):
    model = tiny_model(arch_id)
    for bad in (NUM_LAYERS, -NUM_LAYERS - 1):
        with pytest.raises(IndexError):
            with model.skip_block(bad):
                pass
        with pytest.raises(IndexError):
            with model.swap_blocks(0, bad):
                pass
    with model.skip_block(-1):  # negative indices count from the end, like a list
        assert model.model.layers[NUM_LAYERS - 1].skipped
