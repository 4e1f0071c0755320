"""Tests of ``depthbench.procfs`` against independent readings of the same facts: ``psutil`` (RSS, a process's
state and start time), ``os.stat`` of the pid namespace link, a child process's view of the boot id, and ``None`` /
``False`` where ``/proc`` cannot be read.

Run: ``python -m pytest tests/test_procfs.py -q``
"""

from __future__ import annotations

import builtins
import os
import re
import subprocess
import sys
import time

import pytest

from depthbench import procfs

psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")


def test_status_fields_agree_with_psutil():
    rss_kb = procfs.proc_status_kb("VmRSS")
    assert abs(rss_kb - psutil.Process().memory_info().rss // 1024) < 16 * 1024  # same process, moments apart
    assert procfs.proc_status_kb("VmHWM") >= procfs.proc_status_kb("VmRSS") - 1024
    assert procfs.proc_status_kb("NoSuchField") is None


def test_the_peak_rss_reset_brings_the_peak_back_to_the_current_rss():
    block = bytearray(64 * 1024 * 1024)  # touch 64 MiB, then free it: the peak stays above the current RSS
    block[::4096] = b"x" * len(block[::4096])
    del block
    assert procfs.proc_status_kb("VmHWM") - procfs.proc_status_kb("VmRSS") > 48 * 1024
    if not procfs.reset_peak_rss():
        pytest.skip("clear_refs is not writable here")
    assert procfs.proc_status_kb("VmHWM") - procfs.proc_status_kb("VmRSS") < 16 * 1024


def test_a_processs_state_and_start_time_agree_with_psutil():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        state, ticks = procfs.proc_stat(child.pid)
        assert state in ("S", "R")
        start = psutil.boot_time() + ticks / os.sysconf("SC_CLK_TCK")
        assert start == pytest.approx(psutil.Process(child.pid).create_time(), abs=0.05)
        assert procfs.proc_stat(os.getpid())[0] == "R"  # a process reading its own stat is running
    finally:
        child.kill()
        child.wait()
    assert procfs.proc_stat(child.pid) is None  # reaped: no such process


def test_boot_id_and_pid_namespace_agree_with_other_readings():
    boot = procfs.boot_id()
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", boot)
    child = subprocess.run([sys.executable, "-c", "print(open('/proc/sys/kernel/random/boot_id').read())"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() == boot
    ns = procfs.pid_namespace()
    assert ns == f"pid:[{os.stat('/proc/self/ns/pid').st_ino}]"


def test_without_proc_every_reader_answers_none_or_false(monkeypatch):
    def no_proc(path, *args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", path)

    monkeypatch.setattr(builtins, "open", no_proc)
    monkeypatch.setattr(os, "readlink", no_proc)
    assert procfs.proc_status_kb("VmRSS") is None
    assert procfs.reset_peak_rss() is False
    assert procfs.proc_stat(os.getpid()) is None
    assert procfs.boot_id() is None and procfs.pid_namespace() is None


def test_usable_cores_is_the_affinity_mask_and_falls_back_to_the_cpu_count(monkeypatch):
    assert procfs.usable_cores() == len(os.sched_getaffinity(0))  # this process's mask, not the machine's count
    pid = os.getpid()
    if len(os.sched_getaffinity(0)) > 1:  # a narrower mask is seen at once (restored after)
        before = os.sched_getaffinity(0)
        try:
            os.sched_setaffinity(0, {min(before)})
            assert procfs.usable_cores() == 1
        finally:
            os.sched_setaffinity(pid, before)
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 7)
    assert procfs.usable_cores() == 7
