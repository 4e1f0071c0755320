"""Progress bars that read well where they are written: tqdm's bar on a terminal (or a notebook's widget), plain
lines in a file.

A tqdm bar redraws itself with ``\\r`` frames, which a terminal overwrites; written to a file (a sweep worker's
``<run>/console.log``, ``depthbench train ... > log``) the frames pile up into one line of thousands of characters that
no text editor shows usefully. :func:`progress_bar` returns ``tqdm.auto``'s bar when its stream is a terminal or the
code runs in a notebook, and otherwise a :class:`LineProgress`: the same tqdm object (``update``, ``set_postfix``,
``write``, ``close``, the same status text), which prints its status as a line of its own when it starts, each time
it crosses another :data:`LINE_PERCENT` % of its total, when :data:`LINE_SECONDS` passed since its last line, and
once at the end (with the overall rate).
"""

from __future__ import annotations

import sys
import time

from tqdm.std import tqdm

LINE_PERCENT = 10
"""A :class:`LineProgress` with a known total prints a line each time it crosses another multiple of this (%)."""
LINE_SECONDS = 60.0
"""... and a line when this many seconds passed since its last one (a slow stage still shows that it moves)."""


class LineProgress(tqdm):
    """A tqdm bar for a stream that is not a terminal: each status it shows is a line of its own (no ``\\r``, no
    cursor movement), at most one per :data:`LINE_PERCENT` % of the total or :data:`LINE_SECONDS` s, plus the
    first and the last."""

    def __init__(self, *args, **kwargs):
        kwargs["mininterval"] = 0  # every update reaches display(), which decides what becomes a line
        kwargs["miniters"] = 1
        kwargs["dynamic_ncols"] = False
        self._line_n: float | None = None
        self._line_t = 0.0
        super().__init__(*args, **kwargs)

    def _bucket(self, n: float) -> int:
        return int(n * 100 // (LINE_PERCENT * self.total)) if self.total else 0

    def _emit(self) -> None:
        self.fp.write(str(self).rstrip() + "\n")
        self.fp.flush()
        self._line_n, self._line_t = self.n, time.monotonic()

    def display(self, msg=None, pos=None) -> bool:
        if msg is not None:  # tqdm clearing a bar (msg=""): a log has nothing to clear
            return False
        if (self._line_n is None or self._bucket(self.n) > self._bucket(self._line_n)
                or time.monotonic() - self._line_t >= LINE_SECONDS):
            self._emit()
        return True

    def clear(self, nolock=False) -> None:
        """Nothing to erase: the lines stay (``tqdm.write`` clears the bars around its message)."""

    def moveto(self, n) -> None:
        """No cursor movement in a file (tqdm moves to a nested bar's row)."""

    def close(self) -> None:
        if not self.disable and self._line_n is not None and self.n != self._line_n:
            self._ema_dt = lambda: None  # the overall rate, as tqdm's own last frame shows it
            self._emit()
        self.leave = False  # tqdm's close would redraw the bar and end it with "\n"; the last line is out already
        super().close()


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False


def progress_bar(*args, file=None, **kwargs) -> tqdm:
    """A tqdm progress bar (same arguments as ``tqdm``) that suits its stream (``file``, default ``sys.stderr``):
    ``tqdm.auto``'s on a terminal or in a notebook, a :class:`LineProgress` (plain lines) anywhere else."""
    from tqdm.auto import tqdm as auto

    notebook = sys.modules.get("tqdm.notebook")
    if (notebook is not None and issubclass(auto, notebook.tqdm)) or _is_terminal(file or sys.stderr):
        return auto(*args, file=file, **kwargs)
    return LineProgress(*args, file=file, **kwargs)
