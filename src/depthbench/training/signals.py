"""Stop signals of ``depthbench train``: SIGTERM, SIGINT and the pre-emption warning ``train.preempt_signal``
(default SIGUSR1) make every rank finish the current step, checkpoint together and exit 0."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

import torch

from depthbench.config import signal_number


class StopFlag:
    """Stop signals (SIGTERM, SIGINT and ``train.preempt_signal``) set a flag; the loop checkpoints and stops after
    the current step, on all ranks together (the flag is summed over ranks every step, so a signal to any one rank
    stops them all at the same step and every rank takes part in the one checkpoint).

    The handler stays installed until training ends: further copies of a stop signal (a scheduler signals every
    process of the job and ``torchrun`` forwards another copy to its workers) are counted and ignored, so nothing
    interrupts the checkpoint. Only SIGKILL ends the process before it.
    """

    def __init__(self, preempt_signal: str | None = None):
        self.acc = None
        self.signal_name: str | None = None
        self.received = 0
        self.signals = [signal.SIGTERM, signal.SIGINT]
        extra = signal_number(preempt_signal) if preempt_signal else None
        if extra is not None and extra not in self.signals:
            self.signals.append(signal.Signals(extra))

    @contextlib.contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.getsignal(s) for s in self.signals}

        def handler(signum, frame):
            self.received += 1
            if self.signal_name is None:
                self.signal_name = signal.Signals(signum).name
                print(f"depthbench train: {self.signal_name} received: checkpointing after the current step, then "
                      "exiting (further stop signals are ignored until then)", file=sys.stderr, flush=True)

        for s in previous:
            signal.signal(s, handler)
        try:
            yield self
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    def requested(self) -> bool:
        flag = self.signal_name is not None
        if self.acc is not None and self.acc.num_processes > 1:
            t = torch.tensor([1.0 if flag else 0.0], device=self.acc.device)
            flag = bool(self.acc.reduce(t, reduction="sum").item() > 0)
            if flag and self.signal_name is None:
                self.signal_name = "peer"
        return flag
