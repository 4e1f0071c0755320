"""The exit codes of every ``depthbench`` command, and the one place that turns an error into a message and a code.

=====  =====================================================================================================
code   meaning
=====  =====================================================================================================
0      done (a training run stopped by a signal after checkpointing also exits 0: resume it)
1      the work failed while running: a run diverged or hit a full disk, a sweep run failed, an upload failed
2      bad usage or input: the one-line message says what was wrong and what is allowed; nothing was written
141    the reader of the output went away (``depthbench archs | head``): stopped quietly, as a tool killed by
       SIGPIPE does (128 + 13, the status a shell reports for one)
=====  =====================================================================================================

Commands raise exceptions and never choose a code themselves: ``depthbench.cli`` (and ``python -m
depthbench.training``) call :func:`run_command`, which prints ``depthbench <command>: error: <message>`` and returns
:func:`exit_code` of the exception. ``ValueError`` and its subclasses are bad input; :class:`Failed` marks an
error of a running job whatever its base class; :class:`BadInput` marks bad input that is not a ``ValueError``
(a corrupt checkpoint found while resuming); an ``OSError`` is bad input when it says a path is missing, not a
folder, or not readable/writable, and a failure otherwise (a full disk, an I/O error). Set
``DEPTHBENCH_TRACEBACK=1`` to see the traceback instead of the message.

Under a launcher (``torchrun``, ``accelerate launch``: ``WORLD_SIZE`` > 1) a bad-input error is printed by rank 0
alone: every rank finds it alike (the run config, the data, the checkpoint), and an error only one rank found is
handed to the others first (``depthbench.training.run_folder.agree``), so rank 0 names it. Failures (exit code 1)
of the other ranks are printed with their rank. Each message is written in one piece, so the lines of several
processes do not merge. The launcher's own exit code and report: docs/reliability.md, "Exit codes".
"""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Callable
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_PIPE = 128 + 13  # SIGPIPE: the reader of stdout closed it
RANK_EXIT_DELAY_S = 2.0
"""How long a rank other than 0 waits before exiting on bad input it does not print: torchrun / accelerate launch
stop the remaining ranks (SIGTERM) as soon as one exits, which could otherwise cut rank 0 off before its message."""

_USAGE_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EISDIR)


class Failed(Exception):
    """Mixin: the work failed while running (exit code 1), e.g. a training run that diverged."""


class BadInput(Exception):
    """Mixin: the input is bad (exit code 2) although the exception is not a ``ValueError``."""


def exit_code(exc: BaseException) -> int:
    """The exit code of a command that raised ``exc`` (see the module docstring)."""
    if isinstance(exc, BadInput):
        return EXIT_USAGE
    if isinstance(exc, Failed):
        return EXIT_FAILED
    if isinstance(exc, ValueError):
        return EXIT_USAGE
    if isinstance(exc, OSError):
        return EXIT_USAGE if exc.errno in _USAGE_ERRNOS else EXIT_FAILED
    return EXIT_FAILED


def is_reported(exc: BaseException) -> bool:
    """Whether ``exc`` is shown as a one-line message (bad input and failures of the work); anything else is a
    bug and keeps its traceback."""
    return isinstance(exc, (ValueError, OSError, Failed, BadInput))


def launched_rank() -> tuple[int, int]:
    """``(rank, world size)`` of this process as a launcher (``torchrun``, ``accelerate launch``) set them in
    ``RANK`` / ``WORLD_SIZE``; ``(0, 1)`` for a plain process."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def run_command(command: str, func: Callable[[Any], int | None], args: Any) -> int:
    """``func(args)`` as the ``depthbench <command>`` process would run it: its return value (``None`` = 0), or,
    when it raises an error of :func:`is_reported`, the one-line message on stderr and :func:`exit_code` (under a
    launcher, bad input is said by rank 0 alone: see the module docstring)."""
    try:
        code = func(args)
        sys.stdout.flush()  # a closed pipe shows here, not as "Exception ignored" at interpreter exit
    except BrokenPipeError:
        silence_stdout()
        return EXIT_PIPE
    except Exception as exc:
        if not is_reported(exc) or os.environ.get("DEPTHBENCH_TRACEBACK"):
            raise
        code = exit_code(exc)
        rank, world = launched_rank()
        if world > 1 and rank != 0 and code == EXIT_USAGE:
            time.sleep(RANK_EXIT_DELAY_S)  # a launcher stops every rank once one exits: let rank 0 say it first
            return code
        where = f" (rank {rank})" if world > 1 and rank != 0 else ""
        sys.stderr.write(f"depthbench {command}{where}: error: {exc}\n")  # one write: no merged lines
        sys.stderr.flush()
        return code
    return EXIT_OK if code is None else int(code)


def silence_stdout() -> None:
    """Point stdout at /dev/null: the reader is gone, and Python's final flush must not report the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (captured stdout): nothing to flush
        pass
