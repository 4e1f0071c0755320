"""The compiled training path: ``torch.compile`` of a depthbench model, shared by the trainer and the benchmark.

    from depthbench.training.compiled import compile_model
    compile_model(model)            # in place: same module, same parameter names, blocks run compiled
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()                 # the backward graphs are compiled too (AOTAutograd)

Two scopes (``scope=``):

* ``"layers"`` (the default; "regional compilation"): every decoder block (``model.base_model.layers[i]``) is
  compiled in place on its own; the embeddings, the wiring's entry and exit, the head and the loss stay eager. The
  blocks share one code object, so where their inputs have the same structure Dynamo traces one graph and reuses
  it for every block: Pre-LN, the normalization variants and HC/mHC compile one block whatever the depth (an L=16
  model compiles as fast as an L=2 one). The depth-mixing designs (AttnRes, Block AttnRes, MoDA, DenseFormer) pass
  each block one more earlier state than the block before, so they trace one graph per block; Dynamo's recompile
  limit (default 8) grows by the number of blocks for every compiled model, so deep models never fall back to eager.
* ``"model"``: the whole forward is one graph (the residual wiring of every registered architecture traces
  without a graph break; ``tests/training/test_compiled.py`` checks it with ``torch._dynamo.explain``).
  Inductor can fuse
  across block boundaries, but compile time grows with depth: minutes per model at L=16 on 2 CPU cores.

Either way the model is compiled *in place* (``nn.Module.compile``), so the object, its type, its ``state_dict``
names, ``save_pretrained``, accelerate's ``prepare``/``unwrap_model`` and forward hooks (layer statistics) are
unchanged; nothing has an ``_orig_mod.`` prefix. Compiled losses and gradients equal eager ones to 1e-5. The same
call runs Inductor on CPU and on CUDA; nothing here is CPU-specific.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from depthbench.config import COMPILE_SCOPES

COMPILE_OPTIONS: dict[str, Any] = {}
"""Keyword arguments for ``torch.compile`` (the defaults: Inductor, automatic dynamic shapes after a recompile)."""



def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder blocks of a causal LM or decoder (``model.base_model.layers``, as in every transformers decoder);
    raises ``ValueError`` for a model without them."""
    layers = getattr(getattr(model, "base_model", model), "layers", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise ValueError(f"compile scope 'layers' needs a decoder with blocks at model.base_model.layers; "
                         f"{type(model).__name__} has none (use scope='model').")
    return layers


def _allow_one_graph_per_layer(num_layers: int) -> None:
    """Make room for ``num_layers`` more graphs of the block code in Dynamo's recompile limits: a design whose blocks
    see differently structured inputs (a list of earlier states growing with depth) traces one graph per block, and
    every block class of a process shares one code object (and so one limit) across all compiled models; past the
    limit the remaining blocks would silently run eager. The limits only grow."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit += num_layers
    dynamo_config.accumulated_recompile_limit += num_layers


def compile_model(model: nn.Module, scope: str = "layers", **options) -> nn.Module:
    """Compile ``model`` in place with :data:`COMPILE_OPTIONS` (overridden by ``options``): each decoder block
    (``scope="layers"``) or the whole forward (``scope="model"``); returns ``model``."""
    options = {**COMPILE_OPTIONS, **options}
    if scope == "model":
        model.compile(**options)
    elif scope == "layers":
        layers = decoder_layers(model)
        _allow_one_graph_per_layer(len(layers))
        for layer in layers:
            layer.compile(**options)
    else:
        raise ValueError(f"compile scope {scope!r} is not allowed: use one of {', '.join(COMPILE_SCOPES)}.")
    return model
