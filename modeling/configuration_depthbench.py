"""Configuration shared by every depthbench architecture.

This file ships to the Hugging Face Hub as remote code: it imports only the standard library, transformers and its
sibling ``hf_compat.py`` (which refuses a transformers release older than the remote code supports).
Each architecture subclasses :class:`DepthBenchConfig` in its own ``modeling_<id>.py`` file, adds only its own
fields (prefixed with the architecture id) and extends :meth:`DepthBenchConfig.validate` for them.

Field names follow ``transformers.LlamaConfig`` wherever the meaning is the same, so tools that read a Llama
``config.json`` (lm-eval, vLLM-style loaders, parameter counters) work unchanged.
"""

from transformers import PretrainedConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from .hf_compat import MIN_TRANSFORMERS

NORM_TYPES = ("rmsnorm", "layernorm")
#: RoPE variants ``rope_parameters["rope_type"]`` may name: plain RoPE and transformers' scaled variants.
ROPE_TYPES = ("default", *ROPE_INIT_FUNCTIONS)


class DepthBenchConfig(PretrainedConfig):
    """Llama-style decoder backbone configuration (the study's reference backbone).

    Defaults are the study's 400M base shape (L=24, d=1024, 16 heads of 64, SwiGLU width 2736, vocab 50280,
    RoPE theta 10000, RMSNorm eps 1e-6, untied embeddings, truncated-normal init with std 0.02).

    Args:
        vocab_size: Vocabulary size.
        hidden_size: Residual width d.
        intermediate_size: SwiGLU inner width f.
        num_hidden_layers: Number of transformer blocks L (each has an attention and an MLP sublayer).
        num_attention_heads: Query heads H.
        num_key_value_heads: Key/value heads (GQA); defaults to ``num_attention_heads`` (MHA).
        head_dim: Per-head width; defaults to ``hidden_size // num_attention_heads``. Must be even (RoPE).
        max_position_embeddings: Longest sequence the model is trained for (lm-eval reads it as max length).
        rms_norm_eps: Epsilon of every norm.
        rope_theta: RoPE base (kept in sync with ``rope_parameters["rope_theta"]``).
        rope_parameters: RoPE variant and scaling, exactly as ``LlamaConfig.rope_parameters``:
            ``{"rope_type": "default" | "linear" | "dynamic" | "yarn" | "longrope" | "llama3", "rope_theta": ...,
            "factor": ..., ...}`` (the legacy ``rope_scaling`` keyword is accepted too). ``None`` means plain RoPE
            with ``rope_theta``. Scaled variants extend the context of a trained model (e.g. ``{"rope_type":
            "linear", "factor": 4.0}``); transformers' own RoPE initialisation functions compute the frequencies.
        initializer_range: Std of the truncated-normal init (cut at 3 std).
        tie_word_embeddings: Tie ``lm_head`` to ``embed_tokens`` (the study does not).
        norm_type: ``"rmsnorm"`` (default) or ``"layernorm"`` (mean-centred, gain only, no bias).
        hidden_act: MLP activation (``"silu"`` gives SwiGLU).
        attention_dropout: Attention-probability dropout (0 in the study).
        attention_bias: Biases on the q, k, v and o projections (``LlamaConfig.attention_bias``; the study has
            none). ``attention_output_bias`` overrides it for ``o_proj`` alone.
        attention_output_bias: Bias on ``o_proj``; ``None`` (default) follows ``attention_bias``. Qwen2 has q, k, v
            biases and none on o: ``attention_bias=True, attention_output_bias=False``.
        qk_norm: Per-head RMSNorm of queries and keys before RoPE (``self_attn.q_norm`` / ``self_attn.k_norm``, gains
            of width ``head_dim``, eps ``rms_norm_eps``), as in Qwen3 (default False).
        sliding_window: Every layer attends only to the last ``sliding_window`` positions (itself included), as in
            Mistral; ``None`` (default) is full causal attention.
        use_cache: Return a KV cache from ``forward`` in eval mode.
    """

    model_type = "depthbench"
    _auto_class = "AutoConfig"  # save_pretrained copies the defining file and writes auto_map (remote code)
    keys_to_ignore_at_inference = ["cache", "past_key_values"]

    def __init_subclass__(cls, **kwargs):
        # transformers 5.x turns a config subclass without its own __init__ into a dataclass whose generated
        # __init__ bypasses ours (defaults and validation would be skipped). Give such subclasses a pass-through.
        if "__init__" not in cls.__dict__:

            def __init__(self, **init_kwargs):
                super(cls, self).__init__(**init_kwargs)

            cls.__init__ = __init__
        super().__init_subclass__(**kwargs)

    def __init__(
        self,
        vocab_size: int = 50280,
        hidden_size: int = 1024,
        intermediate_size: int = 2736,
        num_hidden_layers: int = 24,
        num_attention_heads: int = 16,
        num_key_value_heads: int | None = None,
        head_dim: int | None = None,
        max_position_embeddings: int = 2048,
        rms_norm_eps: float = 1e-6,
        rope_theta: float = 10000.0,
        initializer_range: float = 0.02,
        tie_word_embeddings: bool = False,
        norm_type: str = "rmsnorm",
        hidden_act: str = "silu",
        attention_dropout: float = 0.0,
        attention_bias: bool = False,
        attention_output_bias: bool | None = None,
        qk_norm: bool = False,
        sliding_window: int | None = None,
        use_cache: bool = True,
        pad_token_id: int | None = None,
        bos_token_id: int | None = None,
        eos_token_id: int | list[int] | None = None,
        **kwargs,
    ):
        rope_parameters = kwargs.pop("rope_parameters", None)
        if isinstance(rope_parameters, dict):  # a Llama-v5 style config; never mutate the caller's dict
            rope_parameters = dict(rope_parameters)
            rope_theta = rope_parameters.get("rope_theta", rope_theta)
        # transformers' PretrainedConfig.__init__ standardises `rope_parameters` (and a legacy `rope_scaling`)
        # into {"rope_type", "rope_theta", ...} because the attribute exists, as it does for LlamaConfig.
        self.rope_parameters = rope_parameters
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_attention_heads if num_key_value_heads is None else num_key_value_heads
        if head_dim is None and isinstance(hidden_size, int) and isinstance(num_attention_heads, int):
            head_dim = hidden_size // max(num_attention_heads, 1)
        self.head_dim = head_dim
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.initializer_range = initializer_range
        self.tie_word_embeddings = tie_word_embeddings
        self.norm_type = norm_type
        self.hidden_act = hidden_act
        self.attention_dropout = attention_dropout
        self.attention_bias = attention_bias
        self.attention_output_bias = attention_bias if attention_output_bias is None else attention_output_bias
        self.qk_norm = qk_norm
        self.sliding_window = sliding_window
        self.mlp_bias = False
        self.use_cache = use_cache
        # The oldest transformers this checkpoint's remote code runs on, for whoever reads config.json (older releases
        # are refused with an ImportError naming it, see hf_compat.py); always the running code's own value.
        kwargs.pop("depthbench_min_transformers", None)
        self.depthbench_min_transformers = MIN_TRANSFORMERS
        # Our checks first (clear ValueErrors naming the field): transformers' own validators run inside the base
        # __init__ and would otherwise report, e.g., an odd head_dim or a missing RoPE factor less clearly.
        self.validate()
        super().__init__(**kwargs)
        if isinstance(self.rope_parameters, dict) and "rope_theta" in self.rope_parameters:
            self.rope_theta = self.rope_parameters["rope_theta"]
        # Token ids are set after the base __init__, which does not declare them as fields in transformers 5.x.
        self.pad_token_id = pad_token_id
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.validate()

    # ------------------------------------------------------------------------------------------------ validation
    @staticmethod
    def _check(ok: bool, field: str, value, allowed: str) -> None:
        if not ok:
            raise ValueError(f"{field}={value!r} is not allowed: {field} must be {allowed}.")

    def _check_positive_int(self, field: str, minimum: int = 1) -> None:
        value = getattr(self, field)
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
        self._check(ok, field, value, f"an integer >= {minimum}")

    def validate(self) -> None:
        """Check every field; raise ``ValueError`` naming the field and the allowed values.

        Subclasses extend this for their own fields and call ``super().validate()`` first.
        """
        for field in ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads",
                      "num_key_value_heads", "head_dim", "max_position_embeddings"):
            self._check_positive_int(field)
        self._check_positive_int("num_hidden_layers", minimum=1)
        self._check(self.head_dim % 2 == 0, "head_dim", self.head_dim, "even (rotary embeddings rotate pairs)")
        self._check(self.num_attention_heads % self.num_key_value_heads == 0, "num_key_value_heads",
                    self.num_key_value_heads, f"a divisor of num_attention_heads={self.num_attention_heads}")
        self._check(self.norm_type in NORM_TYPES, "norm_type", self.norm_type, f"one of {list(NORM_TYPES)}")
        self._check(isinstance(self.rms_norm_eps, (int, float)) and self.rms_norm_eps > 0, "rms_norm_eps",
                    self.rms_norm_eps, "a positive number")
        self._check(isinstance(self.rope_theta, (int, float)) and self.rope_theta > 0, "rope_theta",
                    self.rope_theta, "a positive number")
        self._validate_rope_parameters()
        self._check(isinstance(self.initializer_range, (int, float)) and self.initializer_range > 0,
                    "initializer_range", self.initializer_range, "a positive number")
        self._check(0.0 <= self.attention_dropout < 1.0, "attention_dropout", self.attention_dropout, "in [0, 1)")
        for field in ("attention_bias", "attention_output_bias", "qk_norm"):
            self._check(isinstance(getattr(self, field), bool), field, getattr(self, field), "True or False")
        window = self.sliding_window
        ok = window is None or (isinstance(window, int) and not isinstance(window, bool) and window >= 1)
        self._check(ok, "sliding_window", window, "None (full attention) or an integer >= 1")

    def _validate_rope_parameters(self) -> None:
        rope = self.rope_parameters
        if rope is None:  # before the base __init__ standardised it: plain RoPE with rope_theta
            return
        self._check(isinstance(rope, dict), "rope_parameters", rope, "a dict like LlamaConfig's rope_parameters")
        self._check_rope_scaling(rope.get("rope_type", rope.get("type", "default")), rope.get("factor"))
        if getattr(self, "_post_init_done", False) and hasattr(self, "validate_rope"):
            self.validate_rope()  # transformers' own per-type checks (required keys, ranges)

    def _check_rope_scaling(self, rope_type, factor) -> None:
        self._check(rope_type in ROPE_TYPES, "rope_parameters['rope_type']", rope_type, f"one of {list(ROPE_TYPES)}")
        if rope_type != "default":
            ok = isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor >= 1.0
            self._check(ok, "rope_parameters['factor']", factor, f"a number >= 1 for rope_type={rope_type!r}")

    # ------------------------------------------------------------------------------------------ upcycling hooks
    #: How ``depthbench upcycle`` starts this architecture from a Pre-LN (Llama-family) model's weights: ``"exact"``
    #: (the logits equal the source's up to fp32 rounding), ``"bounded"`` (they differ by at most
    #: :meth:`upcycle_bound`, which :attr:`upcycle_knob` tightens) or ``"changes"`` (the function changes at step 0).
    #: Each architecture sets its own; the upcycling tests check every claim against transformers' models.
    upcycle_start = "changes"
    #: The config field that tightens a bounded start (``None``: no knob).
    upcycle_knob = None
    #: One line: why the start is what :attr:`upcycle_start` says (docs and ``depthbench upcycle --help``).
    upcycle_reason = "the residual wiring is not Pre-LN's, so Pre-LN weights compute a different function"

    @classmethod
    def upcycle_fields(cls, num_hidden_layers: int) -> dict:
        """Architecture fields of the start for a model of ``num_hidden_layers`` blocks (none here)."""
        return {}

    def upcycle_state(self, state: dict, new_blocks: set[int]) -> None:
        """Turn a Pre-LN state dict (Llama names, this config's depth) into this architecture's start, in place.
        ``new_blocks`` are the indices of grown blocks (zero output projections). Nothing to do here."""

    def upcycle_norm_factor(self, index: int, mean_square):
        """For a start that is exactly Pre-LN with some norms' outputs rescaled per token: the factor of norm
        ``index`` (sublayer norms 0 .. 2L-1 in order, then the final norm at 2L) given its input's per-token mean
        square (a ``[..., 1]`` fp32 tensor); ``None`` where the norm is unchanged (here: every norm). ``depthbench
        upcycle`` runs the source in transformers with these factors applied, which computes the start's function
        with transformers' own modules, and hands the measured deviation of that run to :meth:`upcycle_bound`."""
        return None

    def upcycle_bound(self, norm_input_mean_square: list[float], rescaled_deviation: float | None = None):
        """The bound of a ``"bounded"`` start on ``max |logits - source logits| / max |source logits|``, given
        the smallest per-token mean square of the Pre-LN stream at each norm input (sublayer norms in order, then
        the final norm), measured on the source, and the deviation of the source run with
        :meth:`upcycle_norm_factor` applied (``None`` when no norm has a factor); ``None`` for the other starts."""
        return None

    # ------------------------------------------------------------------------------------------ parameter counts
    def num_extra_parameters(self) -> int:
        """Parameters the architecture adds to the Pre-LN backbone (0 here). Architectures override this with the
        exact count; a contract test checks it against the built model for every registered architecture."""
        return 0

    def parameter_counts(self) -> dict[str, int]:
        """Exact parameter counts computed from the config alone (no model is built).

        Returns ``embedding``, ``backbone`` (all blocks incl. their norms), ``lm_head`` (0 when tied),
        ``final_norm``, ``extra`` (architecture-specific) and ``total``.
        """
        d, f, hd = self.hidden_size, self.intermediate_size, self.head_dim
        q_width, kv_width = self.num_attention_heads * hd, self.num_key_value_heads * hd
        attn = 2 * d * q_width + 2 * d * kv_width  # q, o and k, v projections
        attn += (q_width + 2 * kv_width) * self.attention_bias + d * self.attention_output_bias
        attn += 2 * hd * self.qk_norm  # per-head q and k norm gains
        per_block = attn + 3 * d * f + 2 * d
        counts = {
            "embedding": self.vocab_size * d,
            "backbone": self.num_hidden_layers * per_block,
            "lm_head": 0 if self.tie_word_embeddings else self.vocab_size * d,
            "final_norm": d,
            "extra": self.num_extra_parameters(),
        }
        counts["total"] = sum(counts.values())
        return counts

    @property
    def num_sublayers(self) -> int:
        """Residual sublayers (attention and MLP counted separately): ``2 * num_hidden_layers``."""
        return 2 * self.num_hidden_layers
