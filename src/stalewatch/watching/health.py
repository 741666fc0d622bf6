"""A watcher's report to its guard: whether the flag may be trusted, and how changes are seen.

Reports come from several threads: the watcher's worker, a dying observer, the
overflow listener. A fault bumps a counter and revokes trust at once; the worker
restores trust only if no fault arrived while it re-resolved (it passes the count it
started from), so a late fault is never overwritten by an earlier all-clear.
"""

from __future__ import annotations

import logging
import threading

from ..core.status import WatchMode
from .source import OnHealth

logger = logging.getLogger(__name__)


class Health:
    """The (trusted, mode) last reported through ``on_health``, and the faults since.

    Attributes:
        mode: how changes are noticed now (native, polling or none); set by the
            worker, reported with the next report.
        faults: faults reported so far (compare before and after a resolve).
    """

    def __init__(self, on_health: OnHealth) -> None:
        self._on_health = on_health
        self._lock = threading.Lock()
        self._reported: tuple[bool, WatchMode] | None = None
        self.faults = 0
        self._resync = False
        self._stopped = False
        self.mode = WatchMode.NONE

    def fault(self, *, resync: bool = False) -> None:
        """Distrust the flag now; ``resync``: events were lost, re-resolve before trusting."""
        with self._lock:
            self.faults += 1
            self._resync = self._resync or resync
            self._set(False, self.mode)

    def take_resync(self) -> tuple[int, bool]:
        """The fault count and whether a resync is owed, taken together (and cleared)."""
        with self._lock:
            faults, resync, self._resync = self.faults, self._resync, False
            return faults, resync

    def owe_resync(self) -> None:
        """A resync did not hold (another fault came meanwhile): owe it again."""
        with self._lock:
            self._resync = True

    def trust_unless_faulted(self, faults: int) -> bool:
        """Report the mode's trust unless a fault came after ``faults``; False if one did.

        Only native notification earns trust: polling can miss a change for a period.
        """
        with self._lock:
            if self._stopped or self.faults != faults:  # no all-clear after the last report
                return False
            self._set(self.mode is WatchMode.NATIVE, self.mode)
            return True

    def report(self, trusted: bool, mode: WatchMode) -> None:
        """Report (trusted, mode) as it is, whatever the faults."""
        with self._lock:
            self._set(trusted, mode)

    def stop(self) -> None:
        """The last report: untrusted, not watching; no all-clear comes after it."""
        with self._lock:
            self._stopped = True
            self._set(False, WatchMode.NONE)

    def _set(self, trusted: bool, mode: WatchMode) -> None:
        # Under _lock: the last report is the one the guard sees.
        if (trusted, mode) == self._reported:
            return
        self._reported = (trusted, mode)
        try:
            self._on_health(trusted, mode)
        except Exception:
            logger.exception("stalewatch: health callback failed")
