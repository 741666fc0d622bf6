"""Running the commands the daemon is configured with: argv only, bounded, in their own group.

A command gets no stdin, its own session (so a timeout kills everything it started),
and a bounded head and tail of its output: one that prints without end costs a few
kilobytes. A command is done when its process exits; a child it left in the
background (``cmd &``, the usual restart idiom) may keep the output pipe open, and is
neither waited for nor killed: given an :class:`~.drain.OutputDrain`, the pipe goes on
being read there (hooks and restart actions alike, R4), else it is closed.

Each run is marked (:data:`~.descendants.MARK` in its environment): on a timeout the
processes it started that left its group (``setsid``) are found through ``/proc`` and
signalled with it (:mod:`.descendants`). A stop (the daemon shutting down) signals
the group alone: under systemd the unit's cgroup ends the rest.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import descendants
from .capture import CHUNK, BoundedOutput, read_available
from .descendants import pidfd
from .drain import OutputDrain
from .sdnotify import SD_ENV

__all__ = [
    "KILL_GRACE",
    "MAX_PID",
    "Outcome",
    "ProcessWait",
    "environment",
    "parse_pid",
    "pidfd",
    "run",
]

KILL_GRACE = 0.5  # seconds between SIGTERM and SIGKILL
_TICK = 0.05  # the longest a waiting thread goes without looking at its stop event
_NO_PIDFD_POLL = 0.02  # seconds between exit checks where os.pidfd_open is missing


@dataclass(frozen=True)
class Outcome:
    """How a command ended.

    Attributes:
        ok: it exited 0 (or the signal was sent).
        code: its exit status (negative: killed by that signal); ``None`` when it did
            not end by itself (timed out or stopped, then killed) or never started.
        output: a bounded head and tail of what it printed (printable lines).
        detail: one line for a log or a reason.
    """

    ok: bool
    code: int | None
    output: str
    detail: str


_runs = itertools.count(1)


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The daemon's environment without systemd's own variables (``NOTIFY_SOCKET``…),
    plus ``extra``: what every command the daemon runs gets, marked for this run
    (``STALEWATCH_COMMAND_ID``: see :mod:`.descendants`)."""
    env = {key: value for key, value in os.environ.items() if key not in SD_ENV}
    env.update(extra or {})
    env[descendants.MARK] = f"{os.getpid()}.{next(_runs)}"
    return env


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

    ``env`` is added to the daemon's :func:`environment`. ``drain``: where the output
    pipe goes when a background child still holds it (``sh -c './serve &'``), so that
    child never dies of SIGPIPE on its next write; its rest is logged under ``label``.
    """
    sink = BoundedOutput()
    try:
        ending = ProcessWait(argv, environment(env), sink, timeout, stop or threading.Event(), cwd=cwd)
    except OSError as exc:
        return Outcome(False, None, "", f"cannot run {argv[0]!r}: {exc.strerror or exc}")
    timed_out = ending.run()  # on an error, it closed the pipe
    if ending.pipe is not None and drain is not None:  # a background child holds it
        drain.adopt(ending.pipe, label or repr(argv[0]), BoundedOutput())
    elif ending.pipe is not None:  # never wait for it
        os.close(ending.pipe)
    output = "\n".join(sink.lines()).strip()
    if timed_out:
        return Outcome(False, None, output, f"timed out after {timeout:g} s; killed")
    if ending.ended:
        return Outcome(False, None, output, "stopped; killed")
    code = ending.proc.returncode
    if code == 0:
        return Outcome(True, 0, output, "exited 0")
    what = f"killed by signal {-code}" if code < 0 else f"exited {code}"
    last = output.splitlines()[-1][:300] if output else ""
    return Outcome(False, code, output, f"{what}: {last}" if last else what)


class ProcessWait:
    """Waits for one command: reads its output, ends it on timeout or stop, reaps it.

    Its output pipe and a pidfd for its process are waited on together (without a
    pidfd: the pipe, and an exit check every few milliseconds). Ending it: SIGTERM to
    its group, then SIGKILL, then the process itself (it may have left its group); on
    a timeout, what it started outside the group too (found by ``mark``). ``ended``: it
    was ended.
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: dict[str, str],
        output: BoundedOutput,
        timeout: float,
        stop: threading.Event,
        *,
        cwd: Path | None = None,
    ) -> None:
        """Start ``argv`` with ``env`` (from :func:`environment`): no stdin, its output
        on one pipe, a session of its own (a timeout kills its whole group).

        Raises:
            OSError, ValueError: it cannot be started (ValueError: a NUL in an argument).
        """
        self.proc = proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.output = output
        self.deadline = time.monotonic() + timeout
        self.stop = stop
        self.mark = env[descendants.MARK]
        self.ended = False
        if proc.stdout is None:  # never: stdout=PIPE (for the type checker)
            raise ValueError("the command's stdout must be a pipe")
        self.pipe: int | None = proc.stdout.fileno()  # still open after run(): held by another writer
        os.set_blocking(self.pipe, False)

    def run(self) -> bool:
        """Wait until the command's process exited (ending it when due); True if it timed out.

        Raises:
            Exception: whatever waiting raised (out of descriptors for the selector or
                the pidfd...): the command's group is killed and the process reaped
                first, so an error never leaves a command running unseen.
        """
        try:
            return self._run()
        except BaseException:
            with contextlib.suppress(OSError):
                self._end(signal.SIGKILL, strays=False)
                self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=KILL_GRACE)
            self._close_pipe()
            raise

    def _run(self) -> bool:
        proc = self.proc
        exit_fd = pidfd(proc.pid)
        timed_out = False
        escalation: list[tuple[float, int]] = []  # (when, signal) still to send
        with selectors.DefaultSelector() as selector:
            if self.pipe is not None:
                selector.register(self.pipe, selectors.EVENT_READ, "out")
            if exit_fd is not None:
                selector.register(exit_fd, selectors.EVENT_READ, "exit")
            try:
                while proc.poll() is None:
                    now = time.monotonic()
                    if not escalation and (now >= self.deadline or self.stop.is_set()):
                        timed_out = now >= self.deadline and not self.stop.is_set()
                        self.ended = True
                        self._end(signal.SIGTERM, strays=timed_out)
                        escalation = [(now + KILL_GRACE, signal.SIGKILL), (now + 2 * KILL_GRACE, -1)]
                    while escalation and now >= escalation[0][0]:
                        _, signum = escalation.pop(0)
                        if signum == signal.SIGKILL:
                            self._end(signal.SIGKILL, strays=timed_out)
                        else:  # it left its group (setsid) and survived: kill the hook itself
                            with contextlib.suppress(OSError):
                                proc.kill()
                    due = escalation[0][0] if escalation else self.deadline
                    wait = min(_TICK, max(0.0, due - now))  # _TICK: stop() is seen promptly
                    if exit_fd is None:
                        wait = min(wait, _NO_PIDFD_POLL)
                    for key, _ in selector.select(wait):
                        if key.data == "out" and read_available(key.fd, self.output, CHUNK * 16):
                            selector.unregister(key.fd)
                            self._close_pipe()
                    if self.pipe is None and exit_fd is None:
                        # Output closed and no pidfd: the process is about to exit.
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            proc.wait(timeout=_NO_PIDFD_POLL)
            finally:
                if exit_fd is not None:
                    os.close(exit_fd)
        # What it wrote just before exiting; then the pipe is closed, or another
        # process still holds it (see self.pipe).
        pipe = self.pipe
        if pipe is not None and read_available(pipe, self.output, CHUNK * 16):
            self._close_pipe()
        elif pipe is not None:
            self.pipe = os.dup(pipe)  # the drain owns a copy; Popen's file is closed
            os.set_blocking(self.pipe, False)
            self._close_pipe(keep=True)
        return timed_out

    def _end(self, signum: int, *, strays: bool) -> None:
        """Signal the command's group; ``strays``: and what it started outside the group.

        They are looked for first: once its group is gone, a child of the command
        is an orphan, found only by its mark.
        """
        found = descendants.find(self.proc.pid, self.mark) if strays else []
        with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
            os.killpg(self.proc.pid, signum)
        if found:
            descendants.send(found, signum)

    def _close_pipe(self, *, keep: bool = False) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if not keep:
            self.pipe = None


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
