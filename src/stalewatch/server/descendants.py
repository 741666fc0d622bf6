"""What a command started, found through ``/proc``, so a timeout ends all of it.

A command runs in its own session, and a timeout signals its process group. A child
that called ``setsid()`` (``setsid cmd &``, a daemonizing tool) left that group and
would survive. Before signalling, the daemon reads ``/proc`` and collects every
process that descends from the command (parent links) or carries the command's own
mark in its environment (:data:`MARK`, inherited across forks and execs, so a
grandchild whose parent already exited, reparented to init, is still found). Each is
signalled through a pidfd opened and checked first (its start time and its mark or
parent), so a pid reused meanwhile is never signalled.

What still escapes: a process that both left the tree (its parent exited) and dropped
the mark (``env -i``, a setuid program that resets its environment, another user's
process whose environment we may not read). Under systemd the unit's
``KillMode=control-group`` ends it with the daemon; ``systemd-run --scope`` gives a
command a cgroup of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MARK", "Process", "find", "pidfd", "send"]

MARK = "STALEWATCH_COMMAND_ID"
"""The environment variable that marks every process of one command's run."""

_PROC = Path("/proc")


@dataclass(frozen=True)
class Process:
    """A process as ``/proc`` showed it: its pid, parent and start time (clock ticks)."""

    pid: int
    ppid: int
    started: int


def _stat(pid: int) -> Process | None:
    try:
        text = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # The command name is in parentheses and may hold anything: split after the last.
    fields = text[text.rfind(b")") + 2 :].split()
    try:
        return Process(pid, int(fields[1]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def _marked(pid: int, mark: bytes) -> bool:
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or another user's
        return False
    return mark in environ.split(b"\0")


def find(root: int, mark: str) -> list[Process]:
    """Every process descending from ``root`` or carrying ``MARK=mark`` (``root`` excluded).

    Empty where there is no ``/proc``.
    """
    table: dict[int, Process] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(_PROC):
            if entry.name.isdigit() and (found := _stat(int(entry.name))) is not None:
                table[found.pid] = found
    children: dict[int, list[int]] = {}
    for process in table.values():
        children.setdefault(process.ppid, []).append(process.pid)
    chosen: dict[int, Process] = {}
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        if pid not in chosen and pid in table:
            chosen[pid] = table[pid]
            stack.extend(children.get(pid, ()))
    wanted = f"{MARK}={mark}".encode()
    me = os.getpid()
    for pid, process in table.items():
        if pid not in chosen and pid not in (root, me) and _marked(pid, wanted):
            chosen[pid] = process
    return list(chosen.values())


def send(processes: list[Process], signum: int) -> None:
    """Signal each of ``processes`` that is still the process found."""
    for process in processes:
        # A pidfd pins the pid while it is checked and signalled.
        fd = pidfd(process.pid) if hasattr(signal, "pidfd_send_signal") else None
        try:
            now = _stat(process.pid)
            if now is None or now.started != process.started:
                continue  # gone, or its pid names another process now
            if fd is not None:
                signal.pidfd_send_signal(fd, signum)
            else:
                os.kill(process.pid, signum)
        except OSError:
            continue  # exited meanwhile, or not ours to signal
        finally:
            if fd is not None:
                os.close(fd)


def pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (Linux >= 5.3), else None.

    With it, one poll() waits for a command's output and its exit together.
    """
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:  # ENOSYS on an old kernel, EPERM under some seccomp filters
        return None
    return fd
