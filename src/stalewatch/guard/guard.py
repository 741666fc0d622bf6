"""The guard: owns the stale flag, its generation and the barrier.

The barrier's fast path is one attribute read (``self._pass``), recomputed under a lock
whenever the status or the watcher's health changes. Everything else — re-reading
HEAD, raising, delivering events — happens off that path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from types import TracebackType

from ..core import forking
from ..core.errors import BindError, ResourceExhaustedError, StaleError
from ..core.phases import RestartState
from ..core.status import Event, Snapshot, Status, WatchMode, transition
from ..watching.local import LocalSource
from ..watching.source import Source, Watch, start_watch
from . import head, identity
from .delivery import Subscribers
from .identity import Binding
from .restart_as_seen import restart_as_seen
from .work import Counter, WorkInFlight

__all__ = ["Guard"]

logger = logging.getLogger(__name__)


class Guard:
    """A revision guard for the checkout that supplied some code.

    Build one with :meth:`for_module`, :meth:`for_file` or :meth:`for_checkout`; use it
    as a context manager (or :meth:`start` / :meth:`stop`) to run its watcher; call
    :meth:`check` on every request.

    Args:
        binding: what to watch (from :mod:`.identity`).
        loaded_revision: the full commit id the process loaded; ``None``: HEAD now.
        latch: stay blocked after a rollback instead of returning to current (C8).
        source: where change notifications come from; default a
            :class:`~stalewatch.watching.local.LocalSource` (a watchdog thread here).

    Example::

        guard = Guard.for_module("run_agent")
        with guard:
            guard.check()            # raises StaleError once the checkout moved

    Raises:
        BindError: bad input, or HEAD unreadable while no revision is known (C5).
    """

    def __init__(
        self,
        binding: Binding,
        *,
        loaded_revision: str | None = None,
        latch: bool = False,
        source: Source | None = None,
    ) -> None:
        self.binding = binding
        self._latch = latch
        self._source: Source = source if source is not None else LocalSource()
        self._lock = threading.Lock()  # serialises state changes: generation order (C12)
        self._lifecycle = threading.Lock()
        self._subscribers: Subscribers[Event] = Subscribers()
        self._restart_subscribers: Subscribers[RestartState] = Subscribers()
        self._restart: RestartState | None = None  # from a daemon with a restart policy (R7)
        self._refresh_lock = threading.Lock()  # one read-and-apply at a time (C12)
        self._watch: Watch | None = None
        self._token: object = None
        self._restart_after_fork = False
        self._pid = os.getpid()
        self._trusted = False
        # The last read of HEAD failed for want of descriptors or memory (ours, not the
        # checkout's): nothing is known, so the flag is not trusted until a read succeeds.
        self._doubt = False
        self._mode = WatchMode.NONE
        self._ready = threading.Event()  # set while the watcher runs (see wait_ready)
        self._reader = binding.reader()  # HEAD, or the release a deploy link names
        status, loaded, current = head.initial(binding, self._reader, loaded_revision)
        # An untracked guard's status never changes: its reason is told once, and kept.
        why = (
            None if binding.reason is None else f"{binding.source} {binding.reason}, then restart the process"
        )
        self._snap = Snapshot(status, binding.checkout, loaded, current, 0, time.time(), error=why)
        if why is not None:
            logger.warning("stalewatch: this guard will never block: %s", why)
        self._stale = status.blocks
        # The barrier flag (C9): True only when the flag may be trusted and passes.
        self._pass = status is Status.UNTRACKED
        self._work = WorkInFlight()
        forking.in_child(self._after_fork_in_child)  # held weakly: a dropped guard is gone

    # -- constructors -----------------------------------------------------------------

    @classmethod
    def for_module(
        cls,
        name: str,
        *,
        loaded_revision: str | None = None,
        latch: bool = False,
        source: Source | None = None,
        deploy_link: str | os.PathLike[str] | None = None,
    ) -> Guard:
        """Guard the checkout that supplied ``sys.modules[name]`` (C1).

        Example: ``Guard.for_module("run_agent")``. Options as for :class:`Guard`.
        ``deploy_link``: the symlink the release in use is switched by
        (``/srv/app/current``), when the module's path did not keep it: the link
        retargeted is the code moving (:mod:`stalewatch.guard.release`).
        """
        binding = identity.bind_module(name, deploy_link)
        return cls(binding, loaded_revision=loaded_revision, latch=latch, source=source)

    @classmethod
    def for_file(
        cls,
        path: str | os.PathLike[str],
        *,
        loaded_revision: str | None = None,
        latch: bool = False,
        source: Source | None = None,
        deploy_link: str | os.PathLike[str] | None = None,
    ) -> Guard:
        """Guard the checkout whose repository tracks exactly this source file (C2).

        Example: ``Guard.for_file(run_agent.__file__)``. An untracked file gives an
        ``UNTRACKED`` guard that never blocks (unless behind a deploy link): it logs one
        warning naming the file and the fix, and its snapshot's ``error`` says the same.
        ``deploy_link`` as for :meth:`for_module`.
        """
        binding = identity.bind_file(os.fspath(path), deploy_link)
        return cls(binding, loaded_revision=loaded_revision, latch=latch, source=source)

    @classmethod
    def for_checkout(
        cls,
        path: str | os.PathLike[str],
        *,
        loaded_revision: str | None = None,
        latch: bool = False,
        source: Source | None = None,
        deploy_link: str | os.PathLike[str] | None = None,
    ) -> Guard:
        """Guard a whole working tree; ``path`` is any file or directory inside it, or a
        deploy link (``/srv/app/current``). ``deploy_link`` as for :meth:`for_module`.

        Example: ``Guard.for_checkout("/srv/hermes-agent")``.
        """
        binding = identity.bind_checkout(os.fspath(path), deploy_link)
        return cls(binding, loaded_revision=loaded_revision, latch=latch, source=source)

    @classmethod
    def for_path(
        cls,
        path: str | os.PathLike[str],
        *,
        loaded_revision: str | None = None,
        latch: bool = False,
        source: Source | None = None,
        deploy_link: str | os.PathLike[str] | None = None,
    ) -> Guard:
        """What a command line or a configuration names: a checkout (any directory in
        it, or a deploy link to one), or a source file its repository tracks (C2).

        Unlike :meth:`for_file`, a file no repository tracks is refused: a guard of it
        would never block, so whoever named it would watch nothing without a word.

        Raises:
            BindError: the path does not exist, is not in a git checkout, or is a file
                no repository tracks.
        """
        if not Path(path).is_file():
            return cls.for_checkout(
                path, loaded_revision=loaded_revision, latch=latch, source=source, deploy_link=deploy_link
            )
        binding = identity.bind_file(os.fspath(path), deploy_link)
        if binding.reason is not None:
            raise BindError(Path(path), f"{binding.reason}; there is nothing to watch")
        return cls(binding, loaded_revision=loaded_revision, latch=latch, source=source)

    # -- the barrier ------------------------------------------------------------------

    def check(self, strict: bool = False) -> None:
        """Return while the loaded code is current (or untracked); raise otherwise.

        Args:
            strict: re-resolve HEAD in-process first, so any update completed before
                the call is seen (C10; ~20 µs, no subprocess except for reftable).

        Raises:
            StaleError: the checkout moved (C3) or became unreadable (C4).
        """
        if self._pass and not strict:
            return
        self._check_slow(strict)

    def _check_slow(self, strict: bool) -> None:
        if self.binding.dirs is None:
            return
        if self._pid != os.getpid():  # fork without our at-fork hook (os.fork is hooked)
            self._after_fork_in_child()
        if self._restart_after_fork:
            self._restart_after_fork = False
            self.start()
        if strict or not self._trusted or self._doubt:
            # C9: the flag cannot be trusted, or the caller wants C10. A read that fails
            # for want of descriptors decides nothing: the last reading stands.
            self.refresh()
        snap = self._snap
        if snap.status.blocks:
            raise StaleError(
                snap.checkout,
                snap.loaded_revision,
                snap.current_revision,
                snap.status,
                snap.cause,
                restart=restart_as_seen(self._restart, snap, time.time()),
            )

    @property
    def status(self) -> Status:
        """The status as last observed (no I/O)."""
        return self._snap.status

    @property
    def stale(self) -> bool:
        """The flag itself: True while the status blocks (``STALE`` or ``UNREADABLE``)."""
        return self._stale

    @property
    def checkout(self) -> Path:
        return self.binding.checkout

    @property
    def loaded_revision(self) -> str | None:
        return self._snap.loaded_revision

    def snapshot(self) -> Snapshot:
        """The current state, frozen, including whether the flag is trusted right now.

        Its ``restart`` is the daemon's latest phase, or ``scheduled`` when this process
        saw HEAD move before the daemon announced it (R7, see :mod:`.restart_as_seen`).
        """
        snap = self._snap
        restart = restart_as_seen(self._restart, snap, time.time())
        trusted = self._trusted and not self._doubt
        return replace(snap, trusted=trusted, mode=self._mode, restart=restart)

    def version(self) -> tuple[object, ...]:
        """An opaque value that changes whenever :meth:`snapshot` would, without a copy.

        For whoever caches what it derives from a snapshot (the daemon's encoded
        ``snapshot`` lines): equal versions, equal snapshots, but for the time-bound
        part of a pending restart (:mod:`.restart_as_seen`), which a cache re-tells by its own event.
        """
        return (self._snap, self._trusted, self._doubt, self._mode, self._restart)

    # -- work in flight (R8) ------------------------------------------------------------

    def work(self) -> AbstractContextManager[None]:
        """Count one unit of work in flight while the ``with`` block runs (R8).

        A daemon's restart lets this process's work in flight end before stopping it
        (the barriers count each guarded request so). Any thread; no lock, nothing
        allocated. Example: ``with guard.work(): run_the_long_job()``.
        """
        return self._work.unit

    def count_work(self, counter: Counter) -> Callable[[], None]:
        """Add work the application counts itself; returns the function removing it.

        ``counter()`` answers a whole number, or ``None`` when it cannot tell (nothing);
        it is called only when the total is asked for (a daemon's client asks while a
        restart is coming or the code is stale), never on the request path; one that
        raises counts nothing (logged once). Example:
        ``guard.count_work(lambda: len(active_streams))``.
        """
        return self._work.add(counter)

    def inflight(self) -> int:
        """The work in flight now: units of :meth:`work` plus every :meth:`count_work` counter."""
        return self._work.total()

    # -- events -----------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Event], object]) -> Callable[[], None]:
        """Call ``callback(event)`` on every later change; returns an unsubscribe function.

        Each subscriber sees each event once, in generation order (C12). Callbacks run
        on the thread that observed the change (the watcher's, or one calling
        :meth:`check`), one at a time; keep them short. One that raises is logged and
        never stops the watcher or the other subscribers.
        """
        return self._subscribers.add(callback)

    # -- reading and deciding ---------------------------------------------------------

    def _read(self, chain: list[Path]) -> str | None:
        return self._reader.read(chain)

    def refresh(self) -> Snapshot:
        """Re-resolve HEAD now, update the status (emitting an event on change), return it.

        Safe from any thread. Reads are serialised per guard and each result is applied
        before the next read starts, so results are applied in the order HEAD was read:
        a slow reader can never roll the status back (C12). When the process is out of
        descriptors or memory the read tells nothing: the status stays, and the flag is
        distrusted until a read succeeds (``snapshot().trusted`` is False meanwhile).
        """
        with contextlib.suppress(ResourceExhaustedError):
            self._changed()
        return self.snapshot()

    def _changed(self) -> list[Path]:
        """The source's ``on_change``: re-resolve, apply, deliver; return HEAD's ref chain.

        The chain (the loose refs HEAD's resolution went through) tells the watcher
        which files to watch, so it never has to resolve HEAD a second time.

        Raises:
            ResourceExhaustedError: out of descriptors or memory: the flag is
                distrusted, the status unchanged; the watcher reads again soon.
        """
        return self._update([])

    def _update(self, chain: list[Path], loaded: str | None = None) -> list[Path]:
        """Read HEAD, apply it (and a newly ``loaded`` revision), publish the event.

        Raises:
            ResourceExhaustedError: as :meth:`_changed` (a ``loaded`` revision is
                applied first, against the last reading).
        """
        if self.binding.dirs is None:
            return chain
        with self._refresh_lock:
            try:
                current, error = self._read_settled(chain)
            except ResourceExhaustedError:
                # The reader's fault, not the checkout's: never `unreadable` for it (no
                # event, no blocked barrier); distrust the flag until a read succeeds.
                snap = self._snap
                event = self._apply(snap.current_revision, snap.error, loaded, read=False)
                if event is not None:  # an adopted revision: published as the reading stands
                    self._subscribers.push(event)
                self._subscribers.drain()
                raise
            moved = current is not None and current != self._snap.current_revision
            event = self._apply(current, error, loaded)  # the flag flips here, before the reflog
            if event is not None:
                if moved and current is not None:
                    # What moved HEAD: once per change (changes are applied only here,
                    # under _refresh_lock, so generation order holds), never on the flag
                    # read, and after the flag so detection never waits for it.
                    cause = self._reader.explain(chain, event.loaded_revision, current)
                    event = replace(event, cause=cause)
                    with self._lock:
                        self._snap = replace(self._snap, cause=cause)
                self._subscribers.push(event)
        self._subscribers.drain()  # outside the lock: a subscriber may call check(strict=True)
        return chain

    def _read_settled(self, chain: list[Path]) -> tuple[str | None, str | None]:
        snap = self._snap
        known = bool(snap.loaded_revision and snap.current_revision)
        return head.read_settled(self._read, chain, known=known)

    def adopt(self, revision: str) -> Snapshot:
        """Make ``revision`` the loaded revision: what this guard stands for now runs it.

        For whoever restarted the code's processes onto ``revision`` (the daemon does,
        after a confirmed automatic restart). HEAD is read again, and an event goes out
        when the status changes (C12); a latched guard is unlatched.

        Raises:
            BindError: ``revision`` is not a full commit id.
        """
        with contextlib.suppress(ResourceExhaustedError):  # adopted against the last reading
            self._update([], head.checked_revision(revision))
        return self.snapshot()

    def _apply(
        self, current: str | None, error: str | None, loaded: str | None = None, *, read: bool = True
    ) -> Event | None:
        """Apply a reading (and a newly loaded revision): snapshot, flag; the event to publish.

        ``read``: ``current`` and ``error`` were just read (else the last reading, kept
        while a read failed for want of resources: the flag stays distrusted).
        """
        with self._lock:
            self._doubt = not read
            changed = transition(self._snap, current, error, loaded=loaded, latch=self._latch)
            event = None
            if changed is not None:
                self._snap, event = changed
                self._stale = event.status.blocks
            self._pass = self._trusted and not self._doubt and not self._snap.status.blocks
            return event

    def subscribe_restart(self, callback: Callable[[RestartState], object]) -> Callable[[], None]:
        """Call ``callback(state)`` on each new phase of an automatic restart (R7).

        Only a guard fed by a daemon with a restart policy gets them; returns an
        unsubscribe function; callbacks run as :meth:`subscribe`'s.
        """
        return self._restart_subscribers.add(callback)

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
            self._trusted = trusted
            self._mode = mode
            self._pass = trusted and not self._doubt and not self._snap.status.blocks
            # Ready = the watcher runs: trusted, or polling (a mode never trusted, in
            # which every check re-reads HEAD; waiting for trust would wait for ever).
            if trusted or mode is WatchMode.POLLING:
                self._ready.set()
            else:
                self._ready.clear()

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> Guard:
        """Start watching (a no-op for an untracked guard, or when already started)."""
        dirs = self.binding.dirs
        with self._lifecycle:
            if dirs is None or self._watch is not None:
                return self
            token = self._token = object()
            self._watch = start_watch(
                self._source,
                dirs,
                self._changed,
                lambda trusted, mode: self._on_health(token, trusted, mode),
                loaded_revision=self._snap.loaded_revision,
                on_restart=lambda state: self._on_restart(token, state),
                work=self,
            )
            self._watch.start()
        return self

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until the watcher runs; True once it does, False on timeout.

        It runs with native notifications (``snapshot().trusted``: :meth:`check` is a
        flag read) or polling (never trusted: every :meth:`check` re-reads HEAD);
        either way every later move is seen (C9). False again while the watcher is
        faulted and not polling. An untracked guard is always ready.
        Example: ``guard.start().wait_ready(5)``.
        """
        if self.binding.dirs is None:
            return True
        return self._ready.wait(timeout)

    def stop(self) -> None:
        """Stop watching and join the watcher's thread. Harmless to call twice."""
        with self._lifecycle:
            watch, self._watch = self._watch, None
            self._restart_after_fork = False
            with self._lock:
                self._disconnect()
        if watch is not None:
            watch.stop()

    def _disconnect(self) -> None:
        # No source feeds the guard any more: nothing it said holds (C9, R7).
        self._token = None
        self._restart = None
        self._trusted = False
        self._mode = WatchMode.NONE
        self._pass = self.binding.dirs is None
        self._ready.clear()

    def __enter__(self) -> Guard:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _after_fork_in_child(self) -> None:
        # Threads do not survive fork(), and the parent's observer shares its inotify
        # fd and kill pipe with the parent: stopping it here would stop the parent's.
        # Forget it; the first check() in the child starts a fresh watcher. Any lock
        # may have been held by a thread that is gone: new ones.
        self._lock = threading.Lock()
        self._lifecycle = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._subscribers.after_fork()
        self._restart_subscribers.after_fork()
        self._work.after_fork_in_child()
        self._ready = threading.Event()
        self._restart_after_fork = self._watch is not None
        self._watch = None
        self._disconnect()
        self._pid = os.getpid()

    def __repr__(self) -> str:
        snap = self._snap
        return f"<Guard {snap.status.value} {snap.checkout} loaded={snap.loaded_revision}>"
