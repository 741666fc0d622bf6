"""When a registered server tells the daemon its work in flight: the client's side.

A daemon's restart drains the servers' work in flight before it stops them; each
server's count reaches it in the registration and then in ``inflight`` lines. What
this module decides for one connection:

- the registration carries the count at that moment;
- afterwards the count is read only while it matters: the daemon's restart is coming
  (a ``restart`` line said so) or the guard refuses (its code is stale, perhaps seen
  before the daemon announced anything); then at once, told even if unchanged (so the
  daemon holds a count read after its announcement), then at most every
  :data:`REPORT_INTERVAL`, with a line only when the count changed, and one last look
  once it stops mattering;
- nothing while the code is current and no restart is coming: the barrier's hot path
  (``guard.work()``) only counts, and the application's counters are not called;
- nothing at all to a daemon whose hello lacks the ``inflight`` feature, or once the
  daemon refused the registration.

Pure bookkeeping on the client thread (the clock is passed in); the client sends.
"""

from __future__ import annotations

import logging
from typing import Any

from ..protocol.messages import MAX_INFLIGHT, inflight_message
from ..watching.source import Workload

logger = logging.getLogger(__name__)

REPORT_INTERVAL = 0.1
"""Seconds between two looks at the count while it matters (changes are coalesced)."""


class InflightReport:
    """One connection's reporting of a guard's work in flight.

    Args:
        checkout: the checkout as the daemon names it.
        work: what to count (the guard); ``None``: nothing to report.
    """

    def __init__(self, checkout: str, work: Workload | None) -> None:
        self._checkout = checkout
        self._work = work
        self.enabled = False  # registered with a daemon that offers `inflight`
        self.coming = False  # the daemon's restart is coming
        self._sent = 0
        self._due = 0.0  # monotonic time before which the count is not read again
        self._mattered = False  # it mattered at the last look

    def registering(self, offered: bool) -> int:
        """The count for a registration line; from now on, report if ``offered``."""
        self.enabled = offered and self._work is not None
        self._sent = self._count() if self.enabled else 0
        self._mattered = False
        return self._sent

    def refused(self) -> None:
        """The daemon refused the registration: it has no count to keep."""
        self.enabled = False

    def lost(self) -> None:
        """The connection ended: a new one registers afresh."""
        self.enabled = False
        self.coming = False
        self._mattered = False

    def matters(self) -> bool:
        """Whether the daemon may be waiting for this count now."""
        return self.enabled and (self.coming or self._stale())

    def due(self) -> float | None:
        """When the client must look next (monotonic; perhaps past), or ``None``: no need."""
        return self._due if self.enabled and (self._mattered or self.matters()) else None

    def look(self, now: float) -> dict[str, Any] | None:
        """The ``inflight`` line to send now, if the count changed and it matters."""
        if not self.enabled or now < self._due:
            return None
        mattered, self._mattered = self._mattered, self.matters()
        if not (mattered or self._mattered):
            return None
        self._due = now + REPORT_INTERVAL
        count = self._count()
        if count == self._sent and mattered:
            return None  # unchanged; but the first look once it matters is always told:
            # the daemon then holds a count read after it announced the restart (R8)
        self._sent = count
        return inflight_message(self._checkout, count)

    def _stale(self) -> bool:
        try:
            return self._work is not None and bool(self._work.stale)
        except Exception:  # a Workload is the application's: never the client thread's end
            logger.exception("stalewatch: reading the guard's status failed")
            return False

    def _count(self) -> int:
        if self._work is None:
            return 0
        try:
            count = self._work.inflight()
        except Exception:
            logger.exception("stalewatch: counting the work in flight failed")
            return self._sent
        if isinstance(count, bool) or not isinstance(count, int):
            return self._sent
        return min(max(0, count), MAX_INFLIGHT)  # the protocol's bound: never a bad request
