"""Polling while change notification is unavailable, and the way back to it.

A watcher that cannot get an inotify instance (the user's 128 are taken), or a watch
(the user's watch limit), polls instead, and its guard re-reads HEAD on every check
(only native notification is trusted). Limits are not forever: other programs close instances and watches. A
:class:`Fallback` tries native notification again with exponential backoff, and at
once when another watcher of the process just got it; each change is logged once.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from ..core import forking

__all__ = ["NO_NOTIFICATION", "Fallback"]

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


class _Waiting:
    """The process's fallbacks waiting for notification: when one gets it back, the
    others try at once. A forked child has none of them (their watchers are the parent's)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.retries: dict[Fallback, Callable[[], None]] = {}  # under lock
        forking.in_child(self._after_fork_in_child)

    def remove(self, fallback: Fallback) -> list[Callable[[], None]]:
        """Under :attr:`lock`: forget ``fallback``; the retries of the others."""
        self.retries.pop(fallback, None)
        return list(self.retries.values())

    def _after_fork_in_child(self) -> None:
        # The lock may have been held by one of the parent's watcher threads at fork().
        self.lock = threading.Lock()
        self.retries.clear()


_waiting = _Waiting()


class Fallback:
    """One watcher's state while it polls for want of notification.

    Args:
        worktree: for log lines.
        poll_interval: for log lines.
        wake: asks the watcher for a turn (to try native notification now).
    """

    def __init__(self, worktree: Path, poll_interval: float, wake: Callable[[], None]) -> None:
        self._worktree = worktree
        self._poll_interval = poll_interval
        self._wake = wake
        self.reason: str | None = None  # why we poll; None while native works
        self.retry_at = 0.0  # earliest next try of native notification
        self._backoff = BACKOFF_MIN
        self._gone = False

    @property
    def active(self) -> bool:
        return self.reason is not None

    def holds(self, now: float) -> bool:
        """Still polling, and not yet time to try native notification again."""
        return self.reason is not None and now < self.retry_at

    def due(self, now: float) -> bool:
        """Polling, and time to try native notification again."""
        return self.reason is not None and now >= self.retry_at

    def unavailable(self, exc: OSError, now: float) -> None:
        """Native notification failed with ``exc``: poll, retry after the backoff."""
        reason = _REASONS.get(exc.errno or 0, exc.strerror or str(exc))
        delay = _NEVER if exc.errno == errno.ENOSYS else self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_MAX)
        self.retry_at = now + delay
        with _waiting.lock:
            if not self._gone:  # a turn still running after stop() must not re-register
                _waiting.retries[self] = self._retry_now
        if self.reason is None:
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
        else:
            logger.debug("stalewatch: notification for %s still unavailable (%s)", self._worktree, reason)

    def available(self) -> None:
        """Native notification works (again): say so, and let the others retry now."""
        if self.reason is not None:
            logger.warning(
                "stalewatch: change notification for %s is available again; watching natively",
                self._worktree,
            )
            self.reason = None
            self._backoff = BACKOFF_MIN
        with _waiting.lock:
            others = _waiting.remove(self)
        for retry in others:  # notification is back for this process
            retry()

    def _retry_now(self) -> None:
        if self.reason is not None and self.retry_at != _NEVER:
            self.retry_at = 0.0
            self._wake()

    def forget(self) -> None:
        """The watcher stopped: no more retries."""
        with _waiting.lock:
            self._gone = True
            _waiting.remove(self)
