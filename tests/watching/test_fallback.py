"""Polling for want of notification: the bookkeeping shared by a process's watchers."""

from __future__ import annotations

import errno
import time

from stalewatch import LocalSource
from stalewatch.git.refs import find_git_dirs
from stalewatch.watching import fallback as fallback_module
from stalewatch.watching.watcher import Watcher
from tests.support.forks import report_from_fork
from tests.support.repos import Repo


def test_a_forked_child_forgets_the_parents_polling_watchers_and_polls_its_own(git_repo: Repo) -> None:
    """The parent's watcher threads are gone in the child: its waiting list starts empty
    (and holds no lock a parent's thread could have held)."""
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None
    no_space = OSError(errno.ENOSPC, "No space left on device")

    def polling() -> Watcher:
        watcher = LocalSource(poll_interval=1.0).watch(dirs, lambda: None, lambda trusted, mode: None)
        watcher._fallback.unavailable(no_space, time.monotonic())
        return watcher

    parents = polling()
    try:

        def body() -> str:
            assert not fallback_module._waiting  # the parent's is forgotten
            waiting = polling()
            assert list(fallback_module._waiting) == [waiting._fallback]
            waiting.stop()
            assert not fallback_module._waiting
            return "ok"

        assert report_from_fork(body) == (0, "ok")
    finally:
        parents.stop()
    assert parents._fallback not in fallback_module._waiting
