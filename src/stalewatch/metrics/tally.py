"""What metrics count between scrapes: pure Python, no ``prometheus_client``, no threads.

Everything a scrape can read from a snapshot (status, revisions, trust, restart phase,
registered processes) is read at scrape time and never stored here. What only an
event can tell is counted here as it happens, a few integer updates under one lock
per event, hook run, restart phase or client drop: events by status, when a checkout
went stale, the detection latency histogram, hook runs and restart outcomes by kind,
clients dropped by reason. Label values are fixed sets (see the tuples below), so the
series a checkout has never depend on how many commits it saw.

Detection latency is timed only for an event a ref write explains (:meth:`Tally.event`);
what it measures and its limits: docs/metrics.md, "Detection latency".
"""

from __future__ import annotations

import bisect
import copy
import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

from ..core.phases import RestartPhase, RestartState
from ..core.status import Event, Snapshot, Status
from ..git.refs import GitDirs

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Upper bounds (seconds) of the detection latency histogram; ``+Inf`` follows."""

HOOKS = ("on_stale", "on_current", "on_unreadable")
HOOK_OUTCOMES = ("success", "failure", "killed", "timeout", "not_started")
"""Exited 0; exited non-zero; killed by a signal; killed at ``hook_timeout``; could not start."""

RESTART_OUTCOMES = ("confirmed", "failed", "refused")
DROP_REASONS = ("bad-request", "slow-client", "too-many-clients", "error")
"""The protocol's ``error`` reasons, and ``error``: a client dropped after a bug its input reached."""


class RefWrite(NamedTuple):
    """The newest write among the files that decide HEAD's commit: its modification
    time (Unix seconds) and which write it was (path, inode, mtime and ctime in ns)."""

    at: float
    identity: tuple[str, int, int, int]


def newest_ref_write(dirs: GitDirs | None) -> RefWrite | None:
    """The newest write of the files that decide HEAD's commit; ``None`` if none is
    readable (or ``dirs`` is ``None``: nothing tracked).

    ``HEAD``, the loose refs HEAD's chain goes through, ``packed-refs`` (or reftable's
    ``tables.list``): git writes one of them (through a ``.lock`` file renamed into
    place) whenever HEAD's commit moves. Pure reads, a few ``stat`` calls; never raises.
    """
    if dirs is None:
        return None
    writes = []
    for path in (dirs.head_file, *dirs.store.head_chain(dirs), *dirs.store.watched(dirs)):
        try:
            info = path.stat()
        except (OSError, ValueError):
            continue
        identity = (str(path), info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
        writes.append(RefWrite(info.st_mtime_ns / 1e9, identity))
    return max(writes, key=lambda write: write.at, default=None)


@dataclass
class Histogram:
    """Counts per bucket of :data:`LATENCY_BUCKETS` (the last one: above them all)."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations at or below it)``, ending with ``(inf, count)``."""
        return list(zip((*LATENCY_BUCKETS, float("inf")), itertools.accumulate(self.counts), strict=True))


@dataclass
class CheckoutCounts:
    """One checkout's counts (a copy when read through :meth:`Tally.counts`)."""

    events: dict[Status, int] = field(default_factory=lambda: dict.fromkeys(Status, 0))
    hooks: dict[tuple[str, str], int] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RESTART_OUTCOMES, 0))
    restart_actions: int = 0
    latency: Histogram = field(default_factory=Histogram)
    stale_since: float | None = None  # when the barrier began refusing, from events
    last_write: tuple[str, int, int, int] | None = None  # the ref write last seen (timed or before)
    phase: RestartPhase | None = None  # the last restart phase counted


class Tally:
    """Counts per checkout (keyed by the name the daemon gives it) and per daemon.

    Thread-safe: the daemon's loop, hook threads and a scrape's thread all use it.
    Each update takes one uncontended lock for a few integer operations; ``on_change``
    (if set) is called after each, outside the lock (it wakes a textfile writer).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checkouts: defaultdict[str, CheckoutCounts] = defaultdict(CheckoutCounts)
        self.on_change: Callable[[], None] | None = None
        self._connected = self._connections = 0
        self._dropped = dict.fromkeys(DROP_REASONS, 0)

    @contextmanager
    def _changing(self) -> Iterator[None]:
        with self._lock:
            yield
        if self.on_change is not None:
            self.on_change()

    @contextmanager
    def _checkout(self, key: str) -> Iterator[CheckoutCounts]:
        with self._changing():
            yield self._checkouts[key]  # made when new

    def event(self, key: str, event: Event, written: RefWrite | None, now: float | None = None) -> None:
        """Count ``event`` (seen at ``now``); time it if the ref write ``written`` explains it."""
        now = time.time() if now is None else now
        with self._checkout(key) as counts:
            counts.events[event.status] += 1
            if not event.status.blocks:
                counts.stale_since = None
            elif not event.previous_status.blocks or counts.stale_since is None:
                counts.stale_since = event.at
            # A write not seen before (else it explained an earlier event, or none: an
            # adopted restart), and not after this event (else it is the next event's,
            # in a burst: left for that one).
            if written is not None and written.at <= event.at:
                if written.identity != counts.last_write:
                    counts.latency.observe(max(0.0, now - written.at))
                counts.last_write = written.identity

    def seen(self, key: str, event: Event, dirs: GitDirs | None) -> None:
        """Count ``event``, seen now; time it by the newest ref write of ``dirs``."""
        now = time.time()
        self.event(key, event, newest_ref_write(dirs), now)

    def hook(self, key: str, hook: str, outcome: str) -> None:
        """Count one hook run (``hook`` in :data:`HOOKS`, ``outcome`` in :data:`HOOK_OUTCOMES`)."""
        if hook in HOOKS and outcome in HOOK_OUTCOMES:  # a fixed label set, whatever a caller passes
            with self._checkout(key) as counts:
                counts.hooks[hook, outcome] = counts.hooks.get((hook, outcome), 0) + 1

    def restart(self, key: str, state: RestartState) -> None:
        """Count a restart phase: an action run, or an outcome (entering a final phase)."""
        with self._checkout(key) as counts:
            previous, counts.phase = counts.phase, state.phase
            if state.phase is previous:
                return  # the same phase again with another reason: one outcome, not two
            if state.phase is RestartPhase.RESTARTING:
                counts.restart_actions += 1
            if state.phase.value in counts.restarts:  # a final phase: its outcome
                counts.restarts[state.phase.value] += 1

    def track(self, key: str, snapshot: Snapshot, written: RefWrite | None) -> None:
        """Start following a guard for ``key`` (at start, or a reload's new guard).

        A guard may begin stale (a configured revision HEAD has left): it has been
        since its snapshot's ``changed_at``. ``written`` (the newest ref write now)
        explains no event to come.
        """
        with self._checkout(key) as counts:
            counts.stale_since = snapshot.changed_at if snapshot.status.blocks else None
            if written is not None:
                counts.last_write = written.identity

    def forget(self, key: str) -> None:
        """``key`` is no longer watched: drop its counts (its series go with it)."""
        with self._changing():
            self._checkouts.pop(key, None)

    def counts(self, key: str) -> CheckoutCounts:
        """A copy of ``key``'s counts (zeros for a checkout that saw nothing yet)."""
        with self._lock:
            return copy.deepcopy(self._checkouts.get(key) or CheckoutCounts())

    def client_connected(self) -> None:
        with self._changing():
            self._connected += 1
            self._connections += 1

    def client_closed(self) -> None:
        with self._changing():
            self._connected = max(0, self._connected - 1)

    def client_dropped(self, reason: str) -> None:
        """Count a client dropped for ``reason`` (one of :data:`DROP_REASONS`, else ``error``)."""
        with self._changing():
            self._dropped[reason if reason in self._dropped else "error"] += 1

    def clients(self) -> tuple[int, int, dict[str, int]]:
        """``(connected now, connections accepted, {reason: dropped})``."""
        with self._lock:
            return self._connected, self._connections, dict(self._dropped)
