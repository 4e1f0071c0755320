"""depthbench: residual-connection architectures across width/depth aspect ratios, Hugging Face-native.

``import depthbench`` registers every architecture with ``AutoConfig``, ``AutoModel`` and
``AutoModelForCausalLM``, so checkpoints load without ``trust_remote_code``.
"""

__version__ = "0.1.0"

from depthbench.registry import ARCHITECTURES, build_config, build_model, get  # noqa: E402  (registers Auto classes)

__all__ = ["ARCHITECTURES", "build_config", "build_model", "get", "__version__"]
