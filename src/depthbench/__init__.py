"""depthbench: residual-connection architectures across width/depth aspect ratios, Hugging Face-native.

``import depthbench`` registers every architecture with ``AutoConfig``, ``AutoModel`` and
``AutoModelForCausalLM``, so checkpoints load without ``trust_remote_code``.
"""

__version__ = "0.1.0"

from depthbench.registry import ARCHITECTURES, build_config, build_model, get  # noqa: E402  (registers Auto classes)


def from_released(repo_id: str, step: int | None = None, **kwargs):
    """A released model of the study (``aspect-ratio-scaling/NAME``, OLMo-core checkpoint) as a depthbench model,
    converted once into the local cache; see :func:`depthbench.hub.convert.from_released`."""
    from depthbench.hub.convert import from_released as _from_released

    return _from_released(repo_id, step=step, **kwargs)


__all__ = ["ARCHITECTURES", "build_config", "build_model", "from_released", "get", "__version__"]
