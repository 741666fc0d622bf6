"""One checkout's watcher: its watches on the process's notifier, and its turns.

A :class:`Watcher` owns no thread. It watches the directories of its
:class:`~.plan.Plan` on the process's notifier (:mod:`.notifier`), whose thread
classifies each event by the plan and queues the watcher on the process's workers
(:mod:`.scheduler`), with no I/O. A turn re-resolves HEAD in-process, which coalesces
bursts (a rebase) while never losing the last write, then moves the watches
with HEAD.

A timer backs the events up, and catches what a notifier lost silently
(:mod:`.observer`): every :attr:`Watcher.verify_period` a turn compares the
checkout's identity and a :class:`~.stamp.Stamp` of the plan's files with the last
ones, and reads HEAD when they differ, when the stamp is racy, or every
:data:`READ_EVERY` verifications anyway.

Only native notification earns trust; a fault revokes it at once. Reports come from
several threads (the worker, a dying notifier, the overflow listener): a fault bumps
a counter and revokes trust, and a turn restores trust only if no fault arrived while
it re-resolved, so a late fault is never overwritten by an earlier all-clear.

Without notification (the user's 128 inotify instances are taken, or the watch limit
is reached) the watcher polls: it stats its files every poll interval, and its guard
re-reads HEAD on every check; :mod:`.fallback` keeps why, and when to try again.
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
from .notifier import Registration
from .plan import Plan, Planner, Relevance, anchors
from .source import OnChange, OnHealth
from .stamp import Stamp, take
from .watches import Identity, Watches, identity_of

logger = logging.getLogger(__name__)

VERIFY_RATE = 50.0  # most periodic verifications a second in one process (1,000 checkouts: each 20 s)
READ_EVERY = 8  # every this many verifications HEAD is read, whatever the stamps say
_RETRY = 1.0  # seconds (a verify interval at most) before retrying a missing checkout
_QUANTUM = 0.1  # timers fall on this grid (or a quarter period), so one wake-up serves several
_MAX_REPLANS = 5  # re-plans per turn before yielding to the next turn
# core.preferSymlinkRefs: git switches branch by unlinking HEAD, then creating the new
# symlink: wait this long for the new one before resolving (its creation wakes us).
_HEAD_GONE_GRACE = 0.05
# Out of descriptors or memory reading HEAD: read again after this, doubling up to the last.
_SHORT_RETRY = (0.05, 2.0)
_SHORT_WARN_EVERY = 60.0  # seconds between two warnings of it in the log
_NEVER = float("inf")


def halt(watchers: Iterable[Watcher]) -> None:
    """Run no more turns of ``watchers``, at once, in one pass (a daemon's exit: their
    stops one by one raced the workers' turns of the rest, issue 17); each one's
    :meth:`Watcher.stop` still follows. Harmless at any time, and twice."""
    slots: dict[scheduler.Scheduler, list[scheduler.Slot]] = {}
    for watcher in watchers:
        watcher._stopped = True  # a turn under way ends at its next step
        if watcher._slot is not None and watcher._scheduler is not None:
            slots.setdefault(watcher._scheduler, []).append(watcher._slot)
    for sched, some in slots.items():
        sched.halt(some)


class Watcher:
    """Watches one checkout; calls ``on_change`` on a worker thread. See the module doc.

    Attributes:
        plan: the current watch plan.
        on_verified: called after each verification (the daemon's proof of life).
        turns: turns run so far (tests and benches count wake-ups with it).
    """

    def __init__(self, settings: WatchSettings, dirs: GitDirs, on_change: OnChange, on_health: OnHealth):
        self._settings = settings
        self._retry = min(_RETRY, settings.verify_interval)
        self._dirs = dirs
        self._on_change = on_change
        self._health = Health(on_health)
        self._stopped = False
        self._scheduler: scheduler.Scheduler | None = None
        self._slot: scheduler.Slot | None = None
        self._watches = Watches(self, self.wake, settings.notifier)
        self._identities: dict[str, Identity] = {}
        self._planner = Planner(dirs)
        self.plan = Plan()
        self._order: tuple[str, ...] = ()
        self._dirty = False
        self._resolve_at = _NEVER  # a resolve put off a moment (HEAD being replaced)
        self._restart_at = 0.0  # when to start over (new plan, new watches); never: no need
        self._stamp: Stamp | None = None
        self._verifies = 0
        self._next_verify = _NEVER
        self._fallback = Fallback(dirs.worktree, settings.poll_interval, self.wake)
        self._short_delay = 0.0  # the current retry delay while reads fail for want of resources
        self._short_warned = -_SHORT_WARN_EVERY
        self.on_verified: Callable[[], None] | None = None
        self.turns = 0

    def start(self) -> None:
        """Join the process's workers and instance; the first turn watches. Idempotent."""
        if self._slot is not None:
            return
        self._scheduler, self._slot = scheduler.acquire(self)
        # Behind wake-ups: a reload's thousand new watchers never delay another's event.
        self._scheduler.wake(self._slot, urgent=False)

    def stop(self) -> None:
        """Remove the watches and leave the workers; harmless twice. Waits up to a second
        for a turn under way (one stuck in a slow callback ends when that returns)."""
        self._stopped = True
        self._fallback.stop()
        slot, self._slot = self._slot, None
        if slot is not None and self._scheduler is not None and not scheduler.release(self._scheduler, slot):
            logger.warning(
                "stalewatch: the watcher of %s is still in a callback; it ends when that returns",
                self._dirs.worktree,
            )
        self._watches.close(final=True)
        self._health.stop()

    @property
    def verify_period(self) -> float:
        """Seconds between periodic verifications now (poll interval while polling)."""
        if self._health.mode is WatchMode.POLLING:
            return self._settings.poll_interval
        count = self._scheduler.slots if self._scheduler is not None else 1
        return max(self._settings.verify_interval, count / VERIFY_RATE)

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

    # -- the notifier's listener (its thread: classify, no I/O) -------------------------

    def on_event(self, registration: Registration, name: bytes, deleted: bool) -> None:
        """An event in one of our directories."""
        relevance = self.plan.relevance_in(registration.path, os.fsdecode(name))
        slot, sched = self._slot, self._scheduler
        if (
            relevance is Relevance.REF
            and deleted
            and registration.path / os.fsdecode(name) == self._dirs.head_file
            and slot is not None
            and sched is not None
        ):
            # Resolve at the end of the grace, or as soon as HEAD is back (that wakes us).
            when = time.monotonic() + _HEAD_GONE_GRACE
            self._resolve_at = min(self._resolve_at, when)
            sched.at(slot, when)
            return
        self.signal(relevance)

    def on_overflow(self) -> None:
        """Events were lost: distrust the flag until resynced."""
        self._health.fault(resync=True)
        self.wake()

    def on_reader_died(self) -> None:
        """The notifier died (or a worker in our turn, ``SystemExit`` in a callback): its
        watches are blind; restart on a new one."""
        self._health.fault()
        self._restart_soon()

    turn_lost = on_reader_died

    # -- turns ---------------------------------------------------------------------------

    def _restart_soon(self, at: float = 0.0) -> None:
        """Start over (new plan, new watches) at monotonic ``at`` (0: the next turn)."""
        self._restart_at = at
        if at == 0.0:
            self.wake()

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
            self._restart_soon(time.monotonic() + self._retry)
        return self._next_timer()

    def _step(self, now: float) -> None:
        dirty, self._dirty = self._dirty, False  # before resolving: a later write gets a turn (C12)
        if self._resolve_at <= now:
            dirty, self._resolve_at = True, _NEVER
        if self._stopped:
            return
        if self._restart_at != _NEVER:
            if now >= self._restart_at:
                self._restart(now)
            return
        if self._fallback.due(now):
            self._restart(now)  # try native notification again
            return
        faults, resync = self._health.take_resync()  # together: a fault in between is never lost
        if dirty or resync:
            if self._resolve_checked() and resync and not self._health.trust_unless_faulted(faults):
                self._health.owe_resync()  # another fault arrived meanwhile: resync again
                self.wake()
        elif now >= self._next_verify:
            self._verify(now)

    def _short_of_resources(self, exc: ResourceExhaustedError, now: float) -> None:
        """Out of descriptors or memory reading HEAD: read again soon, backing off, and
        trust again only after that read (a resync)."""
        low, high = _SHORT_RETRY
        self._short_delay = min(high, max(low, 2 * self._short_delay))
        self._stamp = None  # the next verification reads HEAD whatever the stamps say
        self._resolve_at = min(self._resolve_at, now + self._short_delay)
        self._health.owe_resync()  # trusted again only after the next read
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
        if self._restart_at != _NEVER:
            return min(self._restart_at, self._resolve_at)
        if self._resolve_at != _NEVER:
            return self._resolve_at  # off the grid: a grace is short
        when = self._next_verify
        if self._fallback.reason is not None:
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

    def _resolve_checked(self, *, recheck: bool = False, stamp: Stamp | None = None) -> bool:
        """Re-resolve HEAD and move the watches with it, again while they move (a write
        between the two gets its resolve); False when a watch hit a limit: polling now.

        ``stamp``: taken before the first read; each further read takes its own. Without
        one (a wake-up: a file just changed, so a stamp would be racy) none is taken, and
        the next verification reads (issue 27: no ``lstat`` on an update's path)."""
        try:
            for _ in range(_MAX_REPLANS):
                if not self._replan(self._changed(), recheck=recheck):
                    self._stamp = stamp
                    return True
                recheck, stamp = False, None if stamp is None else take(self._order)
        except OSError as exc:
            if exc.errno not in NO_NOTIFICATION or self._health.mode is not WatchMode.NATIVE:
                raise
            self._fallback.unavailable(exc, time.monotonic())
            self._restart_soon()
            return False
        self._stamp = None
        self.wake()  # still moving: another turn
        return True

    def _verify(self, now: float) -> None:
        """The periodic backstop: identity, then stamps; read HEAD only if they say so."""
        if self.on_verified is not None:  # the daemon's: it sets a time (a failure: the turn's)
            self.on_verified()
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

    def _restart(self, now: float) -> None:
        faults = self._health.faults
        self._restart_at = _NEVER
        self._health.report(False, self._health.mode)
        self._watches.close()
        self._stamp = None
        if self.on_verified is not None:
            self.on_verified()
        identities = {path: identity_of(path) for path in anchors(self._dirs)}
        if None in identities.values():
            self._health.mode = WatchMode.NONE  # checkout gone: HEAD reads unreadable; retried soon
            self._restart_soon(now + self._retry)
            self._changed()
            return
        self._identities = identities
        self._set_plan(self._planner.plan())
        self._health.mode = self._open(now)
        # The first verification spread over a period (a thousand checkouts start together),
        # a period after the start (the watches are fresh), except when polling.
        if self._health.mode is WatchMode.POLLING:
            self._next_verify = now + random.uniform(0.1, 1.0) * self.verify_period  # noqa: S311
        elif self._next_verify == _NEVER:
            self._next_verify = now + random.uniform(1.0, 2.0) * self.verify_period  # noqa: S311
        # Resolve only once the watches exist, so no update falls between the two.
        if self._resolve_checked(stamp=take(self._order)):
            self._health.trust_unless_faulted(faults)  # trusted only when native

    def _open(self, now: float) -> WatchMode:
        """Watch the plan's directories natively if possible; the mode to run in."""
        if self._settings.poll or self._fallback.waiting(now):
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
            self._restart_soon(now + self._retry)
            return WatchMode.NONE
        self._fallback.available()
        return WatchMode.NATIVE

    def _set_plan(self, new: Plan) -> bool:
        changed = new is not self.plan and new != self.plan
        if changed:
            self.plan = new
            self._order = tuple(sorted(new.files))
        return changed

    def _replan(self, chain: Sequence[Path] | None, *, recheck: bool = False) -> bool:
        """Bring plan and watches in line with ``chain``; True if either changed."""
        old = self.plan
        changed = self._set_plan(self._planner.plan(chain))
        if self._health.mode is not WatchMode.NATIVE:
            return changed
        return self._watches.follow(old, self.plan, recheck=recheck) or changed
