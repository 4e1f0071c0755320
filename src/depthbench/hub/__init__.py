"""The Hugging Face Hub side of depthbench, one module per concern.

* :mod:`depthbench.hub.names`: the ``aspect-ratio-scaling`` organisation's repository names, both ways;
* :mod:`depthbench.hub.cards`: model cards (``model_cards/`` template, huggingface_hub ``ModelCard``);
* :mod:`depthbench.hub.publish`: ``depthbench publish`` (runs, revisions as branches, sweeps as collections);
* :mod:`depthbench.hub.convert`: ``depthbench convert`` and :func:`depthbench.from_released` (the study's
  OLMo-core checkpoints -> depthbench's HF format);
* :mod:`depthbench.hub.translators`: what each architecture adds to that format (one translator per registry id);
* :mod:`depthbench.hub.export_llama`: ``depthbench export-llama`` (``pre_ln`` -> stock ``LlamaForCausalLM``).

Heavy imports (torch, transformers, huggingface_hub) happen inside the functions.
"""
