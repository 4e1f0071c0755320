"""depthbench: residual-connection architectures across width/depth aspect ratios, Hugging Face-native.

``import depthbench`` registers every architecture with ``AutoConfig``, ``AutoModel`` and
``AutoModelForCausalLM``, so checkpoints load without ``trust_remote_code``.

The import itself stays cheap (the command line answers ``depthbench --help`` without loading torch): if
transformers is already imported, the architectures are registered at once; otherwise the registration runs as soon
as the first import of a transformers (or depthbench) module finishes, i.e. before any Auto class can be used. The
names below (``ARCHITECTURES``, ``build_model``, ...) load :mod:`depthbench.registry` on first access.
"""

from __future__ import annotations

import importlib.abc
import sys

__version__ = "0.1.0"

__all__ = ["ARCHITECTURES", "build_config", "build_model", "from_released", "get", "__version__"]

_REGISTRY_NAMES = {"ARCHITECTURES", "build_config", "build_model", "get"}
_WATCHED = ("transformers", "depthbench")


def __getattr__(name: str):
    if name in _REGISTRY_NAMES:
        from depthbench import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'depthbench' has no attribute {name!r}")


def from_released(repo_id: str, step: int | None = None, **kwargs):
    """A released model of the study (``aspect-ratio-scaling/NAME``, OLMo-core checkpoint) as a depthbench model,
    converted once into the local cache; ``readout=`` and ``dtype=`` as ``depthbench convert``'s ``--readout`` /
    ``--dtype``, other keywords go to ``from_pretrained``; see :func:`depthbench.hub.convert.from_released`."""
    from depthbench.hub.convert import from_released as _from_released

    return _from_released(repo_id, step=step, **kwargs)


# ================================================================================================ Auto registration
def _register_if_ready() -> bool:
    """Register the architectures with the Auto classes once transformers is imported and no watched module is
    half-imported (the registration imports transformers and depthbench modules). True once done."""
    if _AutoRegistration.done:
        return True
    if "transformers" not in sys.modules or _AutoRegistration.loading:
        return False
    _AutoRegistration.done = True
    _AutoRegistration.uninstall()
    from depthbench.registry import register_auto_classes

    register_auto_classes()
    return True


class _NotifyingLoader(importlib.abc.Loader):
    """Wraps a watched module's loader: counts the imports in progress, puts the original loader back on the
    module, and tries the registration when an import finishes."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        _AutoRegistration.loading += 1
        try:
            self._loader.exec_module(module)
        finally:
            _AutoRegistration.loading -= 1
            spec = getattr(module, "__spec__", None)
            if spec is not None and spec.loader is self:
                spec.loader = self._loader
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self._loader
        _register_if_ready()

    def __getattr__(self, name):  # get_source, get_filename, is_package, resource readers ...
        return getattr(self._loader, name)


class _AutoRegistration(importlib.abc.MetaPathFinder):
    """``sys.meta_path`` finder that watches imports of transformers / depthbench modules until registration."""

    done = False
    loading = 0  # watched modules whose import is in progress
    finder: _AutoRegistration | None = None

    # Marks finders of this kind even across re-imports of depthbench (each import defines a new class).
    _depthbench_auto_registration = True

    def __init__(self):
        self._busy = False  # re-entrancy guard: the other finders may import watched modules themselves

    def find_spec(self, fullname, path, target=None):
        if self._busy or fullname.split(".", 1)[0] not in _WATCHED:
            return None
        self._busy = True
        try:
            for finder in sys.meta_path:
                if getattr(finder, "_depthbench_auto_registration", False) or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _NotifyingLoader(spec.loader)
                    return spec
            return None
        finally:
            self._busy = False

    @classmethod
    def install(cls) -> None:
        if cls.finder is None and not cls.done:
            # A re-imported depthbench (its modules dropped from sys.modules) replaces the earlier finder.
            sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "_depthbench_auto_registration", False)]
            cls.finder = cls()
            sys.meta_path.insert(0, cls.finder)

    @classmethod
    def uninstall(cls) -> None:
        if cls.finder is not None:
            try:
                sys.meta_path.remove(cls.finder)
            except ValueError:
                pass
            cls.finder = None


# Already imported transformers (lm-eval, a Trainer script ...): register now; else on the first finished import.
if not _register_if_ready():
    _AutoRegistration.install()
