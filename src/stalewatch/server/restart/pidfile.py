"""A pidfile's pid, signalled only while it is still the process the file was written for.

A pidfile outlives its server: after a crash, a reboot or an unclean stop it names a
pid the kernel may have given to an unrelated process since. So the pid is taken for
the server only when:

- the process runs, and is neither pid 1 nor the daemon itself;
- it started no later than the file was last written (its start time from ``/proc``
  against the file's ``mtime``, with :data:`TOLERANCE` for the clocks): a server writes
  its pidfile after it starts, a process that got the pid later started after that;
- its real or effective uid owns the file (a server writes its own pidfile).

Anything else is a refusal with the reason. :func:`judge` is that decision, pure;
:func:`read_pidfile` reads the file without following a link or blocking on a FIFO.
"""

from __future__ import annotations

import os
import signal
import stat
from dataclasses import dataclass
from pathlib import Path

from ...core.procs import Proc, read_proc, signal_if
from ..commands import parse_pid

TOLERANCE = 1.0
"""Seconds a process may seem to have started after its pidfile was written: the start
time is computed from two clocks read one after the other, and the wall clock may be
stepped by NTP. A pid reused within a second of the file's write is not caught."""


@dataclass(frozen=True)
class Claim:
    """What a pidfile claims: ``pid``, written at ``written`` (``time.time()``) by ``owner``."""

    path: Path
    pid: int
    written: float
    owner: int


@dataclass(frozen=True)
class Found:
    """The outcome of looking for the server through a pidfile.

    ``proc``: the server's process, when it is the one the file was written for;
    ``stopped``: the file says no server runs (missing, or its process gone);
    ``reason``: why not (a refusal when ``stopped`` is false).
    """

    proc: Proc | None
    stopped: bool = False
    reason: str = ""


def judge(claim: Claim, proc: Proc | None, *, me: int, tolerance: float = TOLERANCE) -> str | None:
    """``None`` when ``proc`` is still the process ``claim`` was written for, else why not."""
    where = f"{claim.path} names pid {claim.pid}"
    if claim.pid <= 1 or claim.pid == me:
        return f"{where}: never signalled (init or the daemon itself)"
    if proc is None:
        return f"{where}, which does not run"
    late = proc.start - claim.written
    if late > tolerance:
        return (
            f"{where}, but that process started {late:.1f} s after the file was written:"
            " another process got the pid (a stale pidfile)"
        )
    if claim.owner not in proc.uids:
        return f"{where}, which runs as uid {proc.uids[1]}; the file belongs to uid {claim.owner}"
    return None


def read_pidfile(path: Path) -> Claim | str:
    """The claim of the pidfile at ``path``, or why there is none (missing, odd, a link...)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return f"{path} does not exist"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return f"{path} is not a regular file"
        data = os.read(fd, 64)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    pid = parse_pid(data)
    if pid is None:
        return f"{path} does not hold a pid"
    return Claim(path, pid, info.st_mtime, info.st_uid)


def server(path: Path) -> Found:
    """The server's process through the pidfile at ``path`` (see the module doc)."""
    claim = read_pidfile(path)
    if isinstance(claim, str):
        return Found(None, stopped=claim.endswith("does not exist"), reason=claim)
    return _found(claim, read_proc(claim.pid))


def _found(claim: Claim, proc: Proc | None) -> Found:
    reason = judge(claim, proc, me=os.getpid())
    if reason is not None:
        # A file naming a process that is gone (or another's now) says no server runs.
        return Found(None, stopped=proc is None or proc.start > claim.written + TOLERANCE, reason=reason)
    return Found(proc)


def signal_server(path: Path, signame: str) -> tuple[Proc | None, str]:
    """Send ``SIG<signame>`` to the pidfile's server, if it is still the file's.

    Returns the process signalled (``None``: refused or failed) and what happened. The
    process is pinned by a pidfd before ``/proc`` is read: if the pid were reused after
    the check, the signal would fail rather than reach the newcomer.
    """
    claim = read_pidfile(path)
    if isinstance(claim, str):
        return None, f"refused: {claim}"
    return signal_proc(claim, signame)


def signal_proc(claim: Claim, signame: str) -> tuple[Proc | None, str]:
    """:func:`signal_server` for a claim already read (the gunicorn handoff's ``.2`` file)."""
    signum = signal.Signals[f"SIG{signame}"]
    found: list[Found] = []

    def same() -> bool:  # /proc read while the pid is pinned
        found.append(_found(claim, read_proc(claim.pid)))
        return found[0].proc is not None

    try:
        if not signal_if(claim.pid, signum, same):
            return None, f"refused: {found[0].reason}"
    except OSError as exc:
        return None, f"cannot signal pid {claim.pid}: {exc.strerror or exc}"
    return found[0].proc, f"sent SIG{signame} to pid {claim.pid}"
