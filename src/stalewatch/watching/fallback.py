"""Polling for want of notification, and the way back: a watcher's :class:`Fallback`.

Without notification (the user's 128 inotify instances are taken, or the watch limit
is reached) a watcher polls. Limits are not forever: it tries native notification
again with exponential backoff, and at once when another watcher of the process just
got it back; each change is logged once.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from pathlib import Path

from ..core import forking

logger = logging.getLogger(__name__)

NO_NOTIFICATION = frozenset({errno.ENOSPC, errno.EMFILE, errno.ENFILE, errno.ENOSYS, errno.ENOMEM})
"""``OSError`` numbers meaning "no change notification here, now": poll, retry later."""
_REASONS = {
    errno.ENOSPC: "watch limit reached",
    errno.EMFILE: "instance limit reached",
    errno.ENFILE: "the system's file table is full",
    errno.ENOSYS: "not supported here",
    errno.EACCES: "a git directory cannot be watched (permission)",
}
BACKOFF_MIN, BACKOFF_MAX = 1.0, 30.0
_NEVER = float("inf")

# The process's watchers polling for want of notification: when one gets it back, the
# others try at once. Changed and copied in one step each (no lock a fork could leave
# held); a forked child has none of them (their watchers are the parent's).
_waiting: dict[Fallback, None] = {}
forking.in_child(_waiting.clear)


class Fallback:
    """Why one watcher polls (``reason``), and when it tries native notification again
    (``retry_at``, monotonic); ``wake`` asks the watcher for a turn."""

    def __init__(self, worktree: Path, poll_interval: float, wake: Callable[[], None]) -> None:
        self.reason: str | None = None
        self.retry_at = 0.0
        self._backoff = BACKOFF_MIN
        self._worktree = worktree
        self._poll_interval = poll_interval
        self._wake = wake
        self._stopped = False

    def waiting(self, now: float) -> bool:
        """Polling, and not yet time to try native notification again."""
        return self.reason is not None and now < self.retry_at

    def due(self, now: float) -> bool:
        """Polling, and time to try native notification again."""
        return self.reason is not None and now >= self.retry_at

    def stop(self) -> None:
        """Leave the process's waiting list for good; harmless twice."""
        self._stopped = True
        _waiting.pop(self, None)

    def unavailable(self, exc: OSError, now: float) -> None:
        """Native notification failed with ``exc``: poll, retry after the backoff."""
        reason = _REASONS.get(exc.errno or 0, exc.strerror or str(exc))
        delay = _NEVER if exc.errno == errno.ENOSYS else self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_MAX)
        self.retry_at = now + delay
        _waiting[self] = None
        if self._stopped:  # a turn still running after stop() must not stay registered
            _waiting.pop(self, None)
        if self.reason is not None:
            logger.debug("stalewatch: notification for %s still unavailable (%s)", self._worktree, reason)
            return
        self.reason = reason
        again = "" if delay == _NEVER else f"; retrying native notification (backoff from {delay:.0f} s)"
        logger.warning(
            "stalewatch: change notification unavailable for %s (%s); polling every %.1f s%s, "
            "and the barrier re-reads HEAD on each check meanwhile",
            self._worktree,
            reason,
            self._poll_interval,
            again,
        )

    def available(self) -> None:
        """Native notification works (again): say so, and let the others retry now."""
        if self.reason is not None:
            logger.warning(
                "stalewatch: change notification for %s is available again; watching natively",
                self._worktree,
            )
            self.reason = None
            self._backoff = BACKOFF_MIN
        _waiting.pop(self, None)
        for other in _waiting.copy():  # notification is back for this process
            if other.reason is not None and other.retry_at != _NEVER:
                other.retry_at = 0.0
                other._wake()
