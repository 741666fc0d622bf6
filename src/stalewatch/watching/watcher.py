"""One checkout's watcher: its watches on the process's notifier, and its turns.

A :class:`Watcher` owns no thread. Its watches live on the process's notifier
(:mod:`.notifier`: the one inotify instance on Linux, watchdog's observer elsewhere) —
the directories of a :class:`~.plan.Plan`: HEAD's, those of the refs HEAD goes
through and of ``packed-refs``, each non-recursively, never ``objects/``; the
worktree and its parent only for renames and deletions. The notifier's
thread classifies each event by the plan and queues the watcher on the process's
workers (:mod:`.scheduler`); no I/O happens there, so reading ``.git`` never feeds the
watch. A turn re-resolves HEAD in-process, which coalesces bursts (a rebase) while
never losing the last write (C12), then moves the watches with HEAD.

A timer backs the events up: every ``verify_period`` (the verify interval, stretched
so the process verifies at most :data:`VERIFY_RATE` checkouts a second) a turn
compares the checkout's identity and a stat :class:`~.stamp.Stamp` of the plan's
files with the last ones, and reads HEAD only when they differ, when the stamp is
racy, or every :data:`READ_EVERY` verifications anyway. It is also what catches an
event a notifier lost without saying so (FSEvents, ReadDirectoryChangesW: see
:mod:`.observer`): within one verify period.

Trust (C9) is reported through :class:`~.health.Health`: only native notification
earns it. Faults revoke it at once: the reader died (every watcher restarts on a new
instance), the kernel's queue overflowed (every watcher resyncs), a worker died in
this watcher's turn, the checkout moved. When notification is unavailable (the
user's instance or watch limit) the watcher polls (stat stamps every poll interval)
and tries native notification again with exponential backoff, and at once when
another watcher of the process succeeds; the mode change is reported and logged.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..core.errors import ResourceExhaustedError
from ..core.settings import WatchSettings
from ..core.status import WatchMode
from ..git.refs import GitDirs
from . import scheduler
from .fallback import NO_NOTIFICATION, Fallback
from .health import Health
from .notifier import Notifier, Registration
from .plan import Plan, Planner, Relevance, anchors
from .source import OnChange, OnHealth
from .stamp import Stamp, take
from .watches import Watches, identity_of

__all__ = ["READ_EVERY", "VERIFY_RATE", "Watcher", "halt"]

logger = logging.getLogger(__name__)

VERIFY_RATE = 50.0
"""Most periodic verifications per second in one process: a thousand checkouts with
the 2 s default are each verified every 20 s, not 500 times a second in all."""
READ_EVERY = 8
"""Every this many verifications HEAD is read even when the stamp says unchanged."""
_RETRY = 1.0  # seconds before another try when the checkout or a directory is missing
_QUANTUM = 0.1  # timers fall on this grid (or a quarter period), so one wake-up serves several
_MAX_REPLANS = 5  # re-plans per turn before yielding to the next turn
# core.preferSymlinkRefs: git switches branch by unlinking HEAD, then creating the new
# symlink. Resolving in between reads "HEAD does not exist": wait this long for the
# new HEAD before resolving (its creation wakes the worker at once).
_HEAD_GONE_GRACE = 0.05
# Out of descriptors or memory while reading HEAD: read again after this, doubling up to
# the last (the guard distrusts its flag meanwhile: its barrier reads for itself).
_SHORT_RETRY = (0.05, 2.0)
_SHORT_WARN_EVERY = 60.0  # seconds between two warnings of it in the log
_NEVER = float("inf")

_Identity = tuple[int, int] | None


def halt(watchers: Iterable[Watcher]) -> None:
    """Stop running the turns of ``watchers``, at once, without waiting for turns under
    way; each one's :meth:`Watcher.stop` still removes its watches and leaves the
    workers. Harmless at any time, and twice.

    For stopping thousands together (a daemon's exit): halted first, in one pass, the
    shared workers stop spending their turns on the watchers not stopped yet (issue 17:
    SIGTERM took 9-15 s right after 10,001 checkouts started, their stops one by one
    racing the workers' first turns of the rest for the GIL and the scheduler's lock).
    """
    by_scheduler: dict[int, tuple[scheduler.Scheduler, list[scheduler.Slot]]] = {}
    for watcher in watchers:
        watcher._stopped = True  # a turn under way ends at its next step
        slot, sched = watcher._slot, watcher._scheduler
        if slot is not None and sched is not None:
            by_scheduler.setdefault(id(sched), (sched, []))[1].append(slot)
    for sched, slots in by_scheduler.values():
        sched.halt(slots)


class Watcher:
    """Watches one checkout; calls ``on_change`` on a worker thread. See the module doc.

    Attributes:
        plan: the current watch plan.
        verified_at: monotonic time of the last periodic verification (or restart).
        on_verified: called after each verification (the daemon's proof of life).
        turns: turns run so far (tests and benches count wake-ups with it).
    """

    def __init__(self, settings: WatchSettings, dirs: GitDirs, on_change: OnChange, on_health: OnHealth):
        self._settings = settings
        self._dirs = dirs
        self._on_change = on_change
        self._health = Health(on_health)
        self._stopped = False
        self._scheduler: scheduler.Scheduler | None = None
        self._slot: scheduler.Slot | None = None
        self._watches = Watches(self, self.wake, settings.notifier)
        self._identities: dict[str, _Identity] = {}
        self._planner = Planner(dirs)
        self.plan = Plan(frozenset(), frozenset(), frozenset(), frozenset())
        self._order: tuple[str, ...] = ()
        self._dirty = False
        self._resolve_at = _NEVER  # a resolve put off a moment (HEAD being replaced)
        self._restart_needed = True
        self._restart_at = 0.0
        self._stamp: Stamp | None = None
        self._verifies = 0
        self._next_verify = _NEVER
        self._fallback = Fallback(dirs.worktree, settings.poll_interval, self.wake)
        self._short_delay = 0.0  # the current retry delay while reads fail for want of resources
        self._short_warned = -_SHORT_WARN_EVERY
        self.verified_at: float | None = None
        self.on_verified: Callable[[], None] | None = None
        self.turns = 0

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Join the process's workers and instance; the first turn watches. Idempotent."""
        if self._slot is not None:
            return
        self._scheduler, self._slot = scheduler.acquire(self)
        # Behind wake-ups: a reload's thousand new watchers never delay another's event.
        self._scheduler.wake(self._slot, urgent=False)

    def halt(self) -> None:
        """Run no more turns, at once, without waiting for one under way (see :func:`halt`)."""
        halt([self])

    def stop(self) -> None:
        """Remove the watches and leave the workers. Harmless to call twice.

        Waits up to a second for a turn in progress; a turn stuck in a slow subscriber
        callback ends when the callback returns (the watches are gone by then).
        """
        self._stopped = True
        self._fallback.forget()
        slot, self._slot = self._slot, None
        if slot is not None and self._scheduler is not None and not scheduler.release(self._scheduler, slot):
            logger.warning(
                "stalewatch: the watcher of %s is still in a callback; it ends when that returns",
                self._dirs.worktree,
            )
        self._watches.close(final=True)
        self._health.report(False, WatchMode.NONE)

    @property
    def verify_period(self) -> float:
        """Seconds between periodic verifications now (poll interval while polling)."""
        if self._health.mode is WatchMode.POLLING:
            return self._settings.poll_interval
        count = self._scheduler.slots if self._scheduler is not None else 1
        return max(self._settings.verify_interval, count / VERIFY_RATE)

    # -- signals (any thread; the reader's must not block) -----------------------------------

    def wake(self) -> None:
        """Ask for a re-resolve soon (coalesces)."""
        self._dirty = True
        slot, sched = self._slot, self._scheduler
        if slot is not None and sched is not None:
            sched.wake(slot)

    def signal(self, relevance: Relevance) -> None:
        """React to a write the plan classified (on the reader thread)."""
        if relevance is Relevance.REF:
            self.wake()
        elif relevance is Relevance.ANCHOR:
            self._health.fault()
            self._restart_soon()

    def on_event(self, registration: Registration, name: bytes, deleted: bool) -> None:
        """An event in one of our directories (the notifier's thread: classify, no I/O)."""
        relevance = self.plan.relevance_in(registration.path, os.fsdecode(name))
        slot, sched = self._slot, self._scheduler
        if (
            relevance is Relevance.REF
            and deleted
            and registration.path / os.fsdecode(name) == self._dirs.head_file
            and slot is not None
            and sched is not None
        ):
            # Resolve at the end of the grace, or as soon as HEAD is back (its
            # creation wakes the worker).
            when = time.monotonic() + _HEAD_GONE_GRACE
            self._resolve_at = min(self._resolve_at, when)
            sched.at(slot, when)
            return
        self.signal(relevance)

    def on_overflow(self) -> None:
        self.queue_overflowed()

    def queue_overflowed(self) -> None:
        """Events were lost (inotify queue overflow): distrust the flag until resynced."""
        self._health.fault(resync=True)
        self.wake()

    def on_reader_died(self) -> None:
        """The instance's reader died: its watches are blind; restart on a new one."""
        self._health.fault()
        self._restart_soon()

    def _restart_soon(self, at: float = 0.0) -> None:
        """Start over (new plan, new watches) at ``at`` (monotonic; 0: the next turn)."""
        self._restart_needed = True
        self._restart_at = at
        if at == 0.0:
            self.wake()

    def turn_lost(self) -> None:
        """A worker died in our turn (a callback raised ``SystemExit``): start over."""
        self.on_reader_died()

    # -- a turn (a worker thread) ------------------------------------------------------------

    def turn(self) -> float:
        """Run one turn; return when the next is due (see :class:`~.scheduler.Task`)."""
        self.turns += 1
        try:
            self._step(time.monotonic())
        except ResourceExhaustedError as exc:
            self._short_of_resources(exc, time.monotonic())
        except Exception:
            # Never a dead watcher: distrust, back off, start over.
            logger.exception("stalewatch: watcher for %s failed; restarting", self._dirs.worktree)
            self._health.fault()
            self._restart_soon(time.monotonic() + min(_RETRY, self._settings.verify_interval))
        return self._next_timer()

    def _step(self, now: float) -> None:
        dirty, self._dirty = self._dirty, False  # before resolving: a later write gets a turn (C12)
        if self._resolve_at <= now:
            dirty, self._resolve_at = True, _NEVER
        if self._stopped:
            return
        if self._restart_needed:
            if now >= self._restart_at:
                self._restart(now)
            return
        if self._fallback.due(now):
            self._restart(now)  # try native notification again
            return
        faults, resync = self._health.take_resync()  # together: a fault in between is never lost
        if dirty or resync:
            if self._resolve_checked() and resync and not self._trust_unless_faulted(faults):
                self._health.owe_resync()  # another fault arrived meanwhile: resync again
                self.wake()
        elif now >= self._next_verify:
            self._verify(now)

    def _short_of_resources(self, exc: ResourceExhaustedError, now: float) -> None:
        """A read failed for want of descriptors or memory: nothing was learnt. Read again
        soon, backing off; trust (where a restart had just revoked it) comes back only
        through that read (a resync)."""
        low, high = _SHORT_RETRY
        self._short_delay = min(high, max(low, 2 * self._short_delay))
        self._stamp = None  # the next verification reads HEAD whatever the stamps say
        self._resolve_at = min(self._resolve_at, now + self._short_delay)
        self._health.owe_resync()
        if now - self._short_warned >= _SHORT_WARN_EVERY:
            self._short_warned = now
            logger.warning(
                "stalewatch: cannot read HEAD of %s now (%s); not trusting the flag, reading again in %.2f s",
                self._dirs.worktree,
                os.strerror(exc.errno),
                self._short_delay,
            )

    def _next_timer(self) -> float:
        if self._stopped:
            return _NEVER
        if self._restart_needed:
            return min(self._restart_at, self._resolve_at)
        if self._resolve_at != _NEVER:
            return self._resolve_at  # off the grid: a grace is short
        when = self._next_verify
        if self._fallback.active:
            when = min(when, self._fallback.retry_at)
        if when == _NEVER:
            return when
        # On a grid: verifications due close together share one worker wake-up.
        quantum = min(_QUANTUM, self.verify_period / 4)
        on_grid = math.ceil(when / quantum) * quantum
        return on_grid if on_grid >= when else on_grid + quantum

    def _changed(self) -> Sequence[Path] | None:
        """Re-resolve (the guard's work); return HEAD's ref chain, ``None`` if unknown."""
        try:
            chain = self._on_change()
        except ResourceExhaustedError:
            raise  # the turn retries soon (see _short_of_resources)
        except Exception:
            logger.exception("stalewatch: re-resolving %s failed", self._dirs.worktree)
            return None
        self._short_delay = 0.0
        return chain

    def _resolve(self, *, recheck: bool = False, stamp: Stamp | None = None) -> None:
        """Re-resolve HEAD, then move the watches with it; again while they move.

        A branch switch changes which ref matters. The watches move after the
        resolve, so one more resolve covers a write that landed in between. The stamp
        is taken before each read, so it describes no later state than the one read
        (``stamp``: one the caller just took, for the first read).
        """
        for _ in range(_MAX_REPLANS):
            stamp = take(self._order) if stamp is None else stamp
            chain = self._changed()
            if not self._replan(chain, recheck=recheck):
                self._stamp = stamp
                return
            recheck, stamp = False, None
        self._stamp = None
        self.wake()  # still moving: another turn

    def _resolve_checked(self, *, recheck: bool = False, stamp: Stamp | None = None) -> bool:
        """:meth:`_resolve`; when a new watch hits a limit, fall back to polling (False)."""
        try:
            self._resolve(recheck=recheck, stamp=stamp)
        except OSError as exc:
            if exc.errno not in NO_NOTIFICATION or self._health.mode is not WatchMode.NATIVE:
                raise
            self._fallback.unavailable(exc, time.monotonic())
            self._restart_soon()
            return False
        return True

    def _verify(self, now: float) -> None:
        """The periodic backstop: identity, then stamps; read HEAD only if they say so."""
        self._beat(now)
        self._next_verify = now + self.verify_period
        self._verifies += 1
        if any(identity_of(path) != ident for path, ident in self._identities.items()):
            # The checkout deleted, moved or re-created: inotify watches follow inodes.
            self.signal(Relevance.ANCHOR)
            return
        stamp = take(self._order)
        lost = self._watches.lost()
        if lost or self._verifies % READ_EVERY == 0 or not stamp.proves_unchanged_since(self._stamp):
            # lost() just compared every directory's identity: recheck only if it found one.
            self._resolve_checked(recheck=lost, stamp=stamp)

    def _beat(self, now: float) -> None:
        self.verified_at = now
        callback = self.on_verified
        if callback is not None:
            try:
                callback()
            except Exception:
                logger.exception("stalewatch: on_verified callback failed")

    # -- (re)starting --------------------------------------------------------------------------

    def _restart(self, now: float) -> None:
        faults = self._health.faults
        self._restart_needed = False
        self._health.report(False, self._health.mode)
        self._watches.close()
        self._stamp = None
        self._beat(now)
        identities = {path: identity_of(path) for path in anchors(self._dirs)}
        if None in identities.values():
            self._health.mode = WatchMode.NONE  # checkout gone: HEAD reads unreadable; retried soon
            self._restart_soon(now + min(_RETRY, self._settings.verify_interval))
            self._changed()
            return
        self._identities = identities
        self._set_plan(self._planner.plan())
        mode = self._open(now)
        self._health.mode = mode
        # The first verification: spread over a period, so a thousand checkouts started
        # together are not verified together; no sooner than a period after the start
        # (the watches are fresh), except when polling (that is how changes are seen).
        if mode is WatchMode.POLLING:
            self._next_verify = now + random.uniform(0.1, 1.0) * self.verify_period  # noqa: S311
        elif self._next_verify == _NEVER:
            self._next_verify = now + random.uniform(1.0, 2.0) * self.verify_period  # noqa: S311
        # Resolve only once the watches exist, so no update falls between the two.
        if self._resolve_checked():
            self._trust_unless_faulted(faults)  # trusted only when native

    def _open(self, now: float) -> WatchMode:
        """Watch the plan's directories natively if possible; the mode to run in."""
        if self._settings.poll:
            return WatchMode.POLLING
        if self._fallback.holds(now):
            return WatchMode.POLLING
        try:
            self._watches.open(self.plan)
        except OSError as exc:
            self._watches.close()
            if self._stopped:
                return WatchMode.NONE
            if exc.errno in NO_NOTIFICATION or exc.errno == errno.EACCES:
                self._fallback.unavailable(exc, now)
                return WatchMode.POLLING
            # e.g. a directory vanished between the plan and the watch
            logger.warning("stalewatch: cannot watch %s yet (%s); retrying", self._dirs.worktree, exc)
            self._restart_soon(now + min(_RETRY, self._settings.verify_interval))
            return WatchMode.NONE
        self._fallback.available()
        return WatchMode.NATIVE

    # -- watches --------------------------------------------------------------------------------

    def _set_plan(self, new: Plan) -> bool:
        changed = new is not self.plan and new != self.plan
        if changed:
            self.plan = new
            self._order = tuple(sorted(new.files))
        return changed

    def _replan(self, chain: Sequence[Path] | None, *, recheck: bool = False) -> bool:
        """Bring plan and watches in line with ``chain``; True if either changed.

        Raises:
            OSError: a watch could not be added (a limit): the caller falls back.
        """
        old = self.plan
        changed = self._set_plan(self._planner.plan(chain))
        if self._health.mode is not WatchMode.NATIVE:
            return changed
        return self._watches.follow(old, self.plan, recheck=recheck) or changed

    @property
    def instance(self) -> Notifier | None:
        """The process's notifier while this watcher uses it."""
        return self._watches.instance

    def watch_count(self) -> int:
        """Directories watched natively now."""
        return self._watches.count()

    def _trust_unless_faulted(self, faults: int) -> bool:
        """Restore trust unless a fault came after ``faults`` (or we are stopping)."""
        return not self._stopped and self._health.trust_unless_faulted(faults)
