"""One checkout's watcher. With :mod:`.observers`, the only code importing watchdog.

A :class:`Watcher` owns one worker thread and one watchdog observer. The observer
watches the directories of a :class:`~.plan.Plan` — those of HEAD, of
the refs HEAD goes through and of ``packed-refs``, each non-recursively, never
``objects/`` — and its handler only classifies the path and sets a wake-up event: no
I/O on watchdog's dispatch thread, so reading ``.git`` can never feed the watch. The
worker re-resolves HEAD in-process on each wake-up, which coalesces bursts (a rebase)
while never losing the last write (C12), and on a timer, which backs the events up.
It reports health to the guard, which trusts its flag only while the watcher is
healthy (C9).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers.api import BaseObserver, ObservedWatch

from ..git.refs import GitDirs, identity
from . import observers
from .health import Health
from .plan import Plan, Relevance, anchors, plan
from .source import OnChange, OnHealth

if TYPE_CHECKING:
    from .local import LocalSource

__all__ = ["Watcher"]

logger = logging.getLogger(__name__)


# OSError numbers meaning "no change notification here": fall back to polling.
_NO_NOTIFICATION = frozenset({errno.ENOSPC, errno.EMFILE, errno.ENFILE, errno.ENOSYS})

_HEALTH_INTERVAL = 1.0  # seconds between checks that watchdog's threads are alive
_MAX_REPLANS = 5  # re-plans per wake-up before yielding to the next turn


class _Handler(FileSystemEventHandler):
    """Sorts events by the current plan and wakes the worker; does no I/O itself."""

    def __init__(self, watcher: Watcher) -> None:
        self._watcher = watcher

    def dispatch(self, event: FileSystemEvent) -> None:
        try:
            plan = self._watcher.plan
            paths = [os.fsdecode(event.src_path)]
            if event.event_type == "moved":
                paths.append(os.fsdecode(event.dest_path))
            for relevance in {plan.relevance(path) for path in paths}:
                self._watcher.signal(relevance)
        except Exception:  # a raising handler kills watchdog's dispatch thread
            logger.exception("stalewatch: error handling %r", event)


class Watcher:
    """Watches one checkout; calls ``on_change`` on its own thread. See the module doc."""

    def __init__(self, source: LocalSource, dirs: GitDirs, on_change: OnChange, on_health: OnHealth):
        self._source = source
        self._dirs = dirs
        self._on_change = on_change
        self._health = Health(on_health)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        # The observer, its watches and its threads: changed by the worker, closed by
        # stop() from the caller's thread as well, always under this lock.
        self._observer_lock = threading.Lock()
        self._observer: BaseObserver | None = None
        # Each watched directory with the (device, inode) it had when watched: inotify
        # follows the inode, so a directory deleted and re-created needs a new watch.
        self._watches: dict[Path, tuple[ObservedWatch, tuple[int, int] | None]] = {}
        self._reader_threads: list[threading.Thread] = []
        self._identities: dict[str, tuple[int, int] | None] = {}
        self.plan = Plan(frozenset(), frozenset(), frozenset(), frozenset())
        self._restart_needed = True
        self._polling_only = False  # set once notifications proved unavailable
        self._handler = _Handler(self)

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        """Start the worker thread, which starts the observer. Idempotent."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, name=f"stalewatch-watcher:{self._dirs.worktree}", daemon=True
        )
        observers.track(self)
        observers.warn_if_overflow_log_is_silenced()
        self._thread.start()

    def stop(self) -> None:
        """Stop the observer and the worker, joining them. Harmless to call twice.

        The observer is stopped from this thread, so watchdog's threads are gone within
        a second even while the worker is busy in a slow subscriber callback.
        """
        self._stop.set()
        self._wake.set()
        observers.untrack(self)
        self._close_observer()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)
            if thread.is_alive():
                logger.warning(
                    "stalewatch: %s is still in a callback; it ends when that returns", thread.name
                )

    def wake(self) -> None:
        """Ask the worker to re-resolve now (any thread; coalesces)."""
        self._wake.set()

    def signal(self, relevance: Relevance) -> None:
        """React to a write the plan classified (called on watchdog's dispatch thread)."""
        if relevance is Relevance.REF:
            self._wake.set()
        elif relevance is Relevance.ANCHOR:
            self._health.fault()
            self._restart_needed = True
            self._wake.set()

    # -- fault signals (other threads) ------------------------------------------

    def _observer_died(self) -> None:
        logger.error("stalewatch: watchdog observer for %s died; restarting", self._dirs.worktree)
        self._health.fault()
        self._restart_needed = True
        self._wake.set()

    def queue_overflowed(self) -> None:
        """Events were lost (inotify queue overflow): distrust the flag until resynced."""
        self._health.fault(resync=True)
        self._wake.set()

    # -- worker ------------------------------------------------------------------

    def _run(self) -> None:
        verify_every = self._source.verify_interval
        # Thread liveness is checked at least every second even when re-verification
        # is rare: a dead watchdog thread leaves the flag blind until it is noticed.
        health_every = min(_HEALTH_INTERVAL, verify_every)
        now = time.monotonic()
        next_health, next_verify = now, now + verify_every
        try:
            while not self._stop.is_set():
                try:
                    next_health, next_verify = self._step(
                        next_health, next_verify, health_every, verify_every
                    )
                except Exception:
                    # Never a dead watcher: distrust, back off one period, start over.
                    logger.exception("stalewatch: watcher for %s failed; restarting", self._dirs.worktree)
                    self._health.fault()
                    self._restart_needed = True
                    self._stop.wait(health_every)
        finally:
            self._health.report(False, "none")
            self._close_observer()

    def _step(
        self, next_health: float, next_verify: float, health_every: float, verify_every: float
    ) -> tuple[float, float]:
        """One turn of the worker loop; returns the next health and verify deadlines."""
        now = time.monotonic()
        if now >= next_health:
            next_health = now + health_every
            if self._restart_needed or not self._healthy():
                self._restart()
                return next_health, now + verify_every
        if now >= next_verify:
            next_verify = now + verify_every
            self._wake.set()  # periodic re-verification backs the events up
        self._wake.wait(max(0.0, min(next_health, next_verify) - now))
        if self._stop.is_set() or not self._wake.is_set():
            return next_health, next_verify
        self._wake.clear()  # before resolving: a write from now on wakes us again (C12)
        if self._restart_needed:
            self._restart()
            return next_health, next_verify
        faults, resync = self._health.take_resync()  # together: a fault in between is never lost
        if self._resolve_checked() and resync and not self._trust_unless_faulted(faults):
            self._health.owe_resync()  # another fault arrived meanwhile: resync again
            self._wake.set()
        return next_health, next_verify

    def _changed(self) -> Sequence[Path] | None:
        """Re-resolve (the guard's work); return HEAD's ref chain, ``None`` if unknown."""
        try:
            return self._on_change()
        except Exception:
            logger.exception("stalewatch: re-resolving %s failed", self._dirs.worktree)
            return None

    def _resolve(self) -> None:
        """Re-resolve HEAD, then move the watches with it; again if they moved.

        A branch switch changes which ref matters. The watches move after the
        resolve, so one more resolve covers a write that landed in between.
        """
        chain = self._changed()
        # Until the plan holds still: a directory git creates between a plan and its
        # watch (checkout -b a/b) is found by the next plan, and a resolve after each
        # change of watches covers a write that landed before the watch existed.
        for _ in range(_MAX_REPLANS):
            if self._observer is None or not self._replan(chain):
                return
            chain = self._changed()
        self._wake.set()  # still moving: another turn

    def _replan(self, chain: Sequence[Path] | None) -> bool:
        """Bring the watches in line with a fresh plan; True if they changed.

        Raises:
            OSError: a watch could not be added (the watch limit): the caller restarts.
        """
        new = plan(self._dirs, chain)
        with self._observer_lock:
            observer = self._observer
            if observer is None:
                return False
            # The old plan sorted the events that arrived since the last resolve: if it
            # named other files (HEAD switched branch in the same directory), a write to
            # the new branch may have been ignored, so the caller must resolve again.
            changed, self.plan = new != self.plan, new
            # Watches to make anew: an emitter ends when its directory is deleted, and a
            # directory re-created (even on the same inode) needs a new watch.
            dead = {Path(e.watch.path) for e in list(observer.emitters) if not e.is_alive()}
            replaced = {p for p, (_, ident) in self._watches.items() if p in dead or identity(p) != ident}
            if new.watch == self._watches.keys() and not replaced:
                return changed
            for path in (self._watches.keys() - new.watch) | replaced:
                watch, _ = self._watches.pop(path)
                with contextlib.suppress(KeyError):  # gone with its directory already
                    observer.unschedule(watch)
            for path in new.watch - self._watches.keys():
                try:
                    self._watch_dir(observer, path)
                except (FileNotFoundError, NotADirectoryError):
                    self._wake.set()  # git removed it since the plan was made: plan again
            self._name_threads(observer)
        return True

    def _watch_dir(self, observer: BaseObserver, path: Path) -> None:
        ident = identity(path)  # before the watch: a later swap shows up as a mismatch
        watch = observer.schedule(self._handler, str(path), recursive=False, event_filter=observers.EVENTS)
        self._watches[path] = (watch, ident)

    def _healthy(self) -> bool:
        observer = self._observer
        if observer is None or not observer.is_alive():
            return False
        # Every thread watchdog started for us must still run: an exception kills one
        # silently and its watch goes blind. An emitter also ends when its directory
        # is deleted; that is a change of plan, not a fault.
        dead = [t.name for t in self._reader_threads if not t.is_alive()]
        if any(not emitter.is_alive() for emitter in list(observer.emitters)):
            self._wake.set()  # its directory was deleted, or it crashed: re-planning replaces it
        if dead:
            logger.error("stalewatch: watchdog threads %s for %s died; restarting", dead, self._dirs.worktree)
            return False
        # The checkout deleted, moved or re-created: inotify watches follow inodes.
        return all(identity(Path(path)) == ident for path, ident in self._identities.items())

    def _restart(self) -> None:
        faults = self._health.faults
        self._restart_needed = False
        self._health.report(False, self._health.mode)
        self._close_observer()
        identities = {path: identity(Path(path)) for path in anchors(self._dirs)}
        if None in identities.values():
            self._health.mode = "none"  # checkout gone: HEAD reads unreadable; retried on the tick
            self._changed()
            return
        try:
            mode = self._start_observer()
        except OSError as exc:  # e.g. a directory vanished between the check and the watch
            if self._stop.is_set():
                return  # stop() is closing us: not a failure
            logger.warning("stalewatch: cannot watch %s yet (%s); retrying", self._dirs.worktree, exc)
            self._health.mode = "none"
            self._restart_needed = True
            self._changed()
            return
        self._health.mode = mode
        self._identities = identities
        # Resolve only once the watches exist, so no update falls between the two.
        if self._resolve_checked():
            self._trust_unless_faulted(faults)  # trusted only when native

    def _resolve_checked(self) -> bool:
        """:meth:`_resolve`; when a new watch hits the limit, restart polling (False)."""
        try:
            self._resolve()
        except OSError as exc:
            if exc.errno not in _NO_NOTIFICATION or self._health.mode == "polling":
                raise
            self._notification_unavailable(exc)
            self._restart()
            return False
        return True

    def _start_observer(self) -> str:
        # One observer is created at a time, so the threads that appear meanwhile are
        # this observer's (see _adopt).
        with observers.start_lock, self._observer_lock:
            if self._stop.is_set():
                raise OSError(errno.ESHUTDOWN, "stopping")
            if not self._source.poll and not self._polling_only:
                before = set(threading.enumerate())
                try:
                    self._adopt(observers.native_observer(), before)  # inotify starts its reader here
                except OSError as exc:
                    if exc.errno not in _NO_NOTIFICATION:
                        raise
                    self._notification_unavailable(exc)
                else:
                    return "native"
            self._adopt(observers.polling_observer(self._source.poll_interval), set(threading.enumerate()))
            return "polling"

    def _notification_unavailable(self, exc: OSError) -> None:
        if not self._polling_only:
            self._polling_only = True  # from now on this watcher polls
            reason = {errno.ENOSPC: "watch limit reached", errno.EMFILE: "instance limit reached"}
            reason[errno.ENOSYS] = "not supported by this kernel"
            logger.warning(
                "stalewatch: change notification unavailable for %s (%s); polling every "
                "%.1f s, and the barrier re-reads HEAD on each check meanwhile",
                self._dirs.worktree,
                reason.get(exc.errno or 0, exc.strerror or str(exc)),
                self._source.poll_interval,
            )

    def _adopt(self, observer: BaseObserver, before: set[threading.Thread]) -> None:
        """Start ``observer`` with the current plan's watches (under _observer_lock)."""
        observer.name = f"stalewatch-observer:{self._dirs.worktree}"
        observer.daemon = True
        observer.on_exit = self._observer_died  # type: ignore[attr-defined]
        # Start first, then schedule: a running observer starts each emitter inside
        # schedule(), so a watch-limit OSError surfaces here and stop() cleans up.
        observer.start()
        self.plan = plan(self._dirs)
        self._watches = {}
        try:
            for path in self.plan.watch:
                try:
                    self._watch_dir(observer, path)
                except (FileNotFoundError, NotADirectoryError):
                    self._wake.set()  # git removed it since the plan was made: plan again
        except BaseException:
            self._watches = {}
            observers.stop_observer(observer)
            raise
        self._observer = observer
        # The inotify reader is not among observer.emitters. Our observers are created
        # one at a time (start_lock), so a new InotifyFD thread is this one's.
        self._reader_threads = [
            t for t in threading.enumerate() if t not in before and type(t).__name__ == "InotifyFD"
        ]
        self._name_threads(observer)

    def _name_threads(self, observer: BaseObserver) -> None:
        # Named, so a thread dump (or a log line about a dead thread) says whose it is.
        for thread in self._reader_threads:
            thread.name = f"stalewatch-inotify:{self._dirs.worktree}"
        for emitter in list(observer.emitters):
            emitter.name = f"stalewatch-emitter:{emitter.watch.path}"

    def _close_observer(self) -> None:
        with self._observer_lock:
            observer, self._observer = self._observer, None
            self._watches = {}
            self._reader_threads = []
        if observer is not None:
            observers.stop_observer(observer)

    def _trust_unless_faulted(self, faults: int) -> bool:
        """Restore trust unless a fault came after ``faults`` (or we are stopping)."""
        return not self._stop.is_set() and self._health.trust_unless_faulted(faults)
