"""Running the commands the daemon is configured with: argv only, bounded, in their own group.

A command gets no stdin, its own session (so a timeout kills everything it started),
and a bounded head and tail of its output: one that prints without end costs a few
kilobytes. A command is done when its process exits; a child it left in the
background (``cmd &``, the usual restart idiom) may keep the output pipe open, and is
neither waited for nor killed.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .output import CHUNK, BoundedOutput, read_available
from .sdnotify import SD_ENV

__all__ = ["MAX_PID", "Outcome", "parse_pid", "pidfd", "run", "signal_pidfile"]

_KILL_GRACE = 0.5
_STOP_CHECK = 0.25  # seconds between looks at the stop event while a command runs


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


def _text(output: BoundedOutput) -> str:
    return "\n".join(output.lines()).strip()


def run(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    timeout: float,
    env: Mapping[str, str] | None = None,
    stop: threading.Event | None = None,
) -> Outcome:
    """Run ``argv`` until its process exits, the timeout passes, or ``stop`` is set.

    ``env`` is added to the daemon's environment, from which systemd's own variables
    (``NOTIFY_SOCKET``…) are removed.
    """
    environment = {k: v for k, v in os.environ.items() if k not in SD_ENV}
    environment.update(env or {})
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        return Outcome(False, None, "", f"cannot run {argv[0]!r}: {exc.strerror or exc}")
    stdout = proc.stdout
    if stdout is None:  # pragma: no cover - Popen with stdout=PIPE always has one
        raise RuntimeError("no pipe from the command")
    out = stdout.fileno()
    os.set_blocking(out, False)
    sink = BoundedOutput()
    exited = pidfd(proc.pid)
    poller = select.poll()
    poller.register(out, select.POLLIN)
    if exited is not None:
        poller.register(exited, select.POLLIN)
    deadline = time.monotonic() + timeout
    reason: str | None = None
    try:
        open_pipe = True
        while proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                reason = f"timed out after {timeout:g} s; killed"
                break
            if stop is not None and stop.is_set():
                reason = "stopped; killed"
                break
            # Without a pidfd the exit is noticed on the next turn: bound the wait.
            wait = left if exited is not None and stop is None else min(left, _STOP_CHECK)
            for fd, _ in poller.poll(wait * 1000):
                if fd == out and open_pipe and read_available(out, sink, CHUNK * 16):
                    open_pipe = False
                    poller.unregister(out)
        if reason is not None:
            _kill_group(proc)
        if open_pipe:
            read_available(out, sink, CHUNK * 16)  # what is there now; never wait for orphans
    finally:
        stdout.close()
        if exited is not None:
            os.close(exited)
    output = _text(sink)
    if reason is not None:
        return Outcome(False, None, output, reason)
    code = proc.returncode
    if code == 0:
        return Outcome(True, 0, output, "exited 0")
    what = f"killed by signal {-code}" if code < 0 else f"exited {code}"
    last = output.splitlines()[-1][:300] if output else ""
    return Outcome(False, code, output, f"{what}: {last}" if last else what)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=_KILL_GRACE)
            return


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


def signal_pidfile(pidfile: Path, signame: str) -> Outcome:
    """Send ``SIG<signame>`` to the pid written in ``pidfile`` (never following a link)."""
    try:
        fd = os.open(pidfile, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return Outcome(False, None, "", f"cannot read {pidfile}: {exc.strerror or exc}")
    try:
        data = os.read(fd, 64)
    except OSError as exc:
        return Outcome(False, None, "", f"cannot read {pidfile}: {exc.strerror or exc}")
    finally:
        os.close(fd)
    pid = parse_pid(data)
    if pid is None:
        return Outcome(False, None, "", f"{pidfile} does not hold a pid")
    if pid <= 1:
        return Outcome(False, None, "", f"{pidfile} holds pid {pid}; refusing to signal it")
    try:
        os.kill(pid, signal.Signals[f"SIG{signame}"])
    except OSError as exc:
        return Outcome(False, None, "", f"cannot signal pid {pid}: {exc.strerror or exc}")
    return Outcome(True, 0, "", f"sent SIG{signame} to pid {pid}")
