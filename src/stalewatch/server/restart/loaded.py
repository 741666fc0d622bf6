"""What servers that do not register run, from what the process can tell.

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
   are whole seconds, so a start within the second of a move may have loaded either
   revision beside it: when neither is HEAD's commit, all that is told is that the
   process does not run HEAD (it is restarted, and the reason names both); when one
   is, it cannot be told (unknown). A later move is after the start all the same. A
   start before the oldest entry read of a log that goes further back tells only that
   the process did not load HEAD's commit, if HEAD moved to it since (presumed: not
   before that too).

Unknown is said, never guessed: the machine keeps what it knew (its presumption).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from ...core.procs import Proc, children, read_proc
from ...core.revisions import is_object_id
from ...git.reflog import Entry, head_log
from ...git.refs import GitDirs
from .. import commands
from ..commands import parse_pid
from ..drain import OutputDrain
from . import pidfile
from .inputs import Loaded
from .policy import RestartPolicy

PID_COMMAND_TIMEOUT = 10.0
"""Seconds the ``pid_command`` may take."""
_CLOCK = 0.1  # seconds of error allowed between the process's clock and git's


def _told(
    revision: str | None = None, not_revision: str | None = None, stopped: bool = False, why: str = ""
) -> Loaded:
    """What the process tells, and why, in words (the ``idle`` phase's reason while no
    server registers): unknown is said as such."""
    if stopped:
        why = f"no server runs: {why}"
    elif revision is None and not_revision is None:
        why = f"cannot tell what the server runs: {why}"
    return Loaded(time.monotonic(), revision, not_revision, stopped, why)


def told_at(start: float, entries: Sequence[Entry], whole: bool, head: str) -> Loaded:
    """What a process whose code was loaded at ``start`` (Unix time) runs, by the reflog.

    ``entries``: ``logs/HEAD``'s newest entries, oldest first; ``whole``: all of it.
    ``head``: HEAD's commit now.

    A move's time is a whole second (git truncates it): the move came within ``[at, at +
    1)``, give or take the clocks' error. So the moves before ``start`` are at least
    those whose second ended before it and at most those whose second began before it;
    each count between names a revision the process may have loaded. One: it runs that.
    Several (it started within the second of a move), none HEAD's: it does not run HEAD,
    and the reason names them all. Otherwise it cannot be told.
    """
    moves = [e for e in entries if e.old != e.new]
    if not moves:
        return _told(why="the reflog of HEAD says nothing")
    fewest = max((n for n, e in enumerate(moves, 1) if e.at + 1 + _CLOCK <= start), default=0)
    most = max((n for n, e in enumerate(moves, 1) if e.at - _CLOCK <= start), default=0)
    counts = range(fewest, most + 1)  # fewest <= most: a second that ended had begun
    maybe = list(dict.fromkeys(_after(moves, n, whole) for n in counts))  # oldest first
    moved_to_head = any(e.new == head for e in moves)
    not_head = all(_not_head(revision, head, moved_to_head) for revision in maybe)
    if len(maybe) > 1:
        within = f"it started within the second HEAD moved to {moves[most - 1].new[:7]}"
        if not not_head:
            return _told(why=f"the server {within}")
        runs = " or ".join(_name(revision) for revision in maybe)
        return _told(not_revision=head, why=f"the server runs {runs}, not {head[:7]}: {within}")
    (loaded,) = maybe
    if loaded is not None and _commit(loaded):
        return _told(revision=loaded, why=f"the server started when HEAD was {loaded[:7]}")
    if loaded is not None:
        return _told(not_revision=head, why="HEAD had no commit when the server started")
    if not_head:
        return _told(not_revision=head, why=f"the server started before HEAD moved to {head[:7]}")
    return _told(why="the server started before the oldest entry of the reflog read")


def _after(moves: Sequence[Entry], count: int, whole: bool) -> str | None:
    """HEAD after the first ``count`` moves read (``None``: before them all, in a log that
    goes further back, so any older revision)."""
    if count:
        return moves[count - 1].new
    return moves[0].old if whole else None


def _commit(revision: str) -> bool:
    return is_object_id(revision) and set(revision) != {"0"}


def _not_head(revision: str | None, head: str, moved_to_head: bool) -> bool:
    """Whether a process that loaded ``revision`` does not run ``head``'s commit.

    ``None`` (older than the log read): only if HEAD moved to ``head`` since (the module
    doc's one presumption); no commit at all: never ``head``'s.
    """
    if revision is None:
        return moved_to_head
    return not _commit(revision) or revision != head


def _name(revision: str | None) -> str:
    if revision is None:
        return "a revision older than the reflog read"
    return revision[:7] if _commit(revision) else "no commit"


def code_start(proc: Proc) -> float:
    """When the code the server runs was loaded: its oldest child's start, else its own."""
    workers = children(proc.pid)
    return min(child.start for child in workers) if workers else proc.start


def _pid_from(policy: RestartPolicy, stop: threading.Event, drain: OutputDrain | None) -> Proc | Loaded:
    if policy.pidfile is not None:
        found = pidfile.server(policy.pidfile)
        if found.proc is not None:
            return found.proc
        return _told(stopped=found.stopped, why=found.reason)
    argv = policy.pid_command or ()
    # As an action's: output bounded, and a background child's drained, never cut.
    outcome = commands.run(argv, timeout=PID_COMMAND_TIMEOUT, stop=stop, drain=drain, label="the pid_command")
    if not outcome.ok:
        return _told(why=f"the pid_command {outcome.detail}")
    last = outcome.output.splitlines()[-1].strip() if outcome.output.strip() else ""
    if last in ("", "0"):
        return _told(stopped=True, why="the pid_command says the server does not run")
    pid = parse_pid(last.encode())
    proc = None if pid is None else read_proc(pid)
    if proc is None:
        what = "no pid" if pid is None else f"pid {pid}, which does not run"
        return _told(stopped=pid is not None, why=f"the pid_command printed {what}")
    return proc


def learn(
    policy: RestartPolicy,
    dirs: GitDirs | None,
    head: str | None,
    stop: threading.Event,
    drain: OutputDrain | None = None,
) -> Loaded:
    """What the servers run, as far as the process and the reflog tell (see the module doc).

    ``drain``: where the ``pid_command``'s output goes while a background child holds it.
    """
    if policy.pidfile is None and policy.pid_command is None:
        return _told(why="no pidfile nor pid_command tells which process serves")
    found = _pid_from(policy, stop, drain)
    if isinstance(found, Loaded):
        return found
    if dirs is None or head is None:
        return _told(why="HEAD cannot be read")
    entries, whole = head_log(dirs)
    return told_at(code_start(found), entries, whole, head)
