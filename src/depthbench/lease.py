"""One writer per folder: the lease a live writer holds on its run folder (``depthbench train``) or its sweep folder
(the sweep launcher), so that a second process is refused, or waits, instead of writing the same files; on local
disks and on the shared filesystems of clusters (NFS, Lustre, GPFS), across nodes.

The lease is a file, ``<folder>/writer.lease`` (JSON: host, pid, since when, a random token, what holds it):

* **acquire**: the file is created with ``O_CREAT | O_EXCL``, atomic on local filesystems, NFSv3 and later, Lustre
  and GPFS. No ``fcntl`` / ``flock`` locks: NFS and Lustre may not honour them, or drop them when a client restarts
  or a node is lost.
* **heartbeat**: a daemon thread of the holder refreshes the file's mtime every :data:`HEARTBEAT_S` seconds
  (``os.utime(path, None)``: on NFS the server's clock sets it) and checks that the file still holds its token.
* **release**: the holder removes the file (only while it holds its token) when it is done, and at exit.
* **a dead holder never blocks**: the lease is taken over when

  - its holder ran on this machine (same host name, boot id and pid namespace) and its pid is gone, a zombie, or
    another process by now (another start time): a crash, ``kill -9``; or it is this very process (a lease an
    earlier run of this process left behind: one process holds a folder once);
  - or its last heartbeat is older than the timeout: :data:`STALE_AFTER_S` (300 s, at least 4 of the holder's
    heartbeats; ``DEPTHBENCH_LEASE_TIMEOUT`` sets another), measured on the filesystem's own clock (the mtime of a
    probe file touched just before), so the clocks of the nodes need not agree: a lost node, a holder elsewhere
    whose process died;
  - or the file is unreadable (its writer died while creating it) and older than :data:`GRACE_S`.

  A take-over runs under a second exclusive file (``writer.lease.break``): the lease is read again, must still be
  the same dead holder (token and mtime), and is replaced atomically (``os.replace``), so two processes that both
  judged it dead cannot both take it.
* **a live holder**: :class:`LeaseHeld` (bad input, exit code 2) names host, pid, since when and the last
  heartbeat; with ``wait`` seconds the new process polls every :data:`POLL_S` seconds until the lease is released
  or its holder is dead, then takes it.

Under several processes (DDP, FSDP) only the main process holds the lease of a run folder
(``depthbench.training.run_folder``). Nothing here imports torch.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable

from depthbench import procfs
from depthbench.errors import BadInput

LEASE_NAME = "writer.lease"
HEARTBEAT_S = 30.0
"""Seconds between two refreshes of the lease file's mtime by its holder."""
STALE_AFTER_S = 300.0
"""A lease whose heartbeat is older than this (and than 4 of its holder's heartbeats) has a dead holder. Ten
heartbeats: NFS clients cache file attributes for up to 60 s (``acregmax``), so a reader may see a heartbeat late."""
GRACE_S = 30.0
"""An unreadable lease file (its writer died between creating and writing it) older than this is dead."""
POLL_S = 5.0
"""Seconds between two looks at a held lease while waiting for it."""

_HELD: dict[str, Lease] = {}  # real path of the folder -> the lease this process holds on it
_LOCK = threading.Lock()


class LeaseHeld(BadInput, RuntimeError):
    """The folder is held by another live writer (exit code 2: nothing was written). ``holder`` is its record."""

    def __init__(self, message: str, holder: dict):
        super().__init__(message)
        self.holder = holder


# ================================================================================================ identity
def identity(what: str, heartbeat: float = HEARTBEAT_S) -> dict:
    """This process's lease record: who, where, since when, and a fresh token."""
    stat = procfs.proc_stat(os.getpid())
    now = time.time()
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": now,
            "since_text": time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(now)),
            "token": secrets.token_hex(16), "what": what, "command": " ".join(sys.argv)[:300],
            "heartbeat_s": heartbeat, "boot_id": procfs.boot_id(),
            "pid_ns": procfs.pid_namespace(), "start_ticks": stat[1] if stat else None}


def _same_machine(holder: dict) -> bool:
    """Whether the holder's pid can be checked here: same host name, boot and pid namespace."""
    return (holder.get("host") == socket.gethostname()
            and holder.get("boot_id") == procfs.boot_id()
            and holder.get("pid_ns") == procfs.pid_namespace())


def _pid_alive(pid: int, start_ticks: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, as another user's process
    stat = procfs.proc_stat(pid)
    if stat is None:
        return True  # no /proc: os.kill is all we know
    state, started = stat
    return state != "Z" and (start_ticks is None or started == start_ticks)


def dead_reason(holder: dict, age: float, timeout: float) -> str | None:
    """Why the holder of a lease whose heartbeat is ``age`` seconds old is dead, or ``None`` when it may be alive."""
    if holder.get("unreadable"):
        return f"an unreadable lease file, {age:.0f} s old" if age > GRACE_S else None
    if _same_machine(holder):
        pid = int(holder.get("pid", -1))
        if pid == os.getpid():
            return "left by an earlier run of this process"
        if not _pid_alive(pid, holder.get("start_ticks")):
            return f"process {pid} on {holder.get('host')} is no longer running"
        return None
    limit = max(timeout, 4 * float(holder.get("heartbeat_s") or HEARTBEAT_S))
    if age > limit:
        return f"no heartbeat from {holder.get('host')} for {age:.0f} s (the timeout is {limit:.0f} s)"
    return None


# ================================================================================================ files
def _write_new(path: str, record: dict, exclusive: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, (json.dumps(record, indent=1) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_lease(path: str) -> tuple[dict, int] | None:
    """(record, mtime in ns) of the lease file; ``{"unreadable": True}`` for a partial file; ``None`` when absent."""
    try:
        mtime = os.stat(path).st_mtime_ns
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    return (record if isinstance(record, dict) and "token" in record else {"unreadable": True}), mtime


def fs_now(folder: str) -> float:
    """The filesystem's clock (the mtime of a probe file touched now), so ages of shared files need no clock sync."""
    probe = os.path.join(folder, f".lease-clock-{socket.gethostname()}-{os.getpid()}")
    try:
        with open(probe, "wb"):
            pass
        os.utime(probe, None)
        return os.stat(probe).st_mtime
    except OSError:
        return time.time()
    finally:
        with contextlib.suppress(OSError):
            os.remove(probe)


# ================================================================================================ the lease
class Lease:
    """A held lease: refreshed by a daemon thread until :meth:`release` (also a context manager)."""

    def __init__(self, folder: str, record: dict, log: Callable[[str], None], created: bool = False):
        self.folder, self.record, self.log, self.created = folder, record, log, created
        self.path = os.path.join(folder, LEASE_NAME)
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{self.path}", daemon=True)
        self._thread.start()

    def holds(self) -> bool:
        """Whether the lease file still carries this holder's token."""
        current = _read_lease(self.path)
        return current is not None and current[0].get("token") == self.record["token"]

    def _beat(self) -> None:
        while not self._stop.wait(float(self.record["heartbeat_s"])):
            try:
                if not self.holds():
                    self.lost = f"{self.path} was taken over by another process (this process's heartbeat stalled)"
                    self.log(f"warning: {self.lost}; two processes may now write {self.folder}")
                    return
                os.utime(self.path, None)
            except OSError:
                continue  # a transient filesystem error: try again at the next heartbeat

    def release(self) -> None:
        """Stop the heartbeat and remove the lease file if it is still this holder's (and the folder, when
        :func:`acquire` created it and nothing else was written there: a refused writer leaves nothing behind)."""
        self._stop.set()
        with _LOCK:
            if _HELD.get(os.path.realpath(self.folder)) is self:
                del _HELD[os.path.realpath(self.folder)]
        if self.record["pid"] != os.getpid():
            return  # a forked child: the parent holds the lease
        with contextlib.suppress(OSError):
            if self.holds():
                os.remove(self.path)
                if self.created:
                    os.rmdir(self.folder)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def describe(holder: dict, age: float | None = None) -> str:
    if holder.get("unreadable"):
        return "a process whose lease file is unreadable (it may be writing it right now)"
    beat = f", last heartbeat {age:.0f} s ago" if age is not None else ""
    return (f"{holder.get('what', 'a writer')} pid {holder.get('pid')} on {holder.get('host')} since "
            f"{holder.get('since_text', holder.get('since'))}{beat}")


def _take_over(path: str, seen: tuple[dict, int], record: dict, timeout: float) -> bool:
    """Replace the dead lease ``seen`` by ``record`` under the break file; False when someone else acted first."""
    brk = path + ".break"
    try:
        _write_new(brk, {"token": record["token"]}, exclusive=True)
    except FileExistsError:
        with contextlib.suppress(OSError):  # a breaker that died holding the break file
            if fs_now(os.path.dirname(path)) - os.stat(brk).st_mtime > timeout:
                os.remove(brk)
        return False
    try:
        current = _read_lease(path)
        if current is not None and (current[0].get("token"), current[1]) != (seen[0].get("token"), seen[1]):
            return False  # refreshed or replaced since it was judged dead
        tmp = f"{path}.{record['token']}.tmp"
        _write_new(tmp, record, exclusive=True)
        os.replace(tmp, path)
        return True
    finally:
        with contextlib.suppress(OSError):
            os.remove(brk)


def stale_after(timeout: float | None = None) -> float:
    """The heartbeat age after which a holder on another host is dead: ``timeout``, else
    ``DEPTHBENCH_LEASE_TIMEOUT``, else :data:`STALE_AFTER_S`."""
    if timeout is not None:
        return float(timeout)
    text = os.environ.get("DEPTHBENCH_LEASE_TIMEOUT")
    try:
        return float(text) if text else STALE_AFTER_S
    except ValueError:
        raise ValueError(f"DEPTHBENCH_LEASE_TIMEOUT={text!r} is not a number of seconds") from None


def acquire(folder: str, *, what: str = "writer", wait: float = 0.0, timeout: float | None = None,
            heartbeat: float = HEARTBEAT_S, hint: str = "", log: Callable[[str], None] | None = None) -> Lease:
    """Hold ``folder`` (created if missing) for this process, taking over a dead holder's lease.

    Raises:
        LeaseHeld: A live holder still holds it after ``wait`` seconds (the message names it and adds ``hint``).
        OSError: The folder cannot be created or written.
    """
    log = log or (lambda msg: print(f"depthbench: {msg}", file=sys.stderr))
    timeout = stale_after(timeout)
    created = not os.path.isdir(folder)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, LEASE_NAME)
    with _LOCK:
        earlier = _HELD.pop(os.path.realpath(folder), None)
    if earlier is not None:
        earlier.release()
    deadline, waiting, young = time.monotonic() + max(0.0, wait), False, 0
    while True:
        record = identity(what, heartbeat)
        try:
            _write_new(path, record, exclusive=True)
            return _register(folder, record, log, created)
        except FileExistsError:
            pass
        except FileNotFoundError:  # a holder that had created the folder removed it (empty) when it released
            os.makedirs(folder, exist_ok=True)
            created = True
            continue
        seen = _read_lease(path)
        if seen is None:
            continue  # released between the two calls
        age = fs_now(folder) - seen[1] / 1e9
        if seen[0].get("unreadable") and age <= GRACE_S and young < 20:
            young += 1  # its creator is most likely writing it right now: look again shortly
            time.sleep(0.1)
            continue
        reason = dead_reason(seen[0], age, timeout)
        if reason is not None:
            if _take_over(path, seen, record, timeout):
                log(f"took over {path} from {describe(seen[0])}: {reason}")
                return _register(folder, record, log)
            time.sleep(0.2)
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LeaseHeld(f"{folder} is held by another live writer: {describe(seen[0], age)} (lease file {path})"
                            f"; nothing was written. {hint}".rstrip(), seen[0])
        if not waiting:
            log(f"{folder} is held by {describe(seen[0], age)}; waiting up to {wait:.0f} s for it")
            waiting = True
        time.sleep(min(POLL_S, remaining))


def _register(folder: str, record: dict, log: Callable[[str], None], created: bool = False) -> Lease:
    lease = Lease(folder, record, log, created)
    with _LOCK:
        _HELD[os.path.realpath(folder)] = lease
    return lease


def release(folder: str) -> bool:
    """Release this process's lease on ``folder``, if it holds one; returns whether it did."""
    with _LOCK:
        lease = _HELD.get(os.path.realpath(folder))
    if lease is None:
        return False
    lease.release()
    return True


def held(folder: str) -> Lease | None:
    """This process's lease on ``folder`` (``None`` when it holds none)."""
    with _LOCK:
        return _HELD.get(os.path.realpath(folder))


@atexit.register
def _release_all() -> None:
    with _LOCK:
        leases = list(_HELD.values())
    for lease in leases:
        lease.release()
