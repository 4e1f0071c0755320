"""Tiny random source models of the four families ``depthbench upcycle`` reads, built by transformers itself.

Each builder returns a ``transformers`` causal LM (eval mode, fp32, seeded) whose special features are switched on
and whose weights are not at an init where a bug could hide: biases and q/k-norm gains are random, not 0 / 1.
"""

from __future__ import annotations

import torch

SHAPE = dict(vocab_size=96, hidden_size=32, intermediate_size=56, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128)


def _randomize(model, seed: int):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or name.endswith("norm.weight") or "layernorm" in name:
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + 0.3 * torch.randn(p.shape, generator=generator))
    return model.eval()


def llama(seed: int = 0, tied: bool = False, rope_scaling: bool = False, bias: bool = False, head_dim=None):
    from transformers import LlamaConfig, LlamaForCausalLM

    rope = {"rope_type": "default", "rope_theta": 5000.0}
    if rope_scaling:
        rope = {"rope_type": "llama3", "rope_theta": 5000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
    config = LlamaConfig(**SHAPE, tie_word_embeddings=tied, rope_parameters=rope, attention_bias=bias,
                         head_dim=head_dim or SHAPE["hidden_size"] // SHAPE["num_attention_heads"], rms_norm_eps=1e-5,
                         bos_token_id=1, eos_token_id=2)
    torch.manual_seed(seed)
    return _randomize(LlamaForCausalLM(config), seed)


def mistral(seed: int = 1, sliding_window: int = 5):
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(**SHAPE, sliding_window=sliding_window, rope_theta=10000.0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(seed)
    return _randomize(MistralForCausalLM(config), seed)


def qwen2(seed: int = 2, tied: bool = True):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**SHAPE, tie_word_embeddings=tied, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(seed)
    return _randomize(Qwen2ForCausalLM(config), seed)


def qwen3(seed: int = 3, head_dim: int = 12):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(**SHAPE, head_dim=head_dim, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(seed)
    return _randomize(Qwen3ForCausalLM(config), seed)


#: name -> builder, one per family (with its special features on).
SOURCES = {"llama": llama, "llama_rope_scaled_tied": lambda: llama(tied=True, rope_scaling=True, head_dim=10),
           "mistral": mistral, "qwen2": qwen2, "qwen3": qwen3}


def inputs(vocab: int = SHAPE["vocab_size"], batch: int = 2, length: int = 24, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b|."""
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()
