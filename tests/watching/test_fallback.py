"""Polling for want of notification: the bookkeeping shared by a process's watchers."""

from __future__ import annotations

import errno
import time
from pathlib import Path

from stalewatch.watching import fallback
from tests.support.forks import exit_status_in_fork


def test_a_forked_child_stops_polling_though_a_parent_thread_held_the_waiting_list(
    tmp_path: Path,
) -> None:
    """The parent's watcher threads are gone in the child; their lock must not be."""

    def body() -> None:
        waiting = fallback.Fallback(tmp_path, 1.0, lambda: None)
        waiting.unavailable(OSError(errno.ENOSPC, "No space left on device"), time.monotonic())
        waiting.forget()

    assert exit_status_in_fork(body, holding=fallback._waiting.lock) == 0
