"""``depthbench.upcycle.upcycle`` against transformers' own models, for every registered architecture.

Sources: tiny random ``LlamaForCausalLM`` (untied; and tied with Llama 3 RoPE scaling and head_dim != d/heads),
``MistralForCausalLM`` (a sliding window shorter than the inputs), ``Qwen2ForCausalLM`` (q/k/v biases, tied),
``Qwen3ForCausalLM`` (q/k norms), built by transformers (tests/upcycle/tiny_sources.py). Every comparison is with
the source model run by transformers itself, never with our own conversion read back.

    python -m pytest tests/upcycle/test_core.py -q
"""

from __future__ import annotations

import pytest
import torch

from depthbench.registry import ARCHITECTURES
from depthbench.upcycle import EXACT_TOLERANCE, UpcycleError, upcycle
from tests.upcycle import tiny_sources
from tests.upcycle.tiny_sources import inputs, relative_difference

STARTS = {a: spec.config_class.upcycle_start for a, spec in ARCHITECTURES.items()}
EXACT = [a for a, s in STARTS.items() if s == "exact"]
BOUNDED = [a for a, s in STARTS.items() if s == "bounded"]
CHANGES = [a for a, s in STARTS.items() if s == "changes"]


@pytest.fixture(scope="module")
def sources():
    return {name: build() for name, build in tiny_sources.SOURCES.items()}


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def _each_source_and_growth(archs):
    """Parametrize a test over every tiny source family, each of ``archs`` and growth by 0 and 2 blocks."""
    def decorate(test):
        for name, values in (("source_name", list(tiny_sources.SOURCES)), ("arch", archs), ("grow", [0, 2])):
            test = pytest.mark.parametrize(name, values)(test)
        return test
    return decorate


def test_every_architecture_declares_its_start_in_its_own_file():
    for arch_id, spec in ARCHITECTURES.items():
        cls = spec.config_class
        assert cls.upcycle_start in ("exact", "bounded", "changes")
        owner = next(k for k in cls.__mro__ if "upcycle_start" in k.__dict__)
        assert owner.__module__ == cls.__module__ or cls.upcycle_start == "changes", arch_id  # its own file
        assert (cls.upcycle_knob is not None) == (cls.upcycle_start == "bounded"), arch_id
        why = next(k for k in cls.__mro__ if "upcycle_reason" in k.__dict__)
        assert why.__module__ == cls.__module__, f"{arch_id} states no reason of its own"  # not the base's
    reasons = [spec.config_class.upcycle_reason for a, spec in ARCHITECTURES.items() if a in CHANGES]
    assert len(set(reasons)) == len(reasons)  # one reason per function-changing architecture
    assert {"pre_ln", "hc", "denseformer"} <= set(EXACT) and {"mhc", "attnres", "block_attnres"} <= set(BOUNDED)


@_each_source_and_growth(EXACT)
def test_exact_starts_equal_the_source(sources, source_name, arch, grow):
    source, result = sources[source_name], upcycle(sources[source_name], arch, grow_depth=grow)
    assert result.start == "exact"
    assert result.model.config.num_hidden_layers == source.config.num_hidden_layers + grow
    ids = inputs(length=40)  # longer than Mistral's window
    assert relative_difference(_logits(result.model, ids), _logits(source, ids)) <= EXACT_TOLERANCE
    assert result.deviation <= EXACT_TOLERANCE and abs(result.loss_change) < 1e-4


@pytest.mark.parametrize("arch", ["pre_ln", "hc", "denseformer"])
@pytest.mark.parametrize("source_name", ["mistral", "qwen3"])
def test_generate_gives_the_sources_tokens(sources, source_name, arch):
    source = sources[source_name]
    model = upcycle(source, arch, grow_depth=1, grow_mode="append").model
    ids = inputs(batch=1, length=6)
    kwargs = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(ids, **kwargs), source.generate(ids, **kwargs))


@_each_source_and_growth(BOUNDED)
def test_bounded_starts_stay_within_their_bound(sources, source_name, arch, grow):
    source, result = sources[source_name], upcycle(sources[source_name], arch, grow_depth=grow)
    assert result.start == "bounded" and result.bound is not None
    assert result.deviation <= result.bound  # on the sample the bound was computed on
    ids = inputs(length=40)
    ours, theirs = _logits(result.model, ids), _logits(source, ids)
    measured = relative_difference(ours, theirs)
    if arch in ("attnres", "block_attnres"):  # the bound on these inputs, computed here by hand
        rescaled = _attnres_rescaled_logits(source, result.model.config, result.layout, ids)
        assert relative_difference(ours, rescaled) <= EXACT_TOLERANCE  # the identity the bound rests on
        assert measured <= EXACT_TOLERANCE + relative_difference(rescaled, theirs)
    else:
        assert measured <= result.bound


def _attnres_rescaled_logits(source, config, layout, ids):
    """The source run by transformers with each norm output multiplied per token by sqrt((m + eps) / (m + n^2
    eps')), m the norm input's mean square and n the number of sources the zero-query mix averages (Full AttnRes:
    sublayer j reads the embedding and j outputs; the final mix all 2L + 1), every norm but block 0's attention
    norm (which reads the embedding alone, with Pre-LN's eps). A new block's norms are absent (its outputs are 0)."""
    eps, mix = config.rms_norm_eps, config.resolved_mix_eps
    size = config.attnres_sublayers_per_block
    hooks = []

    def count(j):  # sources of the mix read at sublayer j (1 .. 2L): the embedding, full blocks, a partial one
        return 1 + j // size + (1 if j % size else 0)

    def rescale(j):
        def hook(module, args, out):
            m = args[0].float().pow(2).mean(-1, keepdim=True)
            return out * ((m + eps) / (m + count(j) ** 2 * mix)).sqrt()
        return hook

    for pos, src in enumerate(layout):
        if src is None:
            continue
        layer = source.model.layers[src]
        if pos:
            hooks.append(layer.input_layernorm.register_forward_hook(rescale(2 * pos)))
        hooks.append(layer.post_attention_layernorm.register_forward_hook(rescale(2 * pos + 1)))
    hooks.append(source.model.norm.register_forward_hook(rescale(2 * len(layout))))
    try:
        return _logits(source, ids)
    finally:
        for h in hooks:
            h.remove()


KNOB_VALUES = {"attnres_mix_eps": (1e-5, 1e-8), "mhc_init_gap": (4.0, 12.0)}  # (loose, tight)


@pytest.mark.parametrize("arch", BOUNDED)
def test_the_knob_tightens_the_bound_and_the_deviation(sources, arch):
    source = sources["qwen2"]
    knob = ARCHITECTURES[arch].config_class.upcycle_knob
    loose, tight = (upcycle(source, arch, overrides={knob: v}) for v in KNOB_VALUES[knob])
    assert tight.bound < loose.bound
    assert tight.deviation <= loose.deviation
    assert tight.report["knob"] == knob and tight.report["knob_value"] == KNOB_VALUES[knob][1]


@pytest.mark.parametrize("arch", CHANGES)
def test_function_changing_starts_need_the_flag_and_report_the_loss_change(sources, arch):
    source = sources["llama"]
    with pytest.raises(UpcycleError, match="allow-function-change"):
        upcycle(source, arch)
    result = upcycle(source, arch, allow_function_change=True)
    ids, _ = result.report["sample"], None
    assert result.start == "changes"
    ids = torch.randint(0, source.config.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = (result.model(ids, labels=ids).loss - source(ids, labels=ids).loss).item()
    assert result.loss_change == pytest.approx(expected, abs=1e-5)


def test_growth_zeroes_only_the_new_blocks_output_projections(sources):
    source = sources["qwen2"]
    result = upcycle(source, "pre_ln", grow_depth=3)
    layout = result.layout
    assert layout == [0, None, 1, None, None, 2]
    layers = result.model.model.layers
    for pos, src in enumerate(layout):
        o, down, q = layers[pos].self_attn.o_proj.weight, layers[pos].mlp.down_proj.weight, layers[pos].self_attn.q_proj
        if src is None:
            assert not o.any() and not down.any()
            assert q.weight.std() > 0  # the architecture's own init, not zeros
        else:
            assert torch.equal(o, source.model.layers[src].self_attn.o_proj.weight)
    assert upcycle(source, "pre_ln", grow_depth=2, grow_mode="append").layout == [0, 1, 2, None, None]


def test_depth_names_the_grown_models_number_of_blocks(sources):
    source = sources["qwen2"]  # 3 blocks
    assert upcycle(source, "pre_ln", depth=6).layout == [0, None, 1, None, None, 2]  # = grow_depth=3
    assert upcycle(source, "pre_ln", depth=5, grow_mode="append").layout == [0, 1, 2, None, None]
    assert upcycle(source, "pre_ln", depth=3).layout == [0, 1, 2]  # the source's depth: no new block
    with pytest.raises(UpcycleError, match=r"depth=2 is below the source's 3 blocks"):
        upcycle(source, "pre_ln", depth=2)


def test_lns_folds_its_scale_into_the_source_gains(sources):
    source = sources["llama"]
    model = upcycle(source, "lns").model
    gain = model.model.layers[2].input_layernorm.weight
    assert torch.allclose(gain, source.model.layers[2].input_layernorm.weight * 3 ** 0.5)


@pytest.mark.parametrize("kwargs,message", [
    (dict(arch="no_such_arch"), "unknown architecture 'no_such_arch'"),
    (dict(arch="pre_ln", grow_depth=-1), "grow_depth=-1 is not allowed"),
    (dict(arch="pre_ln", grow_depth=1.5), "grow_depth=1.5 is not allowed"),
    (dict(arch="pre_ln", grow_depth=1, grow_mode="sideways"), "grow_mode='sideways' is not allowed"),
    (dict(arch="pre_ln", depth=0), "depth=0 is not allowed"),
    (dict(arch="pre_ln", depth=True), "depth=True is not allowed"),
    (dict(arch="pre_ln", depth=6, grow_depth=3), "depth=6 and grow_depth=3 were both given"),
    (dict(arch="pre_ln", dtype="int8"), "dtype='int8' is not allowed"),
])
def test_bad_arguments_are_refused(sources, kwargs, message):
    with pytest.raises(UpcycleError, match=message.replace("(", r"\(").replace(".", r"\.")):
        upcycle(sources["llama"], **kwargs)


def test_the_upcycled_model_never_shares_storage_with_a_callers_model(sources):
    source = sources["qwen2"]
    before = source.model.layers[0].self_attn.q_proj.weight.clone()
    model = upcycle(source, "hc").model
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight.add_(1.0)  # training the upcycled model ...
    assert torch.equal(source.model.layers[0].self_attn.q_proj.weight, before)  # ... leaves the caller's alone
