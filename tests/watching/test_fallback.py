"""Polling for want of notification: the bookkeeping shared by a process's watchers."""

from __future__ import annotations

import errno
import time

from stalewatch import LocalSource
from stalewatch.git.refs import find_git_dirs
from stalewatch.watching import fallback as fallback_module
from tests.support.forks import exit_status_in_fork
from tests.support.repos import Repo


def test_a_forked_child_stops_polling_though_a_parent_thread_held_the_waiting_list(git_repo: Repo) -> None:
    """The parent's watcher threads are gone in the child; their lock must not be."""
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None

    def body() -> None:
        waiting = LocalSource(poll_interval=1.0).watch(dirs, lambda: None, lambda trusted, mode: None)
        waiting._fallback.unavailable(OSError(errno.ENOSPC, "No space left on device"), time.monotonic())
        waiting.stop()

    assert exit_status_in_fork(body, holding=fallback_module._waiting_lock) == 0
