"""What servers that do not register run, from what the process can tell (R10).

A daemon started (or reloaded) after the checkout moved cannot take HEAD for what the
servers loaded: one started before the move runs the old code. When no server
registers, the executor asks here and feeds the machine a
:class:`~.inputs.Loaded`:

1. the server's pid: the ``pidfile`` (only while it is still the process the file was
   written for, :mod:`.pidfile`), or the ``pid_command``'s output (``supervisorctl pid
   web``; ``0`` or nothing: not running). No process: ``stopped`` (never start it);
2. when its code was loaded: the start time of its oldest child when it has children
   (a gunicorn or uvicorn master's workers load the code, and a HUP replaces them),
   else of the process itself (``/proc``, to a clock tick);
3. what HEAD was then: the newest ``logs/HEAD`` entry before that time. Reflog times
   are whole seconds: a start within the second of a move cannot be told (unknown),
   nor one before the oldest entry read of a log that goes further back (then only
   that the process did not load HEAD's commit, if HEAD moved to it since).

Unknown is said, never guessed: the machine keeps what it knew (its presumption).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from ...core.revisions import is_object_id
from ...git.reflog import Entry, head_log
from ...git.refs import GitDirs
from .. import commands
from ..commands import parse_pid
from . import pidfile
from .policy import RestartPolicy
from .procs import Proc, children, read_proc

__all__ = ["PID_COMMAND_TIMEOUT", "Told", "code_start", "learn", "told_at"]

PID_COMMAND_TIMEOUT = 10.0
"""Seconds the ``pid_command`` may take."""
_CLOCK = 0.1  # seconds of error allowed between the process's clock and git's


@dataclass(frozen=True)
class Told:
    """What the process tells (the fields of :class:`~.inputs.Loaded`), and why."""

    revision: str | None = None
    not_revision: str | None = None
    stopped: bool = False
    why: str = ""


def told_at(start: float, entries: Sequence[Entry], whole: bool, head: str) -> Told:
    """What a process whose code was loaded at ``start`` (Unix time) runs, by the reflog.

    ``entries``: ``logs/HEAD``'s newest entries, oldest first; ``whole``: all of it.
    ``head``: HEAD's commit now.
    """
    moves = [e for e in entries if e.old != e.new]
    if not moves:
        return Told(why="the reflog of HEAD says nothing")
    for entry in moves:
        if entry.at - _CLOCK <= start < entry.at + 1 + _CLOCK:
            return Told(why=f"the server started within the second HEAD moved to {entry.new[:7]}")
    before = [e for e in moves if e.at + 1 + _CLOCK <= start]
    if before:
        revision = before[-1].new
        if is_object_id(revision) and set(revision) != {"0"}:
            return Told(revision=revision, why=f"the server started when HEAD was {revision[:7]}")
        return Told(why="HEAD had no commit when the server started")
    first = moves[0]
    if whole and is_object_id(first.old) and set(first.old) != {"0"}:
        return Told(revision=first.old, why=f"the server started when HEAD was {first.old[:7]}")
    if any(e.new == head for e in moves):
        return Told(not_revision=head, why=f"the server started before HEAD moved to {head[:7]}")
    return Told(why="the server started before the oldest entry of the reflog read")


def code_start(proc: Proc) -> float:
    """When the code the server runs was loaded: its oldest child's start, else its own."""
    workers = children(proc.pid)
    return min(child.start for child in workers) if workers else proc.start


def _pid_from(policy: RestartPolicy, stop: threading.Event) -> Proc | Told:
    if policy.pidfile is not None:
        found = pidfile.server(policy.pidfile)
        if found.proc is not None:
            return found.proc
        return Told(stopped=found.stopped, why=found.reason)
    argv = policy.pid_command or ()
    outcome = commands.run(argv, timeout=PID_COMMAND_TIMEOUT, stop=stop)
    if not outcome.ok:
        return Told(why=f"the pid_command {outcome.detail}")
    last = outcome.output.splitlines()[-1].strip() if outcome.output.strip() else ""
    if last in ("", "0"):
        return Told(stopped=True, why="the pid_command says the server does not run")
    pid = parse_pid(last.encode())
    proc = None if pid is None else read_proc(pid)
    if proc is None:
        what = "no pid" if pid is None else f"pid {pid}, which does not run"
        return Told(stopped=pid is not None, why=f"the pid_command printed {what}")
    return proc


def learn(policy: RestartPolicy, dirs: GitDirs | None, head: str | None, stop: threading.Event) -> Told:
    """What the servers run, as far as the process and the reflog tell (see the module doc)."""
    if policy.pidfile is None and policy.pid_command is None:
        return Told(why="no pidfile nor pid_command tells which process serves")
    found = _pid_from(policy, stop)
    if isinstance(found, Told):
        return found
    if dirs is None or head is None:
        return Told(why="HEAD cannot be read")
    entries, whole = head_log(dirs)
    return told_at(code_start(found), entries, whole, head)


def describe(told: Told) -> str:
    """What was learnt, in words (the ``idle`` phase's reason while no server registers)."""
    if told.stopped:
        return f"no server runs: {told.why}"
    if told.revision is not None or told.not_revision is not None:
        return told.why
    return f"cannot tell what the server runs: {told.why}"
