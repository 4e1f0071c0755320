"""The shared depthbench backbone: a Llama-style decoder whose residual wiring is pluggable.

This file ships to the Hugging Face Hub as remote code: it imports only torch, transformers and its sibling files.
The norms live in ``norms.py``, the precision helpers in ``numerics.py``, the no-autograd fast-path machinery in
``fast_path.py`` and the gradient checkpointing of streams that are not single tensors in
``depthbench_checkpointing.py``.

Everything except the residual wiring is shared by every architecture: token embedding, RoPE attention (eager /
SDPA / any registered attention backend), SwiGLU MLP, the norms, the LM head, the KV cache, the loss and the
Hugging Face plumbing. Parameter names are exactly those of ``transformers.LlamaForCausalLM`` (``model.embed_tokens``,
``model.layers.N.self_attn.q_proj``, ``model.layers.N.input_layernorm``, ``model.norm``, ``lm_head`` ...), so a
``pre_ln`` checkpoint is a valid Llama checkpoint and shared weights transfer by name between architectures.

An architecture supplies one :class:`Wiring` subclass (model level) that builds one :class:`Residual` module per
sublayer. The residual module answers the only question the architectures disagree on::

    stream = residual(stream, norm, branch)    # Pre-LN: stream + branch(norm(stream))

where ``stream`` is whatever the architecture carries between sublayers (a tensor for Pre-LN, n streams for
hyper-connections, a bank of depth sources for attention residuals), ``norm`` applies the sublayer's own norm
(``input_layernorm`` / ``post_attention_layernorm``) and ``branch`` runs the attention or MLP. Both are plain
functions that the :class:`DecoderLayer` builds around its own modules, never the modules themselves (why: see
``DecoderLayer.forward``). The wiring also says how the embedding enters the stream (:meth:`Wiring.enter`), how the
stream becomes the final hidden state (:meth:`Wiring.exit`), and what the analysis tools observe
(:meth:`Wiring.readout`, :meth:`Wiring.depth_state`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, GenerationMixin, PreTrainedModel
from transformers import initialization as hf_init
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_layers import (
    GenericForQuestionAnswering,
    GenericForSequenceClassification,
    GenericForTokenClassification,
    GradientCheckpointingLayer,
)
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update
from transformers.utils import can_return_tuple

from .configuration_depthbench import DepthBenchConfig
from .depthbench_checkpointing import stream_checkpointing
from .hf_compat import (
    CACHE_FIELD,
    OutputRecorder,
    attention_interface,
    cache_update,
    capture_outputs,
    causal_mask,
    merge_with_config_defaults,
    renamed_cache_kwarg,
)
from .norms import LayerNorm, RMSNorm, make_norm

#: What a residual module receives as ``norm``: a plain function [.., d] -> [.., d] that calls the sublayer's norm.
Norm = Callable[[torch.Tensor], torch.Tensor]
#: What a residual module receives as ``branch``: a plain function calling the attention (keyword extras allowed)
#: or the MLP.
Branch = Callable[..., torch.Tensor]

# ================================================================================================ backbone pieces
def rope_inv_freq(config: DepthBenchConfig) -> torch.Tensor:
    """Inverse RoPE frequencies ``theta^(-2i/head_dim)`` for i in [0, head_dim/2) (plain, unscaled RoPE)."""
    dim = config.head_dim
    return 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))


def rope_init(config: DepthBenchConfig, device: torch.device | None = None) -> tuple[torch.Tensor, float]:
    """``(inv_freq [head_dim/2], attention_scaling)`` of the config's RoPE variant (``rope_parameters``): plain
    RoPE, or one of transformers' scaled variants (linear, dynamic NTK, YaRN, LongRoPE, Llama 3), computed by
    transformers' own ``ROPE_INIT_FUNCTIONS`` exactly as for ``LlamaRotaryEmbedding``."""
    rope_type = config.rope_parameters.get("rope_type", "default")
    if rope_type == "default":
        return rope_inv_freq(config).to(device), 1.0
    return ROPE_INIT_FUNCTIONS[rope_type](config, device)


class RotaryEmbedding(nn.Module):
    """Rotate-half RoPE with Llama's ``rope_parameters`` variants (the dynamic ones update ``inv_freq`` with the
    sequence length through transformers' ``dynamic_rope_update``). ``inv_freq`` and ``original_inv_freq`` are
    non-persistent buffers, recomputed in ``_init_weights`` after loading; ``attention_scaling`` (YaRN, LongRoPE)
    multiplies cos and sin, so it scales every query and key, as in Llama."""

    def __init__(self, config: DepthBenchConfig):
        super().__init__()
        self.config = config
        self.rope_type = config.rope_parameters.get("rope_type", "default")
        self.max_seq_len_cached = self.original_max_seq_len = config.max_position_embeddings
        inv_freq, self.attention_scaling = rope_init(config)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("original_inv_freq", inv_freq.clone(), persistent=False)

    @torch.no_grad()
    @dynamic_rope_update
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = torch.promote_types(x.dtype, torch.float32)
        freqs = position_ids[..., None].to(dtype) * self.inv_freq.to(device=x.device, dtype=dtype)  # [B,T,hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [B,T,hd]
        cos, sin = emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling
        return cos.to(x.dtype), sin.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    """Apply RoPE to q, k of shape [B, H, T, hd] with cos/sin of shape [B, T, hd]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[B, H_kv, T, hd] -> [B, H_kv * n_rep, T, hd] (GQA)."""
    if n_rep == 1:
        return hidden_states
    b, h, t, d = hidden_states.shape
    return hidden_states[:, :, None].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Reference attention: softmax(q k^T * scaling + mask) v, softmax in at least fp32. Returns ([B,T,H,hd],
    weights)."""
    key = repeat_kv(key, module.num_key_value_groups)
    value = repeat_kv(value, module.num_key_value_groups)
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = F.softmax(weights, dim=-1, dtype=torch.promote_types(query.dtype, torch.float32)).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


class Attention(nn.Module):
    """Causal multi-head (GQA-capable) self-attention with RoPE and softmax scale 1/sqrt(head_dim), as Llama's.

    Options of the config, each off by default (the study's backbone) and named as in transformers' models so that
    their checkpoints map by name: ``attention_bias`` / ``attention_output_bias`` (Llama, Qwen2: q/k/v biases),
    ``qk_norm`` (Qwen3: per-head RMSNorm ``q_norm`` / ``k_norm`` of queries and keys before RoPE) and
    ``sliding_window`` (Mistral: the mask and the attention backend see the window)."""

    def __init__(self, config: DepthBenchConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        self.is_causal = True
        self.sliding_window = getattr(config, "sliding_window", None)
        d = config.hidden_size
        bias = bool(getattr(config, "attention_bias", False))
        out_bias = bool(getattr(config, "attention_output_bias", bias))
        self.q_proj = nn.Linear(d, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d, self.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d, self.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, d, bias=out_bias)
        if getattr(config, "qk_norm", False):
            self.q_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def project_qkv(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B,H,T,hd], k and v [B,H_kv,T,hd], before RoPE (after the per-head q/k norms if the config has them)."""
        b, t, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, t, -1, self.head_dim)
        k = self.k_proj(hidden_states).view(b, t, -1, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        v = self.v_proj(hidden_states).view(b, t, -1, self.head_dim).transpose(1, 2)
        return q.transpose(1, 2), k.transpose(1, 2), v

    def forward(self, hidden_states, position_embeddings, attention_mask=None, cache: Cache | None = None, **kwargs):
        b, t, _ = hidden_states.shape
        q, k, v = self.project_qkv(hidden_states)
        q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
        if cache is not None:
            k, v = cache_update(cache, k, v, self.layer_idx, kwargs.get("cache_position"))
        attention_fn = attention_interface(self.config._attn_implementation, eager_attention_forward)
        if self.sliding_window is not None:
            kwargs = {**kwargs, "sliding_window": self.sliding_window}  # flash-attention kernels read the window
        out, weights = attention_fn(
            self, q, k, v, attention_mask,
            scaling=self.scaling, dropout=self.attention_dropout if self.training else 0.0, **kwargs,
        )
        return self.o_proj(out.reshape(b, t, -1)), weights


class MLP(nn.Module):
    """SwiGLU: ``down_proj(silu(gate_proj(x)) * up_proj(x))``, no biases."""

    def __init__(self, config: DepthBenchConfig):
        super().__init__()
        d, f = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)
        self.act_fn = nn.SiLU() if config.hidden_act == "silu" else nn.GELU(approximate="tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


# ================================================================================================ residual wiring
class Residual(nn.Module):
    """Residual wiring of one sublayer. This base class is Pre-LN (Xiong et al. 2020, arXiv 2002.04745)::

        x <- x + F(N(x))

    ``norm`` and ``branch`` are plain functions (see ``DecoderLayer.forward``), so a residual module may call each
    any number of times, on any input, but never receives or stores the norm module itself; the norms stay owned
    by the :class:`DecoderLayer` under Llama's names.

    Subclasses override :meth:`forward` (and may own parameters, which they initialise in
    :meth:`reset_parameters`, called from the model's ``_init_weights`` so Hugging Face loading never leaves them
    uninitialised). ``index`` is the global sublayer index: ``2*l`` for block l's attention, ``2*l+1`` for its MLP.
    """

    #: Names (relative to this module) of parameters that get no weight decay (static mixing, biases, gains,
    #: pseudo-queries). Norm gains anywhere in the model are excluded automatically.
    no_decay: tuple[str, ...] = ()

    def __init__(self, config: DepthBenchConfig, index: int):
        super().__init__()
        self.index = index
        self.layer_idx = index // 2
        self.is_attention = index % 2 == 0

    def forward(self, stream, norm: Norm, branch: Branch):
        return stream + branch(norm(stream))

    def reset_parameters(self, config: DepthBenchConfig) -> None:
        """Initialise this module's own parameters/buffers with ``transformers.initialization`` functions."""

    def extra_repr(self) -> str:
        return f"index={self.index}"


class Wiring(nn.Module):
    """Model-level residual wiring: builds the per-sublayer :class:`Residual` modules and owns whatever sits
    before the first block and after the last one. This base class is Pre-LN.

    Subclasses set :attr:`residual_class` (or override :meth:`make_residual`) and override the hooks below.
    Model-level parameters of an architecture (for example a final depth-mixing query) live on the wiring and
    appear as ``model.wiring.<name>`` in the state dict.
    """

    residual_class: type[Residual] = Residual
    #: Names (relative to the wiring) of model-level parameters that get no weight decay.
    no_decay: tuple[str, ...] = ()
    #: Short family name ("residual", "hyper_connections", "attnres", ...), shown by ``depthbench archs``.
    family = "residual"

    def __init__(self, config: DepthBenchConfig):
        super().__init__()
        self.config = config

    def make_residual(self, config: DepthBenchConfig, index: int) -> nn.Module:
        return self.residual_class(config, index)

    def make_attention(self, config: DepthBenchConfig, layer_idx: int) -> nn.Module:
        return Attention(config, layer_idx)

    def reset_parameters(self, config: DepthBenchConfig) -> None:
        """Initialise the wiring's own model-level parameters (none here), as :meth:`Residual.reset_parameters`."""

    def configure_init(self, model: "DepthBenchModel") -> None:
        """Annotate backbone modules with architecture-specific init std (``module.init_std = ...``).

        Called once in ``DepthBenchModel.__init__`` (before ``post_init``); ``_init_weights`` reads ``init_std``.
        """

    def forward(self, stream, final_norm: Norm) -> torch.Tensor:
        """Calling the wiring runs :meth:`exit` through ``nn.Module.__call__``, so module hooks (accelerate's
        offload hooks, which load this wiring's own parameters, e.g. a final depth-mixing query) apply."""
        return self.exit(stream, final_norm)

    # -------------------------------------------------------------------------------------------- stream hooks
    def enter(self, embeddings: torch.Tensor):
        """Embedding output [B,T,d] -> the stream entering block 0."""
        return embeddings

    def exit(self, stream, final_norm: Norm) -> torch.Tensor:
        """Stream after the last block -> final hidden state [B,T,d] that ``lm_head`` reads (``final_norm`` applies
        the model's final norm, a plain function like a residual's ``norm``)."""
        return final_norm(stream)

    def readout(self, stream) -> torch.Tensor:
        """Stream -> [B,T,d] pre-final-norm state (``output_hidden_states`` and the logit lens)."""
        return stream

    def entry_readout(self, embeddings: torch.Tensor, stream) -> torch.Tensor:
        """The state in front of block 0 that ``output_hidden_states`` reports first (``stream`` = :meth:`enter` of
        ``embeddings``): by default its :meth:`readout`. A wiring whose readout of the entering stream equals the
        embeddings returns the embeddings themselves, so that, as in Llama, the reported tensor is the one the
        gradients flow through."""
        return self.readout(stream)

    def lens_hidden(self, stream, final_norm: nn.Module) -> torch.Tensor:
        """Stream at any depth -> the final hidden state the model's own readout makes of it (the logit lens).

        By default the wiring's :meth:`exit`, so the lens of the last stream is exactly what ``lm_head`` reads."""
        return self.exit(stream, final_norm)

    def depth_state(self, stream, next_layer: "DecoderLayer | None") -> torch.Tensor:
        """Stream after a block -> the per-token state z the analysis metrics read ([B,T,D]).

        ``next_layer`` is the block that will consume this stream (``None`` after the last block); architectures
        whose state is defined by what the next consumer reads (attention residuals) use it.
        """
        return stream

    def skip_layer(self, layer: "DecoderLayer", stream):
        """What a skipped block (``skip_block`` intervention) returns: by default its input, unchanged."""
        return stream

    def swap_pairs(self, model: "DepthBenchModel", i: int, j: int) -> list[tuple[nn.Module, nn.Module]]:
        """Module pairs whose same-named, same-shaped tensors ``swap_blocks(i, j)`` exchanges."""
        return [(model.layers[i], model.layers[j])]


class DecoderLayer(GradientCheckpointingLayer):
    """One transformer block: attention and MLP sublayers, each wrapped by its residual module.

    Gradient checkpointing goes through :func:`stream_checkpointing`, so both ``use_reentrant`` modes work for
    streams that are not single tensors.
    """

    # transformers' `_set_gradient_checkpointing` assigns the checkpoint function here, and the layer calls it. It
    # behaves as Llama's plain attribute (unset: AttributeError; `del` and `mock.patch.object` work) except that what
    # is assigned is adapted to streams on the way in.
    @property
    def _gradient_checkpointing_func(self) -> Callable:
        try:
            return self.__dict__["_stream_checkpointing_func"]
        except KeyError:
            raise AttributeError(
                f"'{type(self).__name__}' object has no attribute '_gradient_checkpointing_func'"
            ) from None

    @_gradient_checkpointing_func.setter
    def _gradient_checkpointing_func(self, checkpoint_fn: Callable) -> None:
        self.__dict__["_stream_checkpointing_func"] = stream_checkpointing(checkpoint_fn)

    @_gradient_checkpointing_func.deleter
    def _gradient_checkpointing_func(self) -> None:
        if self.__dict__.pop("_stream_checkpointing_func", None) is None:
            raise AttributeError("_gradient_checkpointing_func")

    def __init__(self, config: DepthBenchConfig, layer_idx: int, wiring: Wiring):
        super().__init__()
        self.layer_idx = layer_idx
        self.self_attn = wiring.make_attention(config, layer_idx)
        self.mlp = MLP(config)
        self.input_layernorm = make_norm(config)
        self.post_attention_layernorm = make_norm(config)
        self.attn_residual = wiring.make_residual(config, 2 * layer_idx)
        self.mlp_residual = wiring.make_residual(config, 2 * layer_idx + 1)
        # Not modules: the shared wiring is owned by the model; a plain attribute keeps it out of this layer's
        # parameters and state dict.
        self.__dict__["wiring"] = wiring
        self.skipped = False

    def forward(self, stream, attention_mask=None, position_embeddings=None, cache=None, **kwargs):
        if self.skipped:
            return self.wiring.skip_layer(self, stream)

        # Norms and branches reach the residual modules as plain functions that call this layer's own modules,
        # never as the modules themselves, so no module is ever a forward argument: accelerate's big-model hooks
        # move every forward argument of a hooked module to the execution device with `.to()`, which fails on an
        # offloaded module whose weights are still on the meta device.
        def attention_norm(x):
            return self.input_layernorm(x)

        def attention(x, **extra):
            return self.self_attn(x, position_embeddings, attention_mask, cache=cache, **kwargs, **extra)[0]

        def mlp_norm(x):
            return self.post_attention_layernorm(x)

        def mlp(x):
            return self.mlp(x)

        stream = self.attn_residual(stream, attention_norm, attention)
        stream = self.mlp_residual(stream, mlp_norm, mlp)
        return stream


# ================================================================================================ HF models
class DepthBenchPreTrainedModel(PreTrainedModel):
    config_class = DepthBenchConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["DecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    # Every architecture's forward traces without graph breaks (torch.compile(fullgraph=True)) with a static cache,
    # so `generate` may compile its decoding step (tests/modeling/test_contract_hf.py checks this over the registry).
    _can_compile_fullgraph = True
    # `output_attentions=True` collects every attention module's weights (output index 1) through transformers'
    # output recording (`capture_outputs` on the base model's forward), as Llama does.
    _can_record_outputs = {"attentions": OutputRecorder(Attention, index=1)}

    def _init_weights(self, module: nn.Module) -> None:
        """Truncated-normal (cut at 3 std) linears and embeddings, unit norm gains, recomputed RoPE frequencies,
        and each residual module's own init. Uses the guarded ``transformers.initialization`` functions, so
        tensors loaded from a checkpoint are never overwritten."""
        std = getattr(module, "init_std", None) or self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            hf_init.trunc_normal_(module.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)
            if getattr(module, "bias", None) is not None:
                hf_init.zeros_(module.bias)
        elif isinstance(module, (RMSNorm, LayerNorm)):
            hf_init.ones_(module.weight)
        elif isinstance(module, RotaryEmbedding):
            inv_freq, _ = rope_init(module.config, module.inv_freq.device)
            hf_init.copy_(module.inv_freq, inv_freq)
            hf_init.copy_(module.original_inv_freq, inv_freq)
        if isinstance(module, (Residual, Wiring)):
            module.reset_parameters(self.config)

    def no_weight_decay_names(self) -> set[str]:
        """Full names of parameters that should get no weight decay: every norm gain, every bias, and the names
        each residual module / wiring lists in its ``no_decay`` attribute (static mixing, pseudo-queries, ...)."""
        names: set[str] = set()
        for module_name, module in self.named_modules():
            prefix = f"{module_name}." if module_name else ""
            if isinstance(module, (RMSNorm, LayerNorm)):
                names.update(f"{prefix}{n}" for n, _ in module.named_parameters(recurse=False))
            for n, _ in module.named_parameters(recurse=False):
                if n == "bias" or n in getattr(module, "no_decay", ()):
                    names.add(f"{prefix}{n}")
        return names

    def _decoder_class(self) -> type["DepthBenchModel"]:
        """The architecture's decoder class (``model_class`` of a model with a head, the class itself otherwise)."""
        return getattr(self, "model_class", None) or type(self)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """``PreTrainedModel.save_pretrained`` plus a complete ``auto_map`` (AutoConfig, AutoModel, the causal LM
        and every task head of the architecture), so every Auto class loads the checkpoint with
        ``trust_remote_code=True``, whichever of the models was saved."""
        decoder = self._decoder_class()
        self.config.auto_map = {
            "AutoConfig": _class_path(type(self.config)),
            **{auto: _class_path(cls) for auto, cls in getattr(decoder, "auto_classes", {}).items()},
        }
        return super().save_pretrained(save_directory, *args, **kwargs)

    # ------------------------------------------------------------------------------------ analysis interventions
    def _base(self) -> "DepthBenchModel":
        return getattr(self, self.base_model_prefix, self)

    @contextlib.contextmanager
    def skip_block(self, index: int) -> Iterator[None]:
        """Context manager: block ``index`` contributes nothing (the architecture's ``skip_layer`` rule)."""
        base = self._base()
        layer = base.layers[_check_block_index(index, len(base.layers))]
        previous = layer.skipped
        layer.skipped = True
        try:
            yield
        finally:
            layer.skipped = previous

    @contextlib.contextmanager
    def swap_blocks(self, i: int, j: int) -> Iterator[None]:
        """Context manager: exchange all same-named, same-shaped parameters and buffers of blocks i and j
        (plus any module pairs the wiring adds); the model is restored exactly on exit."""
        base = self._base()
        n = len(base.layers)
        i, j = _check_block_index(i, n), _check_block_index(j, n)
        pairs = base.wiring.swap_pairs(base, i, j) if i != j else []
        _swap_tensors(pairs)
        try:
            yield
        finally:
            _swap_tensors(pairs)

    @torch.no_grad()
    def depth_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Per-token states z_0..z_L (z_0 = input to block 0, z_{l+1} = output of block l) as the analysis metrics
        define them for this architecture's family; each is [B, T, D] (D = n*d for multi-stream models)."""
        base = self._base()
        states: list[torch.Tensor] = []
        base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, _depth_states=states)
        return states


def _class_path(cls: type) -> str:
    """``module_file.ClassName`` as written in ``auto_map`` (works for installed and remote-code modules)."""
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"


def _check_block_index(index: int, num_layers: int) -> int:
    if not isinstance(index, int) or not -num_layers <= index < num_layers:
        raise IndexError(
            f"block index {index!r} is out of range: the model has {num_layers} blocks (0..{num_layers - 1})"
        )
    return index % num_layers


@torch.no_grad()
def _swap_tensors(pairs: list[tuple[nn.Module, nn.Module]]) -> None:
    for a, b in pairs:
        tensors_b = dict(b.named_parameters())
        tensors_b.update(dict(b.named_buffers()))
        tensors_a = list(a.named_parameters()) + list(a.named_buffers())
        for name, ta in tensors_a:
            tb = tensors_b.get(name)
            if tb is not None and tb.shape == ta.shape and tb is not ta:
                tmp = ta.detach().clone()
                ta.copy_(tb)
                tb.copy_(tmp)


class DepthBenchModel(DepthBenchPreTrainedModel):
    """The decoder without the LM head. Architectures subclass it and set :attr:`wiring_class`."""

    _auto_class = "AutoModel"  # save_pretrained copies the modeling files (remote code) and writes auto_map

    wiring_class: type[Wiring] = Wiring
    #: What ``forward`` returns; an architecture with outputs of its own (MoDA's depth attentions) subclasses it.
    output_class: type[BaseModelOutputWithPast] = BaseModelOutputWithPast
    #: Auto class name -> class, for every model built on this decoder: itself ("AutoModel"), then the causal LM
    #: and the task heads as their classes are defined (``DecoderHead.__init_subclass__``). ``save_pretrained``
    #: writes them all into ``auto_map`` and the registry registers them with the Auto classes.
    auto_classes: dict[str, type] = {}
    #: The block class ``__init__`` builds each layer from.
    layer_class: type[DecoderLayer] = DecoderLayer

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.auto_classes = {"AutoModel": cls}

    def __init__(self, config: DepthBenchConfig):
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.wiring = self.wiring_class(config)
        self.layers = nn.ModuleList(
            [self.layer_class(config, layer_idx, self.wiring) for layer_idx in range(config.num_hidden_layers)]
        )
        self.norm = make_norm(config)
        self.rotary_emb = RotaryEmbedding(config)
        self.gradient_checkpointing = False
        self.wiring.configure_init(self)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def _final_norm(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The final norm as the plain function :meth:`Wiring.exit` receives."""
        return self.norm(hidden_states)

    @renamed_cache_kwarg
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        past_key_values: Cache | None = None,
        _depth_states: list | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """The decoder. ``output_attentions=True`` adds every attention's weights, recorded by transformers' output
        capturing; only the eager backend computes them (sdpa warns and returns none, as for Llama).
        ``output_hidden_states=True`` adds the state in front of every block (:meth:`Wiring.entry_readout`, then
        :meth:`Wiring.readout`) plus the final normed state. Other keywords reach the attention backend (as in
        Llama)."""
        cache = cache if cache is not None else past_key_values
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if self.gradient_checkpointing and self.training:
            use_cache = False
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        if use_cache and cache is None and not self.training:
            cache = DynamicCache(config=self.config)
        if position_ids is None:
            past_seen = cache.get_seq_length() if cache is not None else 0
            position_ids = (torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen)[None]
        # An empty dynamic cache sizes the mask exactly like no cache; leaving it out lets transformers detect
        # padding-free packed batches (position_ids restarting per document, no attention_mask) in an eval forward
        # too, not only in training (Llama would let the documents attend to each other there).
        fresh = cache is not None and not cache.is_compileable and cache.get_seq_length() == 0
        mask = causal_mask(self.config, inputs_embeds, attention_mask, None if fresh else cache, position_ids)
        position_embeddings = self.rotary_emb(inputs_embeds, position_ids)

        stream = self.wiring.enter(inputs_embeds)
        hidden_states = [] if output_hidden_states else None
        if _depth_states is not None:
            _depth_states.append(self.wiring.depth_state(stream, self.layers[0] if len(self.layers) else None))
        for idx, layer in enumerate(self.layers):
            if hidden_states is not None:
                readout = self.wiring.entry_readout(inputs_embeds, stream) if idx == 0 else self.wiring.readout(stream)
                hidden_states.append(readout)
            # position_ids reach the attention backend as in Llama: flash-attention kernels find the documents of
            # a padding-free packed batch from them (no mask is built for those backends).
            stream = layer(
                stream, attention_mask=mask, position_embeddings=position_embeddings, cache=cache,
                position_ids=position_ids, **kwargs,
            )
            if _depth_states is not None:
                nxt = self.layers[idx + 1] if idx + 1 < len(self.layers) else None
                _depth_states.append(self.wiring.depth_state(stream, nxt))
        last_hidden_state = self.wiring(stream, self._final_norm)  # exit(), through module hooks
        if hidden_states is not None:
            hidden_states.append(last_hidden_state)
        return self.output_class(
            last_hidden_state=last_hidden_state,
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            **{CACHE_FIELD: cache if use_cache else None},
        )


class DecoderHead:
    """Mixin of every model that puts a head on an architecture's decoder (``model_class``): the causal LM and
    the task heads. Defining a subclass with its own ``model_class`` records it in ``model_class.auto_classes``
    under its ``_auto_class``."""

    model_class: type[DepthBenchModel] = DepthBenchModel

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "model_class" in cls.__dict__ and getattr(cls, "_auto_class", None):
            cls.model_class.auto_classes[cls._auto_class] = cls


class DepthBenchForCausalLM(DecoderHead, DepthBenchPreTrainedModel, GenerationMixin):
    """Decoder + untied (by default) LM head. Architectures subclass it and set :attr:`model_class`."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    _auto_class = "AutoModelForCausalLM"
    #: What ``forward`` returns: its fields beyond ``CausalLMOutputWithPast``'s are the decoder output's own.
    output_class: type[CausalLMOutputWithPast] = CausalLMOutputWithPast

    def __init__(self, config: DepthBenchConfig):
        super().__init__(config)
        self.model = self.model_class(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head = new_embeddings

    @renamed_cache_kwarg
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """Causal LM forward. ``labels`` are the (unshifted) input ids; positions with -100 are ignored. Every
        other keyword reaches both the decoder and transformers' causal-LM loss (``self.loss_function``), as in
        Llama: ``num_items_in_batch`` (the Trainer's gradient accumulation: summed loss / count),
        ``ignore_index`` and ``shift_labels`` (targets already shifted, e.g. by sequence/context parallelism, used
        instead of shifting ``labels``)."""
        cache = cache if cache is not None else past_key_values
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden = outputs.last_hidden_state
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden[:, keep, :])
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        extra = {name: outputs.get(name) for name in self.output_class.__dataclass_fields__
                 if name not in CausalLMOutputWithPast.__dataclass_fields__}
        return self.output_class(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)},
            **extra,
        )


# ================================================================================================ task heads
class TaskHead(DecoderHead):
    """Mixin of the task heads: transformers' generic heads (``GenericForSequenceClassification`` & co., the
    classes ``LlamaForSequenceClassification`` & co. are made of) on the architecture's decoder. The generic
    heads build their decoder with ``AutoModel.from_config``; the config class is mapped to this architecture's
    decoder first, which also holds in a process that loaded the classes as remote code (without depthbench)."""

    def __init__(self, config: DepthBenchConfig):
        AutoModel.register(type(config), self.model_class, exist_ok=True)
        super().__init__(config)


class DepthBenchForSequenceClassification(TaskHead, GenericForSequenceClassification, DepthBenchPreTrainedModel):
    """Sequence classification/regression from the last non-pad token (``config.num_labels``, ``problem_type``)."""

    _auto_class = "AutoModelForSequenceClassification"


class DepthBenchForTokenClassification(TaskHead, GenericForTokenClassification, DepthBenchPreTrainedModel):
    """Per-token classification (``config.num_labels``; dropout ``classifier_dropout``, default 0.1)."""

    _auto_class = "AutoModelForTokenClassification"


class DepthBenchForQuestionAnswering(TaskHead, GenericForQuestionAnswering, DepthBenchPreTrainedModel):
    """Extractive question answering: start/end logits per token."""

    _auto_class = "AutoModelForQuestionAnswering"
