"""The compared models: every requested architecture and ``pre_ln`` built from the benchmark's shape and seed, and
the control, a transformers ``LlamaForCausalLM`` of the same shape holding ``pre_ln``'s state dict."""

from __future__ import annotations

import torch

from depthbench.bench.settings import LLAMA, REFERENCE, BenchSettings
from depthbench.bench.shapes import parse_bench_shape


def shape_fields(settings: BenchSettings) -> dict:
    """The model-config fields of ``settings.shape``, with room for the training sequence and the decoded tokens."""
    fields = dict(parse_bench_shape(settings.shape, settings.batch_size, settings.seq_len,
                                    settings.vocab_size).fields)
    fields["max_position_embeddings"] = max(settings.seq_len, settings.prompt_len + settings.decode_tokens)
    return fields


def llama_from(config) -> torch.nn.Module:
    """A ``LlamaForCausalLM`` with the same shape, norm eps, RoPE base and attention backend as ``config``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    llama_config = LlamaConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads, head_dim=config.head_dim,
        max_position_embeddings=config.max_position_embeddings, rms_norm_eps=config.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": float(config.rope_theta)},
        tie_word_embeddings=config.tie_word_embeddings, hidden_act=config.hidden_act, attention_bias=False,
        mlp_bias=False, initializer_range=config.initializer_range, bos_token_id=None, eos_token_id=None,
        pad_token_id=None, attn_implementation=config._attn_implementation,
    )
    return LlamaForCausalLM(llama_config)


def build_models(names: list[str], settings: BenchSettings, share_weights: bool = True) -> dict[str, torch.nn.Module]:
    """``{name: model}`` on ``settings.device``, each built from ``settings.seed``. ``"llama"`` gets ``pre_ln``'s
    state dict (``share_weights``; a temporary ``pre_ln`` is built when it is not in ``names``). Architectures keep
    their own init."""
    from depthbench.registry import build_config, build_model

    fields = shape_fields(settings)
    models: dict[str, torch.nn.Module] = {}
    for name in names:
        torch.manual_seed(settings.seed)
        if name == LLAMA:
            config = build_config(REFERENCE, attn_implementation=settings.attn_implementation, **fields)
            model = llama_from(config)
            if share_weights:
                reference = models.get(REFERENCE)
                if reference is None:  # the seed's pre_ln: re-seed, the control's own init drew from the RNG
                    torch.manual_seed(settings.seed)
                    reference = build_model(REFERENCE, config=config)
                model.load_state_dict(reference.state_dict(), strict=True)
        else:
            model = build_model(name, attn_implementation=settings.attn_implementation, **fields)
        models[name] = model.to(settings.device)
    return models
