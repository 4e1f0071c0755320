"""The errors of a training run: :class:`TrainingError` (exit code 1) and its kinds, raised by the trainer, the
checkpointer and the run folder's rules, and caught by name by the sweep runner (a diverged point is a result).
"""

from __future__ import annotations

from depthbench.errors import BadInput, Failed


class TrainingError(Failed, RuntimeError):
    """Training cannot continue (the message says why and what to do; exit code 1)."""


class NonFiniteLossError(TrainingError):
    """The training loss became NaN/inf; the run stopped and kept its last good checkpoint."""


class CheckpointError(BadInput, TrainingError):
    """A checkpoint is missing, incomplete or corrupt (the message names the file; exit code 2: bad input)."""


class OtherRankError(TrainingError):
    """Another rank stopped with an error (named in the message, with that rank); this rank stops too."""


class OtherRankBadInput(BadInput, OtherRankError):
    """Another rank found bad input (the message is its error); exit code 2 as there."""


class CheckpointWriteError(TrainingError):
    """A checkpoint or export could not be written (disk full, read-only); the message names the last good
    checkpoint and how to resume."""
