"""Telling a checkout's restart phases (R7): in the order decided, with a time estimate.

Two threads announce (the watcher's, at a stale event, and the sequence's): one at a
time, so the phases reach the daemon's loop in the order they were decided. A phase
equal to the last one is not told again. While a restart is coming, each phase carries
``retry_after``: the seconds until new servers should answer, from what the last
verification and restart took.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ...core.phases import RestartPhase, RestartState
from .policy import RestartPolicy

__all__ = ["Announcer"]

logger = logging.getLogger(__name__)

_DEFAULT_RESTART = 5.0  # seconds from action to confirmed, until one is measured
_DEFAULT_VERIFY = 1.0  # seconds a verify probe takes, until one is measured


class Announcer:
    """The restart phases of checkout ``key``, handed to ``publish`` (any thread).

    Attributes:
        state: the last phase told.
        restart_seconds: how long the last confirmed restart took (action to confirmed).
        verify_seconds: how long the last passing verify probe took.
    """

    def __init__(self, key: str, publish: Callable[[RestartState], None]) -> None:
        self.key = key
        self._publish = publish
        self._lock = threading.Lock()
        self.state = RestartState(RestartPhase.IDLE, at=time.time())
        self.restart_seconds = _DEFAULT_RESTART
        self.verify_seconds = _DEFAULT_VERIFY

    def estimate(self, policy: RestartPolicy, settle_left: float | None = None) -> float:
        """Seconds until the new servers should answer, from what the last ones took."""
        settle = policy.settle if settle_left is None else settle_left
        verify = self.verify_seconds if policy.verify is not None else 0.0
        return settle + verify + self.restart_seconds

    def tell(
        self,
        phase: RestartPhase,
        reason: str | None,
        revision: str | None,
        *,
        attempt: int,
        retry_after: float | None,
        policy: RestartPolicy,
    ) -> None:
        """Tell a phase (unless it is the one told last), with its log line."""
        with self._lock:
            old = self.state
            if (phase, reason, revision) == (old.phase, old.reason, old.revision):
                return
            if retry_after is None and phase.coming:
                retry_after = self.estimate(policy)
            retry_after = retry_after if phase.coming else None
            state = RestartState(phase, reason, revision, attempt, retry_after, time.time())
            self.state = state
            try:
                self._publish(state)
            except Exception:
                logger.exception("stalewatch: publishing a restart phase failed")
        level = logging.WARNING if phase in (RestartPhase.REFUSED, RestartPhase.FAILED) else logging.INFO
        logger.log(
            level,
            "stalewatch: restart of %s onto %s: %s%s",
            self.key,
            (revision or "")[:7] or "-",
            phase.value,
            f" ({reason})" if reason else "",
        )
