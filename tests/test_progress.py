"""``depthbench.progress``: tqdm's own bar on a terminal, plain lines (no ``\\r``) in a file, at the stated intervals.

Run: ``python -m pytest tests/test_progress.py -q``
"""

from __future__ import annotations

import io
import re

from tqdm.std import tqdm

from depthbench import progress
from depthbench.progress import LineProgress, progress_bar


def _counts(text: str) -> list[str]:
    """The ``n/total`` of each status line."""
    return [re.search(r"\| (\d+/\d+) \[", line).group(1) for line in text.splitlines() if "/" in line]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_tqdms_bar_a_file_gets_lines():
    """The reference is tqdm itself: on a terminal the bar is tqdm's (its ``\\r`` frames); in a file the same
    statuses come as lines, one each 10 % of the total plus the first, with a message written between them."""
    terminal = _Terminal()
    with progress_bar(total=50, desc="train", file=terminal) as bar:
        assert type(bar) is not LineProgress and isinstance(bar, tqdm)
        bar.update(50)
    assert "\r" in terminal.getvalue()

    log = io.StringIO()
    with progress_bar(total=200, desc="train", unit="step", file=log) as bar:
        assert isinstance(bar, LineProgress)
        for step in range(200):
            bar.set_postfix({"loss": f"{5 - step / 100:.2f}"}, refresh=False)
            bar.update(1)
            if step == 49:
                bar.write("half way there", file=log)
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert _counts(text) == ["0/200"] + [f"{n}/200" for n in range(20, 201, 20)]
    assert lines[lines.index("half way there") - 1].startswith("train:  20%")  # the message between, as written
    assert "loss=3.01" in lines[-1] and "100%" in lines[-1]


def test_lines_also_come_every_interval_and_at_the_end(monkeypatch):
    """A slow bar prints a line once ``LINE_SECONDS`` passed since the last one even inside a 10 % stretch, an
    unknown total prints by time only, and the last status is printed when the bar closes before its total."""
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    log = io.StringIO()
    bar = progress_bar(total=1000, desc="eval", file=log)
    for _ in range(5):  # 5 steps (0.5 %), 61 s apart
        clock[0] += progress.LINE_SECONDS + 1
        bar.update(1)
    bar.update(2)  # 0.7 %, no time passed: no line until the bar closes
    bar.close()
    assert _counts(log.getvalue()) == ["0/1000", "1/1000", "2/1000", "3/1000", "4/1000", "5/1000", "7/1000"]

    log = io.StringIO()
    with progress_bar(desc="read", unit="B", file=log) as bar:
        bar.update(10)  # no time passed: no line
        clock[0] += progress.LINE_SECONDS
        bar.update(10)
        bar.update(5)
    assert [line.split(" ")[1] for line in log.getvalue().splitlines()] == ["0B", "20B", "25B"]


def test_a_disabled_bar_writes_nothing():
    log = io.StringIO()
    with progress_bar(total=3, file=log, disable=True) as bar:
        bar.update(3)
    assert log.getvalue() == ""
