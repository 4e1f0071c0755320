"""Which transformers release the remote code runs on: the one owner of version differences.

Ships to the Hugging Face Hub as remote code (imports only the standard library, torch and transformers). A checkpoint's
``modeling/*.py`` files run under whatever transformers 5.x its user has, so every name the model files take from
transformers that did not exist, or lived elsewhere, in an older 5.x release is imported here, with a fallback:

* ``capture_outputs`` / ``OutputRecorder`` (``output_attentions`` through forward hooks) live in
  ``transformers.utils.output_capturing`` from 5.2; transformers 5.0 and 5.1 have the same recorder in
  ``transformers.utils.generic`` with ``check_model_inputs`` as the decorator (which also fills config defaults,
  the job of 5.2's ``merge_with_config_defaults``).
* The KV-cache keyword and output field are ``cache`` from 5.24, ``past_key_values`` before (``CACHE_FIELD``,
  :func:`renamed_cache_kwarg`); ``create_causal_mask`` takes the cache as its 4th argument from 5.10 (named
  ``cache`` from 5.24), by keyword only in 5.4 - 5.9, and needs the queries' ``cache_position`` before 5.4
  (:func:`causal_mask`).
* ``ALL_ATTENTION_FUNCTIONS.get_interface`` (the attention backend by name) exists from 5.1; 5.0 indexes the
  registry (:func:`attention_interface`).
* A static cache writes where its ``cache_kwargs["cache_position"]`` says before 5.4 (later releases count the
  written positions themselves): :func:`cache_update` hands on the ``cache_position`` that ``generate`` passes.
* From a local checkpoint folder, transformers before 5.10 copies only the *direct* sibling imports of the file it
  loads (``modeling_<id>.py``) into its module cache, not the siblings those import. Every architecture file
  therefore imports each sibling module it needs, directly (the imports marked ``a direct import``);
  tests/modeling/test_remote_code.py checks that no file leaves one out.

:data:`MIN_TRANSFORMERS` is the oldest release the remote code supports; every config writes it into its
``config.json`` (``depthbench_min_transformers``) and :func:`check_transformers_version` refuses an older one with
an error naming it, before any name an older release lacks is imported (the architecture files take
``transformers.initialization``, which 4.x lacks, from here as ``hf_init`` for that reason). The matrix of
releases tried is in docs/compatibility.md.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

import torch
import transformers

#: The oldest transformers release the remote code supports (docs/compatibility.md lists the releases tried).
MIN_TRANSFORMERS = "5.0.0"


def _release(version: str) -> tuple[int, int, int]:
    """``"5.10.4"`` / ``"5.24.0.dev0"`` / ``"5.3.0rc1"`` -> ``(5, 10, 4)`` (pre-releases count as their release)."""
    parts = [int(p) for p in re.findall(r"\d+", version.split("+")[0])[:3]]
    return tuple(parts + [0] * (3 - len(parts)))  # type: ignore[return-value]


def check_transformers_version(version: str | None = None) -> None:
    """Raise ``ImportError`` naming :data:`MIN_TRANSFORMERS` if the installed transformers is older."""
    version = transformers.__version__ if version is None else version
    if _release(version) < _release(MIN_TRANSFORMERS):
        raise ImportError(
            f"this depthbench checkpoint's remote code needs transformers>={MIN_TRANSFORMERS}, but transformers "
            f"{version} is installed: pip install 'transformers>={MIN_TRANSFORMERS}'"
        )


check_transformers_version()  # first, before anything an older release may lack is imported

from transformers import initialization as hf_init  # noqa: E402  (re-exported: guarded by the check above)
from transformers.masking_utils import create_causal_mask  # noqa: E402
from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: E402
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # noqa: E402
from transformers.utils.deprecation import deprecate_kwarg  # noqa: E402

try:  # in masking_utils since it exists (4.53); guarded all the same, as every name outside the 5.0 list
    from transformers.masking_utils import create_sliding_window_causal_mask
except ImportError:  # pragma: no cover
    create_sliding_window_causal_mask = None

try:  # transformers >= 5.2
    from transformers.utils.output_capturing import OutputRecorder, capture_outputs
except ImportError:  # 5.0 - 5.1: the same recorder; `check_model_inputs` records outputs and fills config defaults
    from transformers.utils.generic import OutputRecorder
    from transformers.utils.generic import check_model_inputs as capture_outputs

try:  # transformers >= 5.2
    from transformers.utils.generic import merge_with_config_defaults
except ImportError:  # 5.0 - 5.1: `check_model_inputs` (imported as capture_outputs above) does this job

    def merge_with_config_defaults(forward: Callable) -> Callable:
        return forward


#: The KV cache's keyword and output field: ``cache`` from transformers 5.24, ``past_key_values`` before.
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"

if CACHE_FIELD == "cache":
    # As the installed transformers' own Llama: the old keyword still works, with a FutureWarning.
    renamed_cache_kwarg = deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
else:

    def renamed_cache_kwarg(forward: Callable) -> Callable:
        """Before 5.24, ``past_key_values`` is the current name (Llama accepts it silently), so do we."""
        return forward


_MASK_PARAMETERS = inspect.signature(create_causal_mask).parameters
_MASK_CACHE_KEYWORD = "cache" if "cache" in _MASK_PARAMETERS else "past_key_values"
_MASK_NEEDS_CACHE_POSITION = (
    "cache_position" in _MASK_PARAMETERS and _MASK_PARAMETERS["cache_position"].default is inspect.Parameter.empty
)


def causal_mask(config, inputs_embeds: torch.Tensor, attention_mask, cache, position_ids: torch.Tensor):
    """``create_causal_mask`` of the installed transformers (the mask each attention backend expects) for queries
    ``inputs_embeds`` [B, T, d] that follow the ``cache``'s ``get_seq_length()`` cached positions;
    ``create_sliding_window_causal_mask`` when the config has a ``sliding_window`` (as Mistral chooses)."""
    extra = {_MASK_CACHE_KEYWORD: cache, "position_ids": position_ids}
    if _MASK_NEEDS_CACHE_POSITION:
        past = cache.get_seq_length() if cache is not None else 0
        extra["cache_position"] = torch.arange(past, past + inputs_embeds.shape[1], device=inputs_embeds.device)
    make = create_causal_mask
    if getattr(config, "sliding_window", None) is not None:
        if create_sliding_window_causal_mask is None:
            raise ImportError("sliding_window needs transformers.masking_utils.create_sliding_window_causal_mask")
        make = create_sliding_window_causal_mask
    return make(config, inputs_embeds, attention_mask, **extra)


def cache_update(cache, key: torch.Tensor, value: torch.Tensor, layer_idx: int, cache_position=None):
    """``cache.update(key, value, layer_idx)``, handing on ``generate``'s ``cache_position`` (where a static cache
    of transformers < 5.4 writes) when it was passed."""
    if cache_position is None:
        return cache.update(key, value, layer_idx)
    return cache.update(key, value, layer_idx, {"cache_position": cache_position})


def attention_interface(implementation: str, default: Callable) -> Callable:
    """The attention function registered as ``implementation`` (``default`` for ``"eager"``), as Llama finds it."""
    if hasattr(ALL_ATTENTION_FUNCTIONS, "get_interface"):  # transformers >= 5.1: also validates the name
        return ALL_ATTENTION_FUNCTIONS.get_interface(implementation, default)
    return default if implementation == "eager" else ALL_ATTENTION_FUNCTIONS[implementation]


__all__ = [
    "MIN_TRANSFORMERS", "OutputRecorder", "CACHE_FIELD", "attention_interface", "cache_update", "capture_outputs",
    "causal_mask", "check_transformers_version", "hf_init", "merge_with_config_defaults", "renamed_cache_kwarg",
]
