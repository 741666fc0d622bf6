"""Has the update finished, and cleanly? Reading the files an updater leaves behind.

Every read is of outside input: a marker may be missing, a symlink, a FIFO, huge, or
garbage. Nothing here follows a symlink, blocks on a FIFO or reads more than a few
kilobytes, and every outcome is a :class:`Verdict`, never an exception.

- a hold file present: wait (``hold``);
- a PID marker (``PID\\nUNIX_TIME\\n``, as Hermes' updater writes it) naming a live
  process younger than the maximum age: wait (``update-running``); one naming a dead
  process, older than the maximum age, malformed, a symlink, a FIFO or oversized: the
  update did not end cleanly, refuse;
- a recovery marker present: refuse (``incomplete``).
"""

from __future__ import annotations

import errno
import math
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from ..commands import parse_pid
from .policy import RestartPolicy

MAX_MARKER = 4096  # a PID marker is two short lines
_CLOCK_SKEW = 60.0  # a marker this far in the future is still "now"


@dataclass(frozen=True)
class Verdict:
    """What the markers say. ``action`` is ``go``, ``wait`` or ``refuse``."""

    action: str
    reason: str = ""

    @property
    def go(self) -> bool:
        return self.action == "go"


GO = Verdict("go")


def exists(path: Path) -> bool | None:
    """Whether anything is at ``path``, a dangling symlink included (never followed).

    ``None`` when it cannot be told (a parent we may not search).
    """
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return None
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:  # EPERM: another user's process, alive
        return exc.errno != errno.ESRCH
    return True


def read_pid_marker(path: Path, max_age: float, now: float | None = None) -> Verdict:
    """The verdict of an updater's PID marker at ``path`` (absent: go)."""
    special = Verdict("refuse", f"update-marker: {path} is not a regular file")
    try:
        # O_NOFOLLOW and O_NONBLOCK: a symlink is refused, a FIFO read without blocking;
        # fstat judges what was opened, whatever was at the path before.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return GO  # none, or removed as we looked: the update just ended
    except OSError as exc:
        if exc.errno == errno.ELOOP and path.is_symlink():  # not a loop above it
            return Verdict("refuse", f"update-marker: {path} is a symlink; the update did not end cleanly")
        if exc.errno == errno.ENXIO:  # a socket
            return special
        return Verdict("wait", f"update-marker: cannot read {path}: {exc.strerror or exc}")
    try:
        info = os.fstat(fd)
        data = os.read(fd, MAX_MARKER + 1) if stat.S_ISREG(info.st_mode) else b""
    except OSError as exc:
        return Verdict("wait", f"update-marker: cannot read {path}: {exc.strerror or exc}")
    finally:
        os.close(fd)
    if not stat.S_ISREG(info.st_mode):
        return special
    if len(data) > MAX_MARKER:
        return Verdict("refuse", f"update-marker: {path} is larger than {MAX_MARKER} bytes")
    return _judge(path, data, max_age, time.time() if now is None else now)


def _judge(path: Path, data: bytes, max_age: float, now: float) -> Verdict:
    lines = data.decode("ascii", "replace").splitlines()
    pid = parse_pid(lines[0].encode()) if lines else None
    try:
        started = float(lines[1].strip())
    except (IndexError, ValueError):
        started = math.nan
    if pid is None or not math.isfinite(started):
        return Verdict("refuse", f"update-marker: {path} is malformed (expected PID and UNIX time)")
    age = now - started
    if age < -_CLOCK_SKEW:
        return Verdict("refuse", f"update-marker: {path} is dated {-age:.0f} s in the future")
    if age > max_age:
        return Verdict(
            "refuse",
            f"update-marker: {path} is {age:.0f} s old (over {max_age:.0f} s): the update did not end",
        )
    if not _alive(pid):
        return Verdict("refuse", f"update-marker: pid {pid} in {path} is not running: the update did not end")
    return Verdict("wait", f"update-running: pid {pid} since {max(0.0, age):.0f} s")


def assess(policy: RestartPolicy, now: float | None = None) -> Verdict:
    """Whether the update is over and clean, per ``policy``'s markers.

    Order matters: a live update may keep its recovery markers while it runs, so the
    PID marker is judged first; recovery markers only once no update is running.
    """
    if policy.update_marker is not None:
        verdict = read_pid_marker(policy.update_marker, policy.update_marker_max_age, now)
        if not verdict.go:
            return verdict
    for path in policy.incomplete_markers:
        present = exists(path)
        if present is None:
            return Verdict("refuse", f"incomplete: cannot tell whether {path} exists")
        if present:
            return Verdict("refuse", f"incomplete: {path} exists; the update did not finish")
    for path in policy.hold_while:
        present = exists(path)
        if present is not False:
            return Verdict("wait", f"hold: {path} {'exists' if present else 'cannot be checked'}")
    return GO
