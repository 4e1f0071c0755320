"""``depthbench export-llama``: a ``pre_ln`` checkpoint as a stock ``LlamaForCausalLM`` folder (no remote code).

    depthbench export-llama runs/preln-L24 -o preln-L24-llama

    depthbench export-llama aspect-ratio-scaling/preln-... --revision step-001000 -o preln-llama   # a Hub id

depthbench's backbone uses Hugging Face Llama's parameter names, and Pre-LN is exactly Llama's residual wiring, so a
``pre_ln`` model is a Llama model: the export writes a ``LlamaConfig`` (same sizes, RMSNorm eps, the RoPE variant
and its scaling as ``rope_parameters``: default, linear, dynamic NTK, YaRN, LongRoPE, Llama 3; untied head), the
same tensors, and the tokenizer (a Hub id is downloaded with huggingface_hub, tokenizer files included), for tools
that only know Llama (serving engines, quantizers). Every other architecture changes the forward pass (extra norms,
scaled or mixed residual streams, depth attention), so it is refused with the reason: a Llama config would silently
compute a different model (the failure of the reference code's HF converter). The export is checked before it is
written (:func:`check_logits`): its logits must equal the source's, and with RoPE scaling also on a sequence past
the context length, where dynamic NTK and LongRoPE change the frequencies.
"""

from __future__ import annotations

import os
import shutil

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "tokenizer.model", "chat_template.jinja", "generation_config.json")


def llama_config_for(config):
    """The ``LlamaConfig`` equivalent to a ``pre_ln`` config; ``ValueError`` for any other architecture or a
    setting Llama does not have."""
    from transformers import LlamaConfig

    if config.model_type != "depthbench_pre_ln":
        from depthbench.cards import arch_for

        arch = arch_for(config.to_dict())
        raise ValueError(f"export-llama only exports pre_ln models; this is {arch.id} ({arch.description}), whose "
                         "residual wiring is not Llama's: a LlamaForCausalLM would silently compute a different "
                         "model. Publish it with its remote code instead (depthbench publish).")
    if config.norm_type != "rmsnorm":
        raise ValueError(f"norm_type={config.norm_type!r}: Llama uses RMSNorm")
    if config.hidden_act != "silu":
        raise ValueError(f"hidden_act={config.hidden_act!r}: Llama's MLP is SwiGLU with silu")
    return LlamaConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads, head_dim=config.head_dim,
        max_position_embeddings=config.max_position_embeddings, rms_norm_eps=config.rms_norm_eps,
        rope_parameters=dict(config.rope_parameters or {"rope_type": "default", "rope_theta": config.rope_theta}),
        initializer_range=config.initializer_range, tie_word_embeddings=config.tie_word_embeddings,
        attention_bias=False, mlp_bias=False, attention_dropout=config.attention_dropout, hidden_act="silu",
        pad_token_id=config.pad_token_id, bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
    )


def check_logits(source, llama, config, tolerance: float = 1e-4) -> None:
    """Refuse (``ValueError``) unless ``llama`` computes ``source``'s model: the logits on 2 x 16 tokens, and with
    a scaled RoPE also past the context length ``limit`` (``max_position_embeddings``, or the RoPE's
    ``original_max_position_embeddings`` when larger), where dynamic NTK rescales and LongRoPE switches to its
    long factors: the rotary cos/sin of a ``2 * limit`` sequence (cheap, no forward; a rescaling that only starts
    past ``limit`` shows there at once) and the logits of one ``limit + 16`` sequence."""
    import torch

    rope = dict(config.rope_parameters or {})
    generator = torch.Generator().manual_seed(0)

    def logits_diff(batch: int, length: int) -> float:
        ids = torch.randint(0, config.vocab_size, (batch, length), generator=generator)
        with torch.no_grad():
            return (llama(ids).logits - source(ids).logits).abs().max().item()

    diff = logits_diff(2, 16)
    if not diff <= tolerance:
        raise ValueError(f"the Llama export's logits differ from the source's by {diff:g} on 16 tokens; not written")
    if rope.get("rope_type", "default") == "default":
        return
    limit = max(config.max_position_embeddings or 0, rope.get("original_max_position_embeddings") or 0)
    where = (f"past the context length (max_position_embeddings {config.max_position_embeddings}, "
             f"rope_parameters {rope}); not written")
    positions = torch.arange(2 * limit)[None]
    x = torch.zeros(1, 2 * limit, 1)
    with torch.no_grad():
        ours, theirs = source.model.rotary_emb(x, positions), llama.model.rotary_emb(x, positions)
    diff = max((a - b).abs().max().item() for a, b in zip(ours, theirs))
    if not diff <= 1e-6:
        raise ValueError(f"the Llama export's RoPE cos/sin differ from the source's by {diff:g} on "
                         f"{2 * limit} tokens, {where}")
    diff = logits_diff(1, limit + 16)
    if not diff <= tolerance:
        raise ValueError(f"the Llama export's logits differ from the source's by {diff:g} on {limit + 16} tokens, "
                         f"{where}")


def _source_folder(checkpoint: str, revision: str | None, endpoint: str | None, cache_dir: str | None) -> str:
    """A local folder holding ``checkpoint``: a model folder, a training run's ``final/`` export
    (:func:`depthbench.runs.model_dir`, as every command resolves a target), or a Hub id's snapshot (config,
    weights, tokenizer files; huggingface_hub's cache, resumable)."""
    from depthbench.runs import model_dir

    path = model_dir(checkpoint)  # bad local targets (a sweep, a run without final/, a missing path) raise here
    if os.path.isdir(path):
        return path
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, HTTPError

    try:
        return snapshot_download(checkpoint, revision=revision, endpoint=endpoint, cache_dir=cache_dir,
                                 allow_patterns=["*.json", "*.safetensors", *TOKENIZER_FILES])
    except (HFValidationError, HTTPError, OSError) as exc:
        raise ValueError(f"cannot load {checkpoint!r}: neither a local folder nor a Hub model it can download "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None


def export_llama(checkpoint: str, output_dir: str, overwrite: bool = False, check: bool = True,
                 revision: str | None = None, endpoint: str | None = None, cache_dir: str | None = None) -> str:
    """Write ``checkpoint`` (a depthbench ``pre_ln`` HF folder, or a Hub id at ``revision``) as a stock Llama
    folder with the checkpoint's tokenizer; returns ``output_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    from depthbench.registry import register_auto_classes

    register_auto_classes()  # idempotent: the Auto classes know every architecture below

    if os.path.exists(output_dir) and os.listdir(output_dir) and not overwrite:
        raise ValueError(f"{output_dir} exists and is not empty; choose another folder or pass --overwrite")
    folder = _source_folder(checkpoint, revision, endpoint, cache_dir)
    try:
        source = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    except OSError as exc:
        raise ValueError(f"cannot load {checkpoint!r} as a depthbench checkpoint: {exc}") from None
    llama_config = llama_config_for(source.config)
    llama = LlamaForCausalLM(llama_config).eval()
    missing, unexpected = llama.load_state_dict(source.state_dict(), strict=False)
    missing = [k for k in missing if not k.endswith("rotary_emb.inv_freq")]
    if missing or unexpected:
        raise ValueError(f"pre_ln and Llama tensors differ: missing {missing[:8]}, unexpected {unexpected[:8]}")
    if check:
        check_logits(source, llama, source.config)  # the source decides where the two must agree
    dtype = getattr(source.config, "dtype", None)
    if overwrite and os.path.isdir(output_dir):
        shutil.rmtree(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    if isinstance(dtype, torch.dtype) and dtype != torch.float32:
        llama = llama.to(dtype)
    llama.save_pretrained(output_dir, safe_serialization=True)
    for name in TOKENIZER_FILES:
        src = os.path.join(folder, name)
        if os.path.isfile(src) and not (name == "generation_config.json"
                                        and os.path.exists(os.path.join(output_dir, name))):
            shutil.copy2(src, os.path.join(output_dir, name))
    return output_dir
