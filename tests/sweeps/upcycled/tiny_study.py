"""The tiny upcycling study of ``depthbench upcycle-study``'s tests: its definition on a tiny random
``LlamaForCausalLM`` source (built by transformers) and a small prepared corpus (the fixtures, built once per
session, are in ``tests/sweeps/upcycled/conftest.py``)."""

from __future__ import annotations

from pathlib import Path

from depthbench.sweeps.upcycled.study import StudyDefinition


def definition(source: Path, data_dir: Path, **kw) -> StudyDefinition:
    return StudyDefinition(
        source=str(source), archs=kw.pop("archs", ["pre_ln", "hc"]), data_dir=str(data_dir),
        grow_depth=kw.pop("grow_depth", 1), lr=3e-3,
        base={"data": {"seq_len": 32, "eval_sequences": 4},
              "train": {"global_batch_size": 4, "micro_batch_size": 4, "max_steps": 3, "eval_every": 1,
                        "progress": False, "mixed_precision": "no"},
              "checkpoint": {"every": 0, "hf_export": False}},
        metrics=["logit_lens"], analysis={"num_samples": 4, "seq_len": 32, "seed": 1}, **kw)
