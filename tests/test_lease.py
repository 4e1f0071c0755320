"""One writer per folder (``depthbench.lease``): a second process is refused naming the holder (host, pid, since),
or waits; a holder killed with SIGKILL (also as an unreaped zombie) does not block; a stale lease from another host
is taken over past the timeout but not before; a partial lease file; several processes racing to take over one
dead lease (exactly one wins); the heartbeat refreshes the mtime; release removes only its own lease.

Run: ``python -m pytest tests/test_lease.py -q``
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from depthbench import lease
from depthbench.errors import exit_code

HOLDER = """
import sys, time
from depthbench import lease
held = lease.acquire(sys.argv[1], what=sys.argv[2], wait=float(sys.argv[4]), heartbeat=0.2)
print("held", flush=True)
time.sleep(float(sys.argv[3]))
"""

RACER = """
import sys, time
from depthbench import lease
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # start together
try:
    lease.acquire(sys.argv[1], what="racer", timeout=60)
    print("won", flush=True)
    time.sleep(3)
except lease.LeaseHeld:
    print("refused", flush=True)
"""


def start_holder(folder: Path, seconds: float = 60, what: str = "holder", wait: float = 0) -> subprocess.Popen:
    """A process that holds ``folder``'s lease for ``seconds`` (returns once it holds it)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), what, str(seconds), str(wait)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def foreign_lease(folder: Path, age: float, host: str = "node-17", pid: int = 4242) -> Path:
    """A lease written by a process on another host whose last heartbeat was ``age`` seconds ago."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {**lease.identity("depthbench train", heartbeat=10), "host": host, "pid": pid,
              "since_text": "2026-01-02 03:04:05"}
    path = folder / lease.LEASE_NAME
    path.write_text(json.dumps(record))
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))
    return path


def test_a_second_process_is_refused_naming_the_holder(tmp_path):
    holder = start_holder(tmp_path / "run", what="depthbench train")
    try:
        with pytest.raises(lease.LeaseHeld) as info:
            lease.acquire(str(tmp_path / "run"), what="second")
        message = str(info.value)
        assert f"pid {holder.pid} on {socket.gethostname()}" in message and "depthbench train" in message
        assert " since 20" in message and "last heartbeat" in message and "nothing was written" in message
        assert exit_code(info.value) == 2
        assert info.value.holder["pid"] == holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_killed_with_sigkill_does_not_block(tmp_path):
    holder = start_holder(tmp_path / "run")
    os.kill(holder.pid, signal.SIGKILL)
    deadline = time.time() + 10
    while time.time() < deadline and not open(f"/proc/{holder.pid}/stat").read().split(") ")[1].startswith("Z"):
        time.sleep(0.05)  # not reaped: a zombie, whose pid still exists
    messages = []
    with lease.acquire(str(tmp_path / "run"), what="next", log=messages.append) as held:
        assert held.holds()
        assert any(f"process {holder.pid}" in m and "no longer running" in m for m in messages)
    holder.wait()
    assert not (tmp_path / "run" / lease.LEASE_NAME).exists()


def test_a_stale_lease_of_another_host_is_taken_over_only_past_the_timeout(tmp_path):
    foreign_lease(tmp_path / "run", age=30)
    with pytest.raises(lease.LeaseHeld, match=r"pid 4242 on node-17 since 2026-01-02 03:04:05, last heartbeat 3\d s"):
        lease.acquire(str(tmp_path / "run"), timeout=60)
    foreign_lease(tmp_path / "run", age=61)
    messages = []
    with lease.acquire(str(tmp_path / "run"), timeout=60, log=messages.append):
        record = json.loads((tmp_path / "run" / lease.LEASE_NAME).read_text())
        assert record["host"] == socket.gethostname() and record["pid"] == os.getpid()
    assert "no heartbeat from node-17 for 61 s" in messages[0]
    foreign_lease(tmp_path / "run", age=290)  # the default timeout: 300 s (DEPTHBENCH_LEASE_TIMEOUT)
    with pytest.raises(lease.LeaseHeld):
        lease.acquire(str(tmp_path / "run"))


def test_the_timeout_is_at_least_four_of_the_holders_heartbeats(tmp_path):
    path = foreign_lease(tmp_path / "run", age=100)
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "heartbeat_s": 30}))
    stamp = time.time() - 100
    os.utime(path, (stamp, stamp))
    with pytest.raises(lease.LeaseHeld):  # 100 s > timeout 60 s, but < 4 heartbeats of 30 s
        lease.acquire(str(tmp_path / "run"), timeout=60)


def test_waiting_takes_the_lease_once_the_holder_is_done(tmp_path):
    holder = start_holder(tmp_path / "run", seconds=1.5)
    t0 = time.monotonic()
    messages = []
    with lease.acquire(str(tmp_path / "run"), wait=60, log=messages.append):
        assert time.monotonic() - t0 > 0.5
    assert "waiting up to 60 s" in messages[0] and f"pid {holder.pid}" in messages[0]
    holder.wait()
    holder = start_holder(tmp_path / "run", seconds=30)
    try:
        with pytest.raises(lease.LeaseHeld):
            lease.acquire(str(tmp_path / "run"), wait=0.5)
    finally:
        holder.kill()
        holder.wait()


def test_an_unreadable_lease_file_blocks_only_while_young(tmp_path, monkeypatch):
    (tmp_path / "run").mkdir()
    path = tmp_path / "run" / lease.LEASE_NAME
    path.write_text("")  # its creator died between creating and writing it
    with pytest.raises(lease.LeaseHeld, match="unreadable"):
        lease.acquire(str(tmp_path / "run"))
    stamp = time.time() - lease.GRACE_S - 5
    os.utime(path, (stamp, stamp))
    with lease.acquire(str(tmp_path / "run")):
        assert json.loads(path.read_text())["pid"] == os.getpid()


def test_processes_racing_for_a_dead_lease_take_it_once(tmp_path):
    foreign_lease(tmp_path / "run", age=3600)
    start = time.time() + 3
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path / "run"), str(start)],
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outcomes = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outcomes == ["refused", "refused", "refused", "won"]


def test_the_heartbeat_refreshes_and_release_removes_only_its_own_lease(tmp_path):
    held = lease.acquire(str(tmp_path / "run"), heartbeat=0.1)
    path = tmp_path / "run" / lease.LEASE_NAME
    stamp = time.time() - 1000
    os.utime(path, (stamp, stamp))
    time.sleep(0.5)
    assert time.time() - path.stat().st_mtime < 5  # refreshed by the heartbeat thread
    assert lease.held(str(tmp_path / "run")) is held
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "token": "someone-else"}))  # taken over meanwhile
    time.sleep(0.5)
    assert held.lost and "taken over" in held.lost
    held.release()
    assert path.exists() and lease.held(str(tmp_path / "run")) is None  # not ours: left in place
    path.unlink()
    with lease.acquire(str(tmp_path / "run")):  # the same process again: no conflict with itself
        with lease.acquire(str(tmp_path / "run")) as again:
            assert lease.held(str(tmp_path / "run")) is again
    assert not path.exists()
