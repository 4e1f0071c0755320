"""The compiled training path: ``torch.compile`` of a depthbench model, shared by the trainer and the benchmark.

    from depthbench.compiled import compile_model
    compile_model(model)            # in place: same module, same parameter names, forward runs compiled
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()                 # the backward graph is compiled too (AOTAutograd)

The model is compiled *in place* (``nn.Module.compile``), so the object, its type, its ``state_dict`` names,
``save_pretrained``, accelerate's ``prepare``/``unwrap_model`` and forward hooks (layer statistics) are unchanged;
nothing has an ``_orig_mod.`` prefix. The residual wiring of every registered architecture traces into a single
graph (no graph breaks; ``tests/test_compiled.py`` checks it with ``torch._dynamo.explain``), and the compiled losses
equal eager ones to 1e-5. The same call runs Inductor on CPU and on CUDA; nothing here is CPU-specific.
"""

from __future__ import annotations

from typing import Any

COMPILE_OPTIONS: dict[str, Any] = {}
"""Keyword arguments for ``torch.compile`` (the defaults: Inductor, automatic dynamic shapes after a recompile)."""


def compile_model(model, **options):
    """Compile ``model``'s forward in place with :data:`COMPILE_OPTIONS` (overridden by ``options``); returns it."""
    model.compile(**{**COMPILE_OPTIONS, **options})
    return model
