"""The Hugging Face Hub side of depthbench, one module per concern.

* :mod:`depthbench.hub.publish`: ``depthbench publish`` (runs, revisions as branches, sweeps as collections);
* :mod:`depthbench.hub.convert`: ``depthbench convert`` and :func:`depthbench.from_released` (the study's
  OLMo-core checkpoints -> depthbench's HF format): key mapping, the converted model, atomic output, the cache;
* :mod:`depthbench.hub.release_files`: where a release's files are (local or Hub), its config, and its
  distributed checkpoint read safely (allow-list unpickler for ``.metadata``, missing / truncated shards named);
* :mod:`depthbench.hub.settings`: a checkpoint's depthbench config fields, in named steps (architecture, backbone,
  refusals, norms, EOS / PAD / context length);
* :mod:`depthbench.hub.translators`: what each architecture adds to that format (one translator per registry id);
* :mod:`depthbench.hub.readout`: the HC / native-mHC readout decided from evidence (loss on a built-in sample);
* :mod:`depthbench.hub.export_llama`: ``depthbench export-llama`` (``pre_ln`` -> stock ``LlamaForCausalLM``);
* :mod:`depthbench.hub.command`: the command line of the three (parsers and handlers).

Repository names (:mod:`depthbench.repo_names`) and model cards (:mod:`depthbench.cards`) sit below the families
(training's exports write cards too). Heavy imports (torch, transformers, huggingface_hub) happen inside the functions.
"""
