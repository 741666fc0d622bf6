"""What Linux tells of a process: its parent, its start time, its owner, its children.

Read from ``/proc`` and nothing else: every file is outside input (a process may exit
between two reads, a ``comm`` may hold spaces and parentheses), so each reader returns
``None`` rather than raising. The start time is the kernel's (clock ticks since boot in
``/proc/PID/stat``), turned into a Unix time through ``CLOCK_BOOTTIME``: precise to a
tick (10 ms), not to the second ``/proc/stat``'s ``btime`` would give.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
_MAX_READ = 4096  # /proc/PID/stat, status and comm are far shorter
# After the command's ")": state, ppid (field 4 of proc(5)), 17 fields, starttime (field 22).
_STAT = re.compile(rb"\s*\S+\s+([0-9]{1,10})\s+(?:\S+\s+){17}([0-9]{1,20})(?:\s|$)")


@dataclass(frozen=True)
class Proc:
    """One process as ``/proc`` tells it.

    Attributes:
        pid: its pid.
        ppid: its parent's pid.
        start: ``time.time()`` when it started (to a clock tick).
        uids: its real and effective user ids.
    """

    pid: int
    ppid: int
    start: float
    uids: tuple[int, int]


def parse_stat(data: bytes) -> tuple[int, int] | None:
    """``(ppid, starttime in clock ticks since boot)`` from ``/proc/PID/stat``; ``None`` if odd.

    The command name (field 2) is in parentheses and may hold anything, ``)`` and
    spaces included: the fields that follow are found after the *last* ``)``.
    """
    _, close, after = data.rpartition(b")")
    found = _STAT.match(after) if close else None
    return (int(found[1]), int(found[2])) if found else None


def parse_status_uids(data: bytes) -> tuple[int, int] | None:
    """The real and effective uids from ``/proc/PID/status`` (its ``Uid:`` line)."""
    for line in data.splitlines():
        if line.startswith(b"Uid:"):
            ids = line[4:].split()[:2]
            ok = len(ids) == 2 and all(part.isdigit() and len(part) <= 10 for part in ids)
            return (int(ids[0]), int(ids[1])) if ok else None
    return None


def read(path: Path, limit: int = _MAX_READ) -> bytes | None:
    """At most ``limit`` bytes of a ``/proc`` file; ``None`` when it cannot be read (the
    process is gone, or not ours to read)."""
    try:
        with path.open("rb") as file:  # a buffered read(limit) reads on until limit or EOF
            return file.read(limit)
    except OSError:
        return None


def read_proc(pid: int) -> Proc | None:
    """What ``/proc`` says of ``pid`` now; ``None`` when it does not run (or cannot be read)."""
    if pid <= 0:
        return None
    parsed, status = read_stat(pid), read(PROC / str(pid) / "status")
    uids = None if status is None else parse_status_uids(status)
    if parsed is None or uids is None:
        return None
    boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)  # the two clocks read together
    return Proc(pid, parsed[0], boot + parsed[1] / os.sysconf("SC_CLK_TCK"), uids)


def pids(proc: Path = PROC) -> list[int]:
    """Every process's pid now (a scan of ``proc``); none where it cannot be listed."""
    try:
        return [int(entry.name) for entry in proc.iterdir() if entry.name.isdigit()]
    except OSError:
        return []


def children(pid: int) -> list[Proc]:
    """The processes whose parent is ``pid`` now (a scan of ``/proc``)."""
    # The parent first (the stat alone): most processes are not ours.
    found = (read_proc(child) for child in pids() if (stat := read_stat(child)) and stat[0] == pid)
    return [proc for proc in found if proc is not None and proc.ppid == pid]


def read_stat(pid: int) -> tuple[int, int] | None:
    """``(ppid, start time in clock ticks)`` of ``pid`` now; ``None`` if it cannot be read."""
    data = read(PROC / str(pid) / "stat")
    return None if data is None else parse_stat(data)


def pidfd(pid: int) -> int | None:
    """A descriptor that pins ``pid`` and becomes readable when it exits (Linux >= 5.3), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd_open; ENOSYS on an old kernel, EPERM under seccomp
        return None


def signal_if(pid: int, signum: int, same: Callable[[], bool]) -> bool:
    """Send ``signum`` to ``pid`` only if ``same()`` says it is still the process meant.

    The pid is pinned by a pidfd from before the check to the signal, so it cannot come
    to name another process in between (pids wrap within minutes on a busy machine);
    without pidfds, the window is the check's. False: ``same()`` said no. Raises
    ``OSError`` when the signal fails (gone meanwhile, or not ours to signal).
    """
    fd = pidfd(pid)
    try:
        if not same():
            return False
        if fd is not None:
            signal.pidfd_send_signal(fd, signum)
        else:
            os.kill(pid, signum)
        return True
    finally:
        if fd is not None:
            os.close(fd)


# macOS has no SO_PEERCRED: the peer's pid is LOCAL_PEERPID (<sys/un.h>) at level
# SOL_LOCAL; Python's socket module names neither, so their values are spelled here.
SOL_LOCAL, LOCAL_PEERPID = 0, 2


def peer_pid(sock: socket.socket, platform: str = sys.platform) -> int:
    """The connecting process's pid, from the kernel, not its word; 0 when unknown."""
    option = getattr(socket, "SO_PEERCRED", None)
    try:
        if option is not None:
            pid, _, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
        elif platform == "darwin":
            (pid,) = struct.unpack("i", sock.getsockopt(SOL_LOCAL, LOCAL_PEERPID, struct.calcsize("i")))
        else:
            return 0
    except (OSError, struct.error):
        return 0
    return max(0, int(pid))
