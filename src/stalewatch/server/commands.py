"""Running the commands the daemon is configured with: argv only, bounded, in their own group.

Hooks and restart actions alike go through :func:`run`. A command gets no stdin, its
own session (so a timeout kills everything it started), and a bounded head and tail
of its output: one that prints without end costs a few kilobytes. A command is done
when its process exits (waited on with a pidfd where Linux has one); a child it left
in the background (``cmd &``, the usual restart idiom) may keep the output pipe open,
and is neither waited for nor killed: given an :class:`~.drain.OutputDrain`, the pipe
goes on being read there, else it is closed.

Each run is marked (:data:`MARK` in its environment). A child that called ``setsid()``
(``setsid cmd &``, a daemonizing tool) left the command's group and would survive its
timeout: before signalling, the daemon reads ``/proc`` and collects every process that
descends from the command (parent links) or carries the run's mark (inherited across
forks and execs, so a grandchild reparented to init is still found). Each is signalled
through a pidfd opened and checked first (its start time), so a pid reused meanwhile
is never signalled. What still escapes: a process that both left the tree and dropped
the mark (``env -i``, another user's process); under systemd the unit's cgroup ends
it with the daemon. A stop (the daemon shutting down) signals the group alone.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core import procs
from .drain import BoundedOutput, OutputDrain, read_available
from .supervision import SD_ENV

KILL_GRACE = 0.5  # seconds between SIGTERM and SIGKILL
MARK = "STALEWATCH_COMMAND_ID"
"""The environment variable that marks every process of one command's run."""
_TICK = 0.05  # the longest a waiting thread goes without looking at its stop event
_NO_PIDFD_POLL = 0.02  # seconds between exit checks where os.pidfd_open is missing

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """How a command ended.

    Attributes:
        result: ``success`` (exited 0), ``failure`` (exited non-zero), ``killed`` (by a
            signal not ours), ``timeout`` or ``stopped`` (then killed), ``not_started``.
        code: its exit status (negative: killed by that signal); ``None`` when it did
            not end by itself (timed out or stopped, then killed) or never started.
        output: a bounded head and tail of what it printed (printable lines).
        detail: one line for a log or a reason.
    """

    result: str
    code: int | None
    output: str
    detail: str

    @property
    def ok(self) -> bool:
        """It exited 0."""
        return self.result == "success"


_runs = itertools.count(1)


def run(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    timeout: float,
    env: Mapping[str, str] | None = None,
    stop: threading.Event | None = None,
    drain: OutputDrain | None = None,
    label: str = "",
) -> Outcome:
    """Run ``argv`` until its process exits, the timeout passes, or ``stop`` is set.

    ``env`` is added to the daemon's environment, without systemd's own variables
    (``NOTIFY_SOCKET``…) and marked for this run (:data:`MARK`). ``drain``: where the output
    pipe goes when a background child still holds it (``sh -c './serve &'``), so that
    child never dies of SIGPIPE on its next write; its rest is logged under ``label``.

    Raises:
        Exception: whatever waiting raised (out of descriptors for the selector or the
            pidfd...): the command's group is killed and the process reaped first, so an
            error never leaves a command running unseen.
    """
    mark = f"{os.getpid()}.{next(_runs)}"
    full = {key: value for key, value in os.environ.items() if key not in SD_ENV} | dict(env or {})
    full[MARK] = mark
    pipe: tuple[int, ...] = ()  # read end, write end: the command's stdout and stderr
    try:
        pipe = os.pipe()
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=full,
            stdin=subprocess.DEVNULL,
            stdout=pipe[1],
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except (OSError, ValueError) as exc:  # ValueError: a NUL in an argument
        for fd in pipe:
            os.close(fd)
        why = getattr(exc, "strerror", None) or exc
        return Outcome("not_started", None, "", f"cannot run {argv[0]!r}: {why}")
    os.close(pipe[1])
    ended, held, sink = _wait(proc, pipe[0], timeout, stop or threading.Event(), mark)
    if held is not None and drain is not None:  # a background child holds it
        label = label or repr(argv[0])
        logger.info(
            "stalewatch: %s exited, but a process it started still holds its output;"
            " draining it in the background",
            label,
        )
        drain.adopt(held, label, BoundedOutput())
    elif held is not None:  # never wait for it
        os.close(held)
    output = "\n".join(sink.lines()).strip()
    code = proc.returncode
    if ended == "timeout":
        return Outcome(ended, None, output, f"timed out after {timeout:.1f} s; killed")
    if ended == "stopped" and code != 0:  # 0: it exited as the stop came
        return Outcome(ended, None, output, "stopped; killed")
    if code == 0:
        return Outcome("success", 0, output, "exited 0")
    what = f"killed by signal {-code}" if code < 0 else f"exited {code}"
    last = output.splitlines()[-1][:300] if output else ""
    return Outcome("killed" if code < 0 else "failure", code, output, f"{what}: {last}" if last else what)


def _wait(
    proc: subprocess.Popen[bytes], pipe: int, timeout: float, stop: threading.Event, mark: str
) -> tuple[str | None, int | None, BoundedOutput]:
    """Read ``pipe`` until ``proc`` exits, ending it when due; reap it.

    Ending it: SIGTERM to its group, then SIGKILL, then the process itself (it may have
    left its group); on a timeout, what it started outside the group too. Returns
    ``timeout``, ``stopped`` or ``None``; the pipe when another process still holds it
    (else it is closed); what was read.
    """
    sink = BoundedOutput()
    deadline = time.monotonic() + timeout
    os.set_blocking(pipe, False)
    exit_fd: int | None = None
    ended: str | None = None
    at_end = False  # of the pipe: every writer closed it
    escalation: list[tuple[float, int]] = []  # (when, signal) still to send; 0: the process itself
    try:
        exit_fd = procs.pidfd(proc.pid)
        with selectors.DefaultSelector() as selector:
            selector.register(pipe, selectors.EVENT_READ)
            if exit_fd is not None:
                selector.register(exit_fd, selectors.EVENT_READ)
            while proc.poll() is None:
                now = time.monotonic()
                if ended is None and (now >= deadline or stop.is_set()):
                    ended = "stopped" if stop.is_set() else "timeout"
                    signals = (signal.SIGTERM, signal.SIGKILL, 0)
                    escalation = [(now + n * KILL_GRACE, signum) for n, signum in enumerate(signals)]
                while escalation and now >= escalation[0][0]:
                    signum = escalation.pop(0)[1]
                    if signum:
                        _end(proc.pid, signum, mark if ended == "timeout" else None)
                    else:  # it left its group (setsid) and survived: kill the command itself
                        with contextlib.suppress(OSError):
                            proc.kill()
                due = escalation[0][0] if escalation else deadline
                wait = min(_TICK if exit_fd is not None else _NO_PIDFD_POLL, max(0.0, due - now))
                for key, _ in selector.select(wait):  # _TICK: a stop is seen promptly
                    if key.fd == pipe and read_available(pipe, sink):
                        selector.unregister(pipe)
                        at_end = True
                if at_end and exit_fd is None:  # nothing to select on: the process is about to exit
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=_NO_PIDFD_POLL)
    except BaseException:
        with contextlib.suppress(OSError):
            _end(proc.pid, signal.SIGKILL, None)
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=KILL_GRACE)
        os.close(pipe)
        raise
    finally:
        if exit_fd is not None:
            os.close(exit_fd)
    # What it wrote just before exiting; then the pipe is closed, or another process
    # still holds it.
    if at_end or read_available(pipe, sink):
        os.close(pipe)
        return ended, None, sink
    return ended, pipe, sink


def _end(pid: int, signum: int, mark: str | None) -> None:
    """Signal the command's group; with ``mark``: what it started outside the group too.

    They are looked for first: once its group is gone, a child of the command is an
    orphan, found only by its mark. Each is signalled only while it still is the process
    found (its start time: a pid reused meanwhile is spared).
    """
    found = _started(pid, mark) if mark is not None else {}
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pid, signum)
    for child, started in found.items():
        with contextlib.suppress(OSError):  # exited meanwhile, or not ours to signal
            procs.signal_if(child, signum, functools.partial(_still, child, started))


def _still(pid: int, started: int) -> bool:
    """``pid`` is still the process that started at ``started`` (its pid not reused)."""
    return (procs.read_stat(pid) or (0, -1))[1] == started


def _started(root: int, mark: str) -> dict[int, int]:
    """Every process descending from ``root`` or carrying ``MARK=mark`` (``root`` excluded),
    with its start time. Empty where there is no ``/proc``."""
    table: dict[int, tuple[int, int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(procs.PROC):
            if entry.name.isdigit() and (found := procs.read_stat(int(entry.name))):
                table[int(entry.name)] = found
    chosen: dict[int, int] = {}
    parents = {root}
    while parents:  # the descendants, a generation at a time
        parents = {pid for pid, (ppid, _) in table.items() if ppid in parents and pid not in chosen}
        chosen.update((pid, table[pid][1]) for pid in parents)
    wanted = f"{MARK}={mark}".encode()
    for pid, (_, started) in table.items():
        if pid not in chosen and pid not in (root, os.getpid()):
            with contextlib.suppress(OSError):  # gone, or another user's
                if wanted in (procs.PROC / str(pid) / "environ").read_bytes().split(b"\0"):
                    chosen[pid] = started
    return chosen


MAX_PID = 2**22  # Linux's PID_MAX_LIMIT: a larger number names no process


def parse_pid(data: bytes) -> int | None:
    """The pid in ``data`` (ASCII digits, blanks around them); ``None`` if it holds none.

    Only plain digits: ``int()`` alone would also take ``+1_0`` or a 4000-digit
    number that ``os.kill`` cannot take (OverflowError, not OSError).
    """
    text = data.strip()
    if not text or len(text) > len(str(MAX_PID)) or not text.isdigit():
        return None
    pid = int(text)
    return pid if 0 < pid <= MAX_PID else None
