"""The transformers-ecosystem part of the model contract, parametrized over the registry.

What works on ``LlamaForCausalLM`` must work on every registered architecture, or be refused at once with an
error that names the feature and the architecture. These tests cover what practitioners' tools rely on beyond the
basic contract of ``test_contract.py``: big-model offloading (accelerate ``device_map="auto"``), both gradient
checkpointing modes, the causal-LM loss keywords, attention outputs, the cache keyword, static caches and
``torch.compile``, RoPE scaling, custom 4-D masks, padding-free packed batches and the task heads.

Run it (all architectures, or one) with::

    python -m pytest tests/modeling/test_contract_hf.py -q
    python -m pytest tests/modeling/test_contract_hf.py -q -k "moda"
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache

from depthbench.registry import ARCHITECTURES
from tests.helpers import ARCH_IDS, TINY, cache_of, eval_logits, greedy, max_abs_diff, random_ids, tiny_model

ARCH = pytest.mark.parametrize("arch_id", ARCH_IDS)
ATOL = 1e-5
NUM_LAYERS = TINY["num_hidden_layers"]


# ============================================================================================ offloading
@ARCH
def test_no_module_is_a_forward_argument(arch_id):
    """accelerate's hooks move every forward argument with ``.to()``; a module argument breaks offloading."""
    model = tiny_model(arch_id)
    seen: list[str] = []

    def check(module, args, kwargs):
        for value in (*args, *kwargs.values()):
            if isinstance(value, nn.Module):
                seen.append(f"{type(module).__name__} got a {type(value).__name__}")

    handles = [m.register_forward_pre_hook(check, with_kwargs=True) for m in model.modules()]
    eval_logits(model, random_ids(1, 4, seed=1), output_hidden_states=True)
    for handle in handles:
        handle.remove()
    assert not seen, seen


@ARCH
def test_offloaded_model_matches_in_memory(arch_id, checkpoints, tmp_path):
    """``device_map="auto"`` with a memory limit that offloads half the model to disk: same logits, same hidden
    states and the same greedy continuation as the model in memory."""
    ckpt = checkpoints.get(arch_id)
    cls = ARCHITECTURES[arch_id].causal_lm_class
    reference = cls.from_pretrained(ckpt.path).eval()
    budget = sum(p.numel() * p.element_size() for p in reference.parameters()) // 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Some parameters are on the meta device because they were offloaded"
        offloaded = cls.from_pretrained(
            ckpt.path, device_map="auto", max_memory={"cpu": budget}, offload_folder=str(tmp_path / "offload")
        ).eval()
    placements = set(offloaded.hf_device_map.values())
    assert {"cpu", "disk"} <= placements, offloaded.hf_device_map
    with torch.no_grad():
        out = offloaded(input_ids=ckpt.input_ids, use_cache=False, output_hidden_states=True)
        ref = reference(input_ids=ckpt.input_ids, use_cache=False, output_hidden_states=True)
    assert max_abs_diff(out.logits, ref.logits) < ATOL
    for a, b in zip(out.hidden_states, ref.hidden_states, strict=True):
        assert max_abs_diff(a, b) < ATOL
    prompt = ckpt.input_ids[:1, :4]
    assert torch.equal(greedy(offloaded, prompt, 3), greedy(reference, prompt, 3))


# ============================================================================================ checkpointing
@ARCH
def test_reentrant_gradient_checkpointing_gives_same_loss_and_grads(arch_id):
    """``use_reentrant=True`` (PEFT's default in many setups) must work for streams that are not plain tensors
    (``test_contract.py`` covers the default non-reentrant mode)."""
    plain = tiny_model(arch_id).train()
    checkpointed = tiny_model(arch_id).train()
    checkpointed.load_state_dict(plain.state_dict())
    checkpointed.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True})
    calls = {"n": 0}
    forward = checkpointed.model.layers[0].mlp.forward

    def counted(*args, **kwargs):
        calls["n"] += 1
        return forward(*args, **kwargs)

    checkpointed.model.layers[0].mlp.forward = counted
    ids = random_ids(2, 8, seed=9)
    losses = {}
    for name, model in (("plain", plain), ("checkpointed", checkpointed)):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses[name] = loss.item()
    assert calls["n"] == 2  # the block was really recomputed in backward
    assert abs(losses["plain"] - losses["checkpointed"]) < 1e-6
    grads = dict(checkpointed.named_parameters())
    for name, p in plain.named_parameters():
        assert p.grad is not None and grads[name].grad is not None, name
        assert max_abs_diff(p.grad, grads[name].grad) < 1e-6, name


# ============================================================================================ loss keywords
@ARCH
def test_loss_takes_shift_labels_and_loss_keywords(arch_id):
    """Pre-shifted targets (sequence/context parallelism) replace the shift of ``labels``, as in Llama."""
    model = tiny_model(arch_id)
    ids = random_ids(2, 9, seed=31)
    shift_labels = random_ids(2, 9, seed=32)  # deliberately NOT ids shifted by one
    shift_labels[0, :3] = -100
    logits = eval_logits(model, ids)
    flat = logits.reshape(-1, logits.shape[-1])
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids, shift_labels=shift_labels, use_cache=False).loss
        summed = model(input_ids=ids, labels=ids, shift_labels=shift_labels, num_items_in_batch=5, use_cache=False)
        other = shift_labels.clamp(min=0)  # a custom ignore_index: id 7 is ignored, -100 would be out of range
        ignored = model(input_ids=ids, labels=ids, shift_labels=other, ignore_index=7, use_cache=False).loss
    assert abs(loss.item() - F.cross_entropy(flat, shift_labels.reshape(-1)).item()) < ATOL
    expected_sum = F.cross_entropy(flat, shift_labels.reshape(-1), reduction="sum").item() / 5
    assert abs(summed.loss.item() - expected_sum) < ATOL
    assert abs(ignored.item() - F.cross_entropy(flat, other.reshape(-1), ignore_index=7).item()) < ATOL


# ============================================================================================ attentions
@ARCH
def test_output_attentions_with_eager_and_in_generate(arch_id):
    """Eager attention returns transformers' shape contract, ``[B, H, T, T_kv]`` per layer: rows of causal
    weights that sum to 1, or, for MoDA, the part of its one softmax on the sequence keys; the rest, on its depth
    slots, comes as ``depth_attentions`` with ``output_depth_attentions=True`` (other architectures ignore it)."""
    model = tiny_model(arch_id, attn_implementation="eager")
    ids = random_ids(2, 6, seed=33)
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True, output_depth_attentions=True, use_cache=False)
    assert out.attentions is not None and len(out.attentions) == NUM_LAYERS
    depth = getattr(out, "depth_attentions", None) or (None,) * NUM_LAYERS
    for layer, (weights, depth_weights) in enumerate(zip(out.attentions, depth, strict=True)):
        assert weights.shape == (2, TINY["num_attention_heads"], 6, 6)
        total = weights.sum(-1) if depth_weights is None else weights.sum(-1) + depth_weights.sum(-1)
        if depth_weights is not None:  # MoDA: 2 depth slots per earlier block
            assert depth_weights.shape == (2, TINY["num_attention_heads"], 6, 2 * layer)
        assert max_abs_diff(total, torch.ones(2, TINY["num_attention_heads"], 6)) < ATOL
        assert weights.triu(1).abs().max() == 0  # causal: no weight on future positions
    as_tuple = model(input_ids=ids, output_attentions=True, use_cache=False, return_dict=False)
    assert len(as_tuple[-1]) == NUM_LAYERS
    generated = greedy(model, ids, 3, output_attentions=True, return_dict_in_generate=True)
    assert len(generated.attentions) == 3 and all(len(step) == NUM_LAYERS for step in generated.attentions)
    assert generated.attentions[-1][0].shape[2:] == (1, 6 + 2)  # a decoding step: one query over the cache


def _sdpa_attention_warnings(model, **inputs) -> tuple[object, list[str]]:
    """``model(**inputs)`` under sdpa and the warnings transformers' sdpa logger printed meanwhile (its
    ``warning_once`` memory cleared first, so an earlier test's warning does not hide this one)."""
    from transformers.testing_utils import CaptureLogger
    from transformers.utils import logging as hf_logging

    hf_logging.warning_once.cache_clear()
    with CaptureLogger(hf_logging.get_logger("transformers.integrations.sdpa_attention")) as captured:
        with torch.no_grad():
            out = model(**inputs)
    return out, [line for line in captured.out.splitlines() if line]


@ARCH
def test_output_attentions_under_sdpa_warn_and_return_none_as_llama(arch_id, checkpoints):
    """Llama under sdpa answers ``output_attentions=True`` with transformers' warning and no attention weights
    (hidden states still come); every architecture does exactly the same."""
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=TINY["vocab_size"], hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=NUM_LAYERS, num_attention_heads=4)).eval()
    ids = random_ids(1, 4, seed=34)
    asked = dict(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    expected, expected_warnings = _sdpa_attention_warnings(llama, **asked)
    got, got_warnings = _sdpa_attention_warnings(tiny_model(arch_id, attn_implementation="sdpa"), **asked)
    assert expected_warnings and got_warnings == expected_warnings
    assert got.attentions == expected.attentions  # () from transformers' output capturing, as for Llama
    assert len(got.hidden_states) == len(expected.hidden_states) == NUM_LAYERS + 1
    # like any transformers model: asking for attentions at load time selects the eager backend
    ckpt = checkpoints.get(arch_id)
    loaded = ARCHITECTURES[arch_id].causal_lm_class.from_pretrained(ckpt.path, output_attentions=True)
    assert loaded.config._attn_implementation == "eager"
    with torch.no_grad():
        assert len(loaded(input_ids=ckpt.input_ids).attentions) == NUM_LAYERS


# ============================================================================================ cache keyword
@ARCH
def test_old_cache_keyword_behaves_like_llama(arch_id):
    """transformers 5.24 renamed ``past_key_values`` to ``cache`` and its Llama warns about the old name (5.23's
    Llama takes it silently, it being the current name there): ours does exactly what the installed Llama does."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tiny_llama = LlamaConfig(vocab_size=TINY["vocab_size"], hidden_size=32, intermediate_size=64,
                             num_hidden_layers=1, num_attention_heads=4)
    llama = LlamaForCausalLM(tiny_llama).eval()
    model = tiny_model(arch_id)
    ids = random_ids(1, 5, seed=35)
    kinds = {}
    for name, m in (("llama", llama), ("ours", model)):
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            out = m(input_ids=ids[:, :3], past_key_values=DynamicCache(config=m.config), use_cache=True)
            m(input_ids=ids[:, 3:], past_key_values=cache_of(out), use_cache=True)
        kinds[name] = sorted({w.category.__name__ for w in caught if "past_key_values" in str(w.message)})
    assert kinds["ours"] == kinds["llama"]
    # and the old keyword still reaches the cache: incremental logits equal the full forward
    cache = DynamicCache(config=model.config)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        first = model(input_ids=ids[:, :3], past_key_values=cache, use_cache=True).logits
        second = model(input_ids=ids[:, 3:], past_key_values=cache, use_cache=True).logits
    assert max_abs_diff(torch.cat([first, second], 1), eval_logits(model, ids)) < ATOL


# ============================================================================================ static cache, compile
@ARCH
def test_static_cache_greedy_equals_dynamic(arch_id):
    model = tiny_model(arch_id)
    ids = random_ids(2, 5, seed=36)
    kwargs = {"output_logits": True, "return_dict_in_generate": True}
    dynamic = greedy(model, ids, 6, **kwargs)
    static = greedy(model, ids, 6, cache_implementation="static", **kwargs)
    assert torch.equal(static.sequences, dynamic.sequences)
    for a, b in zip(static.logits, dynamic.logits, strict=True):
        assert max_abs_diff(a, b) < ATOL


@pytest.mark.slow  # torch.compile traces every architecture (~7 s each on one core)
@ARCH
def test_generate_compiled_with_static_cache(arch_id):
    """``_can_compile_fullgraph`` is declared: generate's compiled decoding path (fullgraph, static cache) runs and
    gives the eager tokens. The ``eager`` dynamo backend checks graph capture without a C++ toolchain."""
    from transformers import CompileConfig

    model = tiny_model(arch_id)
    assert type(model)._can_compile_fullgraph
    ids = random_ids(1, 5, seed=37)
    reference = greedy(model, ids, 4, cache_implementation="static")
    compile_config = CompileConfig(fullgraph=True, backend="eager", mode=None)
    compile_config._compile_all_devices = True  # transformers' switch to compile on CPU too
    torch._dynamo.reset()
    compiled = greedy(model, ids, 4, cache_implementation="static", compile_config=compile_config)
    assert hasattr(model, "_compiled_call")  # the compiled path really ran
    assert torch.equal(compiled, reference)


# ============================================================================================ RoPE scaling
ROPE_SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32},
    "longrope": {"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": 32,
                 "short_factor": [1.0] * (TINY["hidden_size"] // TINY["num_attention_heads"] // 2),
                 "long_factor": [1.5] * (TINY["hidden_size"] // TINY["num_attention_heads"] // 2)},
}


@pytest.mark.parametrize("rope_type", list(ROPE_SCALINGS))
def test_rope_scaling_equals_llama(rope_type):
    """``rope_parameters`` means exactly what it means for ``LlamaForCausalLM`` (``pre_ln`` is a Llama), also past
    ``max_position_embeddings``, where dynamic NTK rescales."""
    from transformers import LlamaConfig, LlamaForCausalLM

    rope = {**ROPE_SCALINGS[rope_type], "rope_theta": 10000.0}
    model = tiny_model("pre_ln", rope_parameters=dict(rope))
    c = model.config
    llama = LlamaForCausalLM(LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim,
        max_position_embeddings=c.max_position_embeddings, rms_norm_eps=c.rms_norm_eps,
        rope_parameters=dict(rope), tie_word_embeddings=False,
    )).eval()
    llama.load_state_dict(model.state_dict())
    ids = random_ids(1, TINY["max_position_embeddings"] + 16, seed=38)
    assert max_abs_diff(eval_logits(model, ids), eval_logits(llama, ids)) < ATOL


@ARCH
def test_rope_scaling_applies_and_survives_from_pretrained(arch_id, tmp_path):
    plain = tiny_model(arch_id)
    scaled = tiny_model(arch_id, rope_parameters=dict(ROPE_SCALINGS["yarn"]))
    scaled.load_state_dict(plain.state_dict())
    ids = random_ids(1, 12, seed=39)
    logits = eval_logits(scaled, ids)
    assert max_abs_diff(logits, eval_logits(plain, ids)) > 1e-6  # the scaling is really applied
    scaled.save_pretrained(tmp_path)
    loaded = ARCHITECTURES[arch_id].causal_lm_class.from_pretrained(tmp_path).eval()
    assert loaded.config.rope_parameters["rope_type"] == "yarn"
    assert max_abs_diff(eval_logits(loaded, ids), logits) < ATOL  # frequencies recomputed after meta-device loading


# ============================================================================================ masks and packing
def _documents() -> list[torch.Tensor]:
    return [random_ids(1, 5, seed=40)[0], random_ids(1, 7, seed=41)[0]]


@ARCH
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_padding_free_packed_batch_equals_documents_alone(arch_id, attn):
    """transformers' padding-free packing (``DataCollatorWithFlattening``): one row, ``position_ids`` restarting at
    every document, no attention mask; each document must see only itself, in eval (cache on) and training."""
    model = tiny_model(arch_id, attn_implementation=attn)
    docs = _documents()
    packed = torch.cat(docs)[None]
    position_ids = torch.cat([torch.arange(len(d)) for d in docs])[None]
    alone = torch.cat([eval_logits(model, d[None])[0] for d in docs])
    with torch.no_grad():
        evaluated = model(input_ids=packed, position_ids=position_ids).logits[0]  # use_cache from the config
        trained = model.train()(input_ids=packed, position_ids=position_ids).logits[0]
    assert max_abs_diff(evaluated, alone) < ATOL
    assert max_abs_diff(trained, alone) < ATOL


@ARCH
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_custom_4d_attention_mask(arch_id, attn):
    """A custom additive 4-D mask ``[B, 1, T, T]`` (0 = attend, dtype min = masked) is used as given, as in Llama:
    a block-diagonal mask over two packed documents gives each document's own logits."""
    model = tiny_model(arch_id, attn_implementation=attn)
    docs = _documents()
    sizes = [len(d) for d in docs]
    allowed = torch.block_diag(*[torch.ones(n, n) for n in sizes]).tril().bool()
    mask = torch.zeros(1, 1, *allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    position_ids = torch.cat([torch.arange(n) for n in sizes])[None]
    out = eval_logits(model, torch.cat(docs)[None], attention_mask=mask, position_ids=position_ids)[0]
    alone = torch.cat([eval_logits(model, d[None])[0] for d in docs])
    assert max_abs_diff(out, alone) < ATOL


# ============================================================================================ task heads
HEADS = ["AutoModelForSequenceClassification", "AutoModelForTokenClassification", "AutoModelForQuestionAnswering"]


@ARCH
def test_task_heads_load_from_a_causal_lm_checkpoint_and_train(arch_id, checkpoints):
    """Llama's three task heads exist for every architecture (transformers' generic heads), are registered with
    the Auto classes and written into ``auto_map``, and load the decoder of a causal-LM checkpoint by name."""
    import transformers

    ckpt = checkpoints.get(arch_id)
    auto_map = json.loads((ckpt.path / "config.json").read_text())["auto_map"]
    lm_state = ARCHITECTURES[arch_id].causal_lm_class.from_pretrained(ckpt.path).state_dict()
    ids = random_ids(2, 6, seed=42)
    ids[1, -2:] = 0  # right padding (pad id 0): sequence classification reads the last real token
    for auto_name in HEADS:
        expected = ARCHITECTURES[arch_id].auto_classes[auto_name]
        assert auto_map[auto_name].endswith("." + expected.__name__)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = getattr(transformers, auto_name).from_pretrained(ckpt.path, num_labels=3, pad_token_id=0)
        assert type(model) is expected
        state = model.state_dict()
        for name, tensor in lm_state.items():
            if name.startswith("model."):
                assert torch.equal(state[name], tensor), f"{auto_name}: {name} not loaded from the LM"
        model.train()
        if auto_name == "AutoModelForQuestionAnswering":
            out = model(input_ids=ids, start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 3]))
            assert out.start_logits.shape == out.end_logits.shape == (2, 6)
        elif auto_name == "AutoModelForTokenClassification":
            out = model(input_ids=ids, labels=torch.randint(0, 3, (2, 6)))
            assert out.logits.shape == (2, 6, 3)
        else:
            out = model(input_ids=ids, labels=torch.tensor([0, 2]))
            hidden = model.model(input_ids=ids).last_hidden_state
            assert max_abs_diff(out.logits[1], model.score(hidden[1, 3])) < ATOL  # last non-pad token
        assert torch.isfinite(out.loss)
        out.loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# ============================================================================================ PEFT
@ARCH
def test_peft_lora_with_reentrant_checkpointing_merge_and_reload(arch_id, tmp_path):
    """LoRA (PEFT) with reentrant checkpointing trains like without checkpointing; merged and reloaded adapters
    give the adapted model's logits."""
    peft = pytest.importorskip("peft")
    lora = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0)
    models = {}
    for name, reentrant in (("plain", None), ("checkpointed", True)):
        torch.manual_seed(0)
        base = tiny_model(arch_id).train()
        if reentrant:
            base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True})
        models[name] = peft.get_peft_model(base, peft.LoraConfig(**lora))
    models["checkpointed"].load_state_dict(models["plain"].state_dict())
    for model in models.values():  # a non-zero B, so every LoRA matrix gets a gradient
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(std=0.02, generator=torch.Generator().manual_seed(len(n)))
    ids = random_ids(2, 8, seed=43)
    losses = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "use_cache=True is incompatible with gradient checkpointing"
        for name, model in models.items():
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            losses[name] = loss.item()
    assert abs(losses["plain"] - losses["checkpointed"]) < 1e-6
    grads = dict(models["checkpointed"].named_parameters())
    trainable = [(n, p) for n, p in models["plain"].named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n, _ in trainable)
    for n, p in trainable:
        assert grads[n].grad is not None and max_abs_diff(p.grad, grads[n].grad) < 1e-6, n
        assert p.grad.abs().sum() > 0, n
    adapted = models["plain"].eval()
    expected = eval_logits(adapted, ids)
    adapted.save_pretrained(tmp_path / "adapter")
    reloaded = peft.PeftModel.from_pretrained(tiny_model(arch_id), tmp_path / "adapter").eval()
    assert max_abs_diff(eval_logits(reloaded, ids), expected) < ATOL
    merged = reloaded.merge_and_unload()
    assert type(merged) is ARCHITECTURES[arch_id].causal_lm_class
    assert max_abs_diff(eval_logits(merged, ids), expected) < ATOL


def _flash_style_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, position_ids=None,
                           **kwargs):
    """A stand-in for a flash-attention varlen kernel (registered with transformers' ``AttentionInterface``): no
    mask is built for it, so it must find the documents of a packed row from ``position_ids`` itself."""
    assert attention_mask is None and position_ids is not None
    starts = (position_ids[0] == 0).cumsum(0)  # document index of every token
    allowed = (starts[:, None] == starts[None, :]) & torch.ones(len(starts), len(starts), dtype=torch.bool).tril()
    key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
    value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


@ARCH
def test_packed_batch_with_a_flash_style_kernel(arch_id):
    """Flash-attention packing: the kernel gets ``position_ids`` (as in Llama) and no mask; MoDA, whose attention
    is its own math, refuses any kernel but eager/sdpa with a clear error instead of ignoring the documents."""
    from transformers import AttentionInterface

    AttentionInterface.register("depthbench_test_varlen", _flash_style_attention)
    docs = _documents()
    packed = torch.cat(docs)[None]
    position_ids = torch.cat([torch.arange(len(d)) for d in docs])[None]
    reference = tiny_model(arch_id)
    alone = torch.cat([eval_logits(reference, d[None])[0] for d in docs])
    model = tiny_model(arch_id, attn_implementation="depthbench_test_varlen")
    if arch_id == "moda":
        with pytest.raises(NotImplementedError, match="depthbench_test_varlen"):
            eval_logits(model, packed, position_ids=position_ids)
        return
    assert max_abs_diff(eval_logits(model, packed, position_ids=position_ids)[0], alone) < ATOL
