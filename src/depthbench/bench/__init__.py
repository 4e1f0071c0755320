"""``depthbench bench``: train-step time, decode speed and peak memory of architectures against ``pre_ln`` and
``LlamaForCausalLM``, over named or ad-hoc shapes, with an op-group profile."""
