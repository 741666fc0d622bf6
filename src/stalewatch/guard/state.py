"""What a guard knows, the barrier's flag computed from it, and its subscribers.

:class:`GuardState` is :class:`~.guard.Guard`'s base: the snapshot (status, revisions,
generation), what its watch last reported (trust, mode, a daemon's restart phase), the
flag the barrier reads (``_pass``, recomputed under a lock whenever one of them
changes), and the read-and-apply that moves them on, in order, with their events.
The flag is an attribute of the guard itself, so the barrier's fast path stays one
attribute read.

The guard appends events under its own lock, in generation order, and then calls
:meth:`Subscribers.drain` outside it. Whoever holds the delivery lock delivers
everything pending; a thread that finds it taken leaves its events to the holder, who
looks at the queue again after releasing. So events go out in the order they were
made, one subscriber call at a time, and a subscriber that calls back into the guard
(``check(strict=True)`` from a callback) cannot deadlock.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Generic, TypeVar

from ..core.errors import ResourceExhaustedError
from ..core.phases import RestartState
from ..core.status import Event, Snapshot, Status, WatchMode, transition, with_cause
from . import head
from .identity import Binding
from .restart_as_seen import restart_as_seen

logger = logging.getLogger(__name__)
T = TypeVar("T")


class Subscribers(Generic[T]):
    """A guard's subscriber callbacks and the items (events) waiting for them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: deque[T] = deque()
        self._callbacks: dict[int, Callable[[T], object]] = {}
        self._ids = itertools.count()

    def add(self, callback: Callable[[T], object]) -> Callable[[], None]:
        """Register ``callback``; return the function that unregisters it (harmless twice)."""
        key = next(self._ids)
        self._callbacks[key] = callback

        def remove() -> None:
            self._callbacks.pop(key, None)

        return remove

    def push(self, item: T) -> None:
        """Queue ``item`` (called under the guard's lock, so in generation order)."""
        self._pending.append(item)

    def drain(self) -> None:
        """Deliver every queued event, unless another thread is delivering already."""
        while self._pending:
            if not self._lock.acquire(blocking=False):
                return  # the holder re-checks the queue after releasing
            try:
                while self._pending:
                    item = self._pending.popleft()
                    for key, callback in list(self._callbacks.items()):
                        if key not in self._callbacks:
                            continue  # unsubscribed while this item was being delivered
                        try:
                            callback(item)
                        except Exception:
                            logger.exception("stalewatch: subscriber %r failed", callback)
            finally:
                self._lock.release()

    def after_fork(self) -> None:
        """In a forked child: the delivering thread is gone, and maybe with it the lock."""
        self._lock = threading.Lock()


class GuardState:
    """A guard's state and its transitions; :class:`~.guard.Guard` adds the barrier, the
    constructors and the lifecycle of its watch.

    Raises:
        BindError: as :class:`~.guard.Guard`.
    """

    _token: object  # the watch whose reports count (None: no watch feeds the guard)
    _restart: RestartState | None  # from a daemon with a restart policy

    def __init__(self, binding: Binding, loaded_revision: str | None, latch: bool) -> None:
        self.binding = binding
        self._latch = latch
        self._reader = binding.reader()  # HEAD, or the release a deploy link names
        self._read = self._reader.read
        self._subscribers: Subscribers[Event] = Subscribers()
        self._restart_subscribers: Subscribers[RestartState] = Subscribers()
        self._new_locks()
        # The last read failed for want of descriptors or memory (ours, not the
        # checkout's): nothing is known, so the flag is not trusted until a read succeeds.
        self._doubt = False
        status, loaded, current = head.initial(binding, self._reader, loaded_revision)
        # An untracked guard's status never changes: its reason (never empty) is told once, and kept.
        why = binding.reason and f"{binding.source} {binding.reason}, then restart the process"
        self._snap = Snapshot(status, binding.checkout, loaded, current, 0, time.time(), error=why)
        if why is not None:
            logger.warning("stalewatch: this guard will never block: %s", why)
        self._disconnect()  # the barrier flag too: True only when it may be trusted and passes

    def _new_locks(self) -> None:
        """Fresh locks (also in a forked child: one a parent's thread held stays held)."""
        self._lock = threading.Lock()  # serialises state changes: generation order (C12)
        self._refresh_lock = threading.Lock()  # one read-and-apply at a time: none overtakes another
        self._ready = threading.Event()  # set while the watcher runs (see wait_ready)
        self._subscribers.after_fork()
        self._restart_subscribers.after_fork()

    # -- what it says -------------------------------------------------------------------

    @property
    def status(self) -> Status:
        """The status as last observed (no I/O)."""
        return self._snap.status

    @property
    def stale(self) -> bool:
        """The flag itself: True while the status blocks (``STALE`` or ``UNREADABLE``)."""
        return self._snap.status.blocks

    @property
    def checkout(self) -> Path:
        return self.binding.checkout

    @property
    def loaded_revision(self) -> str | None:
        return self._snap.loaded_revision

    def snapshot(self) -> Snapshot:
        """The current state, frozen, including whether the flag is trusted right now.

        Its ``restart`` is the daemon's latest phase, or ``scheduled`` when this process
        saw HEAD move before the daemon announced it (see :mod:`.restart_as_seen`).
        """
        snap = self._snap
        restart = restart_as_seen(self._restart, snap, time.time())
        return replace(snap, trusted=self._trusted and not self._doubt, mode=self._mode, restart=restart)

    def version(self) -> tuple[object, ...]:
        """An opaque value that changes whenever :meth:`snapshot` would, without a copy.

        For whoever caches what it derives from a snapshot (the daemon's encoded
        ``snapshot`` lines): equal versions, equal snapshots, but for the time-bound
        part of a pending restart (:mod:`.restart_as_seen`), which a cache re-tells by its own event.
        """
        return (self._snap, self._trusted, self._doubt, self._mode, self._restart)

    def subscribe(self, callback: Callable[[Event], object]) -> Callable[[], None]:
        """Call ``callback(event)`` on every later change; returns an unsubscribe function.

        Each subscriber sees each event once, in generation order. Callbacks run
        on the thread that observed the change (the watcher's, or one calling
        :meth:`~.guard.Guard.check`), one at a time; keep them short. One that raises is
        logged and never stops the watcher or the other subscribers.
        """
        return self._subscribers.add(callback)

    def subscribe_restart(self, callback: Callable[[RestartState], object]) -> Callable[[], None]:
        """Call ``callback(state)`` on each new phase of an automatic restart.

        Only a guard fed by a daemon with a restart policy gets them; returns an
        unsubscribe function; callbacks run as :meth:`subscribe`'s.
        """
        return self._restart_subscribers.add(callback)

    # -- reading and deciding -----------------------------------------------------------

    def refresh(self) -> Snapshot:
        """Re-resolve HEAD now, update the status (emitting an event on change), return it.

        Safe from any thread. Reads are serialised per guard and each result is applied
        before the next read starts, so results are applied in the order HEAD was read:
        a slow reader can never roll the status back. When the process is out of
        descriptors or memory the read tells nothing: the status stays, and the flag is
        distrusted until a read succeeds (``snapshot().trusted`` is False meanwhile).
        """
        with contextlib.suppress(ResourceExhaustedError):
            self._update()
        return self.snapshot()

    def adopt(self, revision: str) -> Snapshot:
        """Make ``revision`` the loaded revision: what this guard stands for now runs it.

        For whoever restarted the code's processes onto ``revision`` (the daemon does,
        after a confirmed automatic restart). HEAD is read again, and an event goes out
        when the status changes; a latched guard is unlatched.

        Raises:
            BindError: ``revision`` is not a full commit id.
        """
        with contextlib.suppress(ResourceExhaustedError):  # adopted against the last reading
            self._update(head.checked_revision(revision))
        return self.snapshot()

    def _update(self, loaded: str | None = None) -> list[Path]:
        """Read the revision, apply it (and a newly ``loaded`` revision), publish the event.

        The source's ``on_change``: it returns HEAD's ref chain (the loose refs the read
        went through), which tells the watcher which files to watch, so it never has to
        resolve HEAD a second time.

        Raises:
            ResourceExhaustedError: out of descriptors or memory: the flag is
                distrusted, the status unchanged (a ``loaded`` revision is applied
                against the last reading); the watcher reads again soon.
        """
        chain: list[Path] = []
        if self.binding.dirs is None:
            return chain
        try:
            with self._refresh_lock:
                snap = self._snap  # changed only under this lock
                known = bool(snap.loaded_revision and snap.current_revision)
                try:
                    current, error = head.read_settled(self._read, chain, known=known)
                except ResourceExhaustedError:
                    # The reader's fault, not the checkout's: never `unreadable` for it (no
                    # event, no blocked barrier); an adopted revision is published as the
                    # reading stands.
                    self._publish(self._apply(snap.current_revision, snap.error, loaded, read=False))
                    raise
                event = self._apply(current, error, loaded)  # the flag flips here, before the reflog
                if event is not None and current is not None and current != snap.current_revision:
                    # What moved HEAD: once per change (changes are applied only here,
                    # under _refresh_lock, so generation order holds), never on the flag
                    # read, and after the flag so detection never waits for it.
                    cause = self._reader.explain(chain, event.loaded_revision, current)
                    with self._lock:
                        self._snap, event = with_cause(self._snap, event, cause)
                self._publish(event)
        finally:
            self._subscribers.drain()  # outside the lock: a subscriber may call check(strict=True)
        return chain

    def _publish(self, event: Event | None) -> None:
        if event is not None:
            self._subscribers.push(event)

    def _apply(
        self, current: str | None, error: str | None, loaded: str | None, *, read: bool = True
    ) -> Event | None:
        """Apply a reading (and a newly loaded revision): snapshot, flag; the event to publish.

        ``read``: ``current`` and ``error`` were just read (else the last reading, kept
        while a read failed for want of resources: the flag stays distrusted).
        """
        with self._lock:
            self._doubt = not read
            changed = transition(self._snap, current, error, loaded=loaded, latch=self._latch)
            self._snap, event = changed or (self._snap, None)
            self._pass = self._trusted and not self._doubt and not self._snap.status.blocks
            return event

    # -- what the watch reports ---------------------------------------------------------

    def _on_restart(self, token: object, state: RestartState | None) -> None:
        with self._lock:
            if token is not self._token or state == self._restart:
                return
            self._restart = state
            if state is not None:
                self._restart_subscribers.push(state)
        self._restart_subscribers.drain()

    def _on_health(self, token: object, trusted: bool, mode: WatchMode | str) -> None:
        mode = WatchMode.of(mode)
        with self._lock:
            if token is not self._token:
                return  # a report from a watch this guard no longer runs
            self._trusted, self._mode = trusted, mode
            self._pass = trusted and not self._doubt and not self._snap.status.blocks
            # Ready = the watcher runs: trusted, or polling (a mode never trusted, in
            # which every check re-reads HEAD; waiting for trust would wait for ever).
            if trusted or mode is WatchMode.POLLING:
                self._ready.set()
            else:
                self._ready.clear()

    def _disconnect(self) -> None:
        # No source feeds the guard (yet, or any more): nothing it said holds, neither the
        # trust in the flag nor the restart it announced.
        self._token = None
        self._restart = None
        self._trusted = False
        self._mode = WatchMode.NONE
        self._pass = self.binding.dirs is None
        self._ready.clear()
