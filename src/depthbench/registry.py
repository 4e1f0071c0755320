"""The architecture registry: the one table that lists depthbench's architectures.

Tests, the CLI, the shape calculator, the trainer and the model cards read this table; nothing else lists
architectures. Adding an architecture, every step and what checks it: docs/design.md#adding-an-architecture.

    >>> from depthbench.registry import get, build_model
    >>> model = build_model("pre_ln", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    ...                     intermediate_size=176, vocab_size=256)
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # this module is imported by the command line: transformers/torch load only when a class is used
    from transformers import PretrainedConfig, PreTrainedModel


@dataclass(frozen=True)
class Architecture:
    """One registered architecture: ``causal_lm`` is ``"modeling_<file>.<ForCausalLM class>"`` in modeling/.

    ``family`` is the analysis family of its wiring (``wiring_class.family``; a registry test checks the two agree),
    written here so that listing the registry needs no model code. ``extra`` is the same kind of shortcut for the
    parameter count: ``extra(d, L, kv_width)`` = the parameters the architecture adds to the Pre-LN backbone at its
    config defaults (``config.num_extra_parameters()``, the source of truth), so that ``depthbench shapes --arch``
    answers without importing torch; ``tests/test_cli_latency.py`` checks the two agree at every grid shape.
    """

    id: str
    causal_lm: str
    description: str
    arxiv: str
    family: str = "residual"
    extra: Callable[[int, int, int], int] = lambda d, L, kv_width: 0  # noqa: E731  (no extra parameters)

    @cached_property
    def causal_lm_class(self) -> type[PreTrainedModel]:
        module_name, class_name = self.causal_lm.rsplit(".", 1)
        return getattr(importlib.import_module(f"depthbench.modeling.{module_name}"), class_name)

    @property
    def config_class(self) -> type[PretrainedConfig]:
        return self.causal_lm_class.config_class

    @property
    def model_class(self) -> type[PreTrainedModel]:
        return self.causal_lm_class.model_class

    @property
    def auto_classes(self) -> dict[str, type[PreTrainedModel]]:
        """Auto class name -> model class: ``AutoModel``, ``AutoModelForCausalLM`` and the task heads
        (``AutoModelForSequenceClassification``, ``...ForTokenClassification``, ``...ForQuestionAnswering``)."""
        self.causal_lm_class  # importing the modeling file defines (and records) every model class  # noqa: B018
        return dict(self.model_class.auto_classes)

    @property
    def model_type(self) -> str:
        """``depthbench_<id>`` (every config class declares exactly this; a registry test checks it)."""
        return f"depthbench_{self.id}"

    @property
    def paper_url(self) -> str:
        return f"https://arxiv.org/abs/{self.arxiv}"

    @property
    def card(self) -> str:
        """The model-card snippet: the config class docstring (paragraph + equations + paper link)."""
        return inspect.cleandoc(self.config_class.__doc__ or self.description)


# One line per architecture: id, "modeling file.causal-LM class", one-line description, arXiv id[, family].
# Order: the normalization-placement family, then multi-stream and cross-layer designs (the study's order).
_TABLE: list[Architecture] = [
    Architecture("pre_ln", "modeling_pre_ln.PreLNForCausalLM", "Pre-LN: x + F(N(x)); the Llama baseline", "2002.04745"),
    Architecture("post_ln", "modeling_post_ln.PostLNForCausalLM", "Post-LN: N(x + F(x))", "1706.03762"),
    Architecture("peri_ln", "modeling_peri_ln.PeriLNForCausalLM", "Peri-LN: x + N_out(F(N_in(x)))", "2502.02732",
                 extra=lambda d, L, kv: 2 * d * L),
    Architecture("lns", "modeling_lns.LNSForCausalLM", "LayerNorm Scaling: x + F(N(x) / sqrt(l))", "2502.05795"),
    Architecture("deepnorm", "modeling_deepnorm.DeepNormForCausalLM", "DeepNorm: N(a x + F(x))", "2203.00555"),
    Architecture("keel", "modeling_keel.KeelForCausalLM", "KEEL: N_out(2L x + F(N_in(x)))", "2601.19895",
                 extra=lambda d, L, kv: d * (2 * L - 1)),
    Architecture("mix_ln", "modeling_mix_ln.MixLNForCausalLM", "Mix-LN: Post-LN first L/4, then Pre-LN", "2412.13795"),
    Architecture("depth_mup", "modeling_depth_scaled.DepthMuPForCausalLM", "depth-muP: branch x m_L^-.5", "2310.02244"),
    Architecture("completep", "modeling_depth_scaled.CompletePForCausalLM", "CompleteP: branch x m_L^-1", "2505.01618"),
    Architecture("hc", "modeling_hc.HCForCausalLM", "Hyper-Connections: n streams, tanh-gated mixing", "2409.19606",
                 "hyper_connections", extra=lambda d, L, kv: 2 * L * (6 * d + 26)),
    Architecture("mhc", "modeling_mhc.MHCForCausalLM", "mHC: n streams, doubly stochastic mixing", "2512.24880",
                 "hyper_connections", extra=lambda d, L, kv: 2 * L * (96 * d + 27)),
    Architecture("attnres", "modeling_attnres.AttnResForCausalLM", "Full AttnRes: softmax over depth", "2603.15031",
                 "attnres", extra=lambda d, L, kv: 4 * d * L),
    Architecture("block_attnres", "modeling_attnres.BlockAttnResForCausalLM", "Block AttnRes: block sum", "2603.15031",
                 "attnres", extra=lambda d, L, kv: 4 * d * L),
    Architecture("moda", "modeling_moda.MoDAForCausalLM", "MoDA: attend to sequence + same-token depth", "2603.15619",
                 extra=lambda d, L, kv: 2 * d * kv * (L - 1)),
    Architecture("denseformer", "modeling_denseformer.DenseFormerForCausalLM", "DenseFormer: DW-average", "2402.02622",
                 extra=lambda d, L, kv: L * (L + 3) // 2),
    # (new architectures: one line above this comment)
]

ARCHITECTURES: dict[str, Architecture] = {a.id: a for a in _TABLE}


def arch_ids() -> list[str]:
    return list(ARCHITECTURES)


def did_you_mean(name: str, choices) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to a mistyped ``name`` (difflib, with ``_`` and ``-`` and
    case ignored: ``preln``, ``pre-ln`` and ``Pre_LN`` all find ``pre_ln``), or ``""`` when none is close."""
    def norm(text: str) -> str:
        return str(text).lower().replace("_", "").replace("-", "")

    by_norm = {norm(c): c for c in choices}
    if norm(name) in by_norm:
        return f" (did you mean {by_norm[norm(name)]!r}?)"
    close = difflib.get_close_matches(norm(name), list(by_norm), n=1, cutoff=0.75)
    return f" (did you mean {by_norm[close[0]]!r}?)" if close else ""


def get(arch_id: str) -> Architecture:
    """The registered architecture ``arch_id``; an unknown id raises ``ValueError`` naming the closest id (when one
    is close) and listing the valid ones."""
    try:
        return ARCHITECTURES[arch_id]
    except KeyError:
        raise ValueError(f"unknown architecture {arch_id!r}{did_you_mean(arch_id, ARCHITECTURES)}; valid "
                         f"architectures: {', '.join(ARCHITECTURES)}") from None


def resolve_archs(spec: str | list[str]) -> list[str]:
    """``"all"``, a comma-separated string, or a list of ids -> validated list of ids (order kept)."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    items = [s.strip() for s in items if s.strip()]
    if items == ["all"]:
        return arch_ids()
    for item in items:
        get(item)
    if not items:
        raise ValueError(f"no architecture given; valid architectures: all, {', '.join(ARCHITECTURES)}")
    return items


def build_config(arch_id: str, **fields) -> PretrainedConfig:
    """The architecture's config class built with ``fields`` (validated at construction)."""
    return get(arch_id).config_class(**fields)


def build_model(arch_id: str, config: PretrainedConfig | None = None, **fields) -> PreTrainedModel:
    """A freshly initialised causal LM of architecture ``arch_id`` (from ``config`` or config ``fields``)."""
    arch = get(arch_id)
    if config is None:
        config = arch.config_class(**fields)
    return arch.causal_lm_class(config)


def register_auto_classes() -> None:
    """Register every architecture with AutoConfig and every Auto model class it has (AutoModel,
    AutoModelForCausalLM and the task heads; idempotent). ``import depthbench`` arranges for this to run before any
    Auto class can be used (see ``depthbench/__init__``)."""
    import transformers

    for arch in ARCHITECTURES.values():
        transformers.AutoConfig.register(arch.model_type, arch.config_class, exist_ok=True)
        for auto_name, model_class in arch.auto_classes.items():
            getattr(transformers, auto_name).register(arch.config_class, model_class, exist_ok=True)
