"""Running a body in a forked child, under an alarm, and reading what it reports."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable

__all__ = ["exit_status_in_fork", "report_from_fork"]


def report_from_fork(
    body: Callable[[], str], *, timeout: int = 20, holding: threading.Lock | None = None
) -> tuple[int, str]:
    """Fork (while this thread holds ``holding``, if given, as a parent's thread may),
    run ``body`` in the child under an alarm of ``timeout`` s; return the child's exit
    status and what ``body`` returned (on an exception: its traceback, exit status 1).

    A child that deadlocks (on a lock inherited held, say) is killed by its alarm
    (status ``-SIGALRM``); the parent waits at most a little longer, then kills it.
    """
    read_fd, write_fd = os.pipe()
    with holding or contextlib.nullcontext(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
        pid = os.fork()
        if pid == 0:  # child: leave without running pytest's teardown
            code, report = 1, b""
            try:
                os.close(read_fd)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.alarm(timeout)
                report = body().encode()
                code = 0
            except BaseException:
                report = traceback.format_exc().encode()
            finally:
                try:
                    view = memoryview(report)
                    while view:
                        view = view[os.write(write_fd, view) :]
                finally:
                    os._exit(code)
    os.close(write_fd)
    chunks: list[bytes] = []
    status: int | None = None
    try:
        poller = select.poll()
        poller.register(read_fd, select.POLLIN)
        deadline = time.monotonic() + timeout + 10.0  # the alarm ends it before this
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"forked child {pid} still running after {timeout + 10} s")
            if poller.poll(left * 1000):
                chunk = os.read(read_fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(read_fd)
        if status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")


def exit_status_in_fork(body: Callable[[], None], *, holding: threading.Lock, timeout: int = 5) -> int:
    """Fork while this thread holds ``holding`` (as a parent's thread may), run ``body``
    in the child under an alarm of ``timeout`` s, return the child's exit status.

    A child whose ``body`` deadlocks on a lock inherited held is killed by its alarm.
    """

    def reporting() -> str:
        body()
        return ""

    code, _ = report_from_fork(reporting, timeout=timeout, holding=holding)
    return code
