"""``depthbench train`` and ``depthbench sft``: the pretraining loop and everything it owns (run assembly, stop
signals, optimizer groups and LR schedule, checkpoints, metrics, layer statistics, the compiled path) and
supervised fine-tuning with ``transformers.Trainer``.

    from depthbench.config import load_run_config
    from depthbench.training import train
    summary = train(load_run_config("run.yaml", ["train.max_steps=100"]))

Launch under ``torchrun`` / ``accelerate launch`` with ``-m depthbench.training`` (= ``depthbench train``).
"""

from __future__ import annotations

__all__ = ["train"]


def __getattr__(name: str):
    if name == "train":  # the trainer loads torch and accelerate: only when asked for
        from depthbench.training.trainer import train

        return train
    raise AttributeError(f"module 'depthbench.training' has no attribute {name!r}")
