"""Every reader of Linux's ``/proc``, each answering ``None`` / ``False`` where there is no ``/proc``.

* a field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``, ...) and the peak-RSS reset (``clear_refs``): the
  benchmark's CPU memory measurement (:mod:`depthbench.bench.memory`) and the efficiency analysis
  (:mod:`depthbench.analysis.efficiency`);
* a process's state and start time, the boot id and the pid namespace: whether a lease holder is alive
  (:mod:`depthbench.lease`);
* the CPU cores this process may run on (its affinity mask): the default number of sweep workers and of
  ``prepare-data``'s tokenizing workers.
"""

from __future__ import annotations

import contextlib
import os


def proc_status_kb(key: str) -> int | None:
    """Field ``key`` (``VmRSS``, ``VmHWM``, ...) of ``/proc/self/status`` in KiB; ``None`` without ``/proc``."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS (Linux >= 4.0); False if unavailable."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return proc_status_kb("VmHWM") is not None
    except OSError:
        return False


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of ``pid`` from ``/proc`` (``None``: no such process/no /proc)."""
    text = _read_text(f"/proc/{pid}/stat")
    if not text:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return fields[0], int(fields[19])


def boot_id() -> str | None:
    """This boot's id (``/proc/sys/kernel/random/boot_id``)."""
    return _read_text("/proc/sys/kernel/random/boot_id")


def pid_namespace() -> str | None:
    """This process's pid namespace (the target of ``/proc/self/ns/pid``)."""
    with contextlib.suppress(OSError):
        return os.readlink("/proc/self/ns/pid")
    return None


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the platform has one, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
