"""A reload's course on the loop's thread, from the request (SIGHUP) to systemd's ``READY=1``.

What a reload does is :mod:`.reload_plan`; this is when each of those happens, and what
the rest of the daemon hears: systemd (``RELOADING=1``, then ``READY=1`` whether it was
applied or not), the clients (the new limits, a ``removed`` line, the new ``snapshot``
lines), the observer, the collector (what a reload stopped or never started is garbage,
once). No turn does unbounded work (issue 17): the file is read and the new checkouts
bound on a thread of their own, ``stalewatch-reload``, so the loop keeps serving
meanwhile and obeys a SIGTERM at once (the thread stops between two checkouts); a plan
is applied :data:`RELOAD_STEPS_PER_TURN` checkouts a turn at most.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from ..core.errors import BindError, DaemonConfigError
from ..watching.watcher import halt
from . import memory
from .checkout import Checkout
from .config import CheckoutConfig, DaemonConfig
from .connections import ClientSet
from .observer import DaemonObserver
from .publisher import Publisher
from .reload_plan import Bound, Cancelled, Step, plan_reload, steps
from .supervision import SystemdNotifier

__all__ = ["RELOAD_STEPS_PER_TURN", "RELOAD_TURN_BUDGET", "Reloader"]

logger = logging.getLogger(__name__)

RELOAD_STEPS_PER_TURN = 64
"""Checkouts a reload starts, stops, re-binds or updates in one turn at most..."""
RELOAD_TURN_BUDGET = 0.005
"""...and about as many as fit in this many seconds (a start costs about 1 ms)."""
_BINDER_JOIN = 0.5  # seconds a stop waits for the reload thread (it stops between checkouts)


class Reloader:
    """A SIGHUP's course on the loop's thread, from the request to ``READY=1``.

    One reload at a time: a newer request while one binds cancels it, and the newer
    configuration is bound once the first has ended.

    Args:
        load: reads the configuration file (``None``: there is none to reload).
        settings: the configuration running now (:attr:`settings`; a plan's replaces it).
        entries: the daemon's checkouts by key (a plan applied changes them in place).
        make: binds one new checkout (on the reload's thread).
        post: hands the loop the :class:`~.reload_plan.Bound` result (from the reload's thread).
        clients: take the new limits (a greeting's size before the new snapshots).
        publisher: tells the clients (a ``removed`` line, the new ``snapshot`` lines).
        observer: told of checkouts that come and go (metrics).
        refresh_view: makes what a scrape reads agree with ``entries``; called before
            clients hear of a change.
        systemd: told of the reload, and of the checkouts it changed.
    """

    def __init__(
        self,
        load: Callable[[], DaemonConfig] | None,
        settings: DaemonConfig,
        entries: dict[str, Checkout],
        make: Callable[[CheckoutConfig, int], Checkout],
        post: Callable[[Bound], None],
        *,
        clients: ClientSet,
        publisher: Publisher,
        observer: DaemonObserver,
        refresh_view: Callable[[], None],
        systemd: SystemdNotifier,
    ) -> None:
        self.settings = settings
        self._load, self._entries, self._make, self._post = load, entries, make, post
        self._clients, self._publisher, self._observer = clients, publisher, observer
        self._refresh_view = refresh_view
        self._systemd = systemd
        self._requested = False
        self._binder: threading.Thread | None = None  # reading and binding a reload, off the loop
        self._cancel = threading.Event()  # set: the binder stops between two checkouts
        self._steps: deque[Step] = deque()  # a bound reload's, applied a few a turn
        self._per_step = 0.0  # seconds one step took last time (0: not measured yet)
        self._shrinks = False  # the plan stops more checkouts than it starts (memory to give back)

    @property
    def applying(self) -> bool:
        """A bound reload is being applied: the loop turns again at once."""
        return bool(self._steps)

    def request(self) -> None:
        """Reload on the loop's next turn (signal-safe: only sets a flag; the caller wakes the loop)."""
        self._requested = True

    def turn(self) -> None:
        """Start reading a reload, or apply a few more of its steps."""
        if self._steps:
            self._apply_some()
            return
        if not self._requested:
            return
        if self._binder is not None:
            self._cancel.set()  # a newer SIGHUP: bind that configuration instead
            return
        self._requested = False
        if self._load is None:
            logger.info("stalewatch: SIGHUP: no configuration file to reload")
            return
        self._systemd.reloading()
        self._systemd.changed()
        self._cancel.clear()
        # A copy of the entries: the loop applies no plan while the thread binds.
        args = (self._load, dict(self._entries))
        self._binder = threading.Thread(target=self._bind, args=args, name="stalewatch-reload", daemon=True)
        self._binder.start()

    def _bind(self, load: Callable[[], DaemonConfig], entries: dict[str, Checkout]) -> None:
        """On ``stalewatch-reload``: read the configuration, bind what it adds, post the result.

        :attr:`settings` and the cancel event are the loop's, which change neither until
        this has posted.
        """
        result = Bound(None)
        try:
            plan = plan_reload(entries, self.settings, load(), self._make, self._cancel)
            result = Bound(plan if not self._cancel.is_set() else None)
        except Cancelled:
            pass
        except (DaemonConfigError, BindError) as exc:
            result = Bound(None, exc)
        except Exception as exc:  # a bug: the running configuration stays, the loop goes on
            logger.exception("stalewatch: unexpected error while reading the configuration")
            result = Bound(None, exc)
        self._post(result)

    def bound(self, bound: Bound) -> None:
        """The reload thread ended: apply its plan, unless a newer SIGHUP came meanwhile."""
        if self._binder is not None:
            self._binder.join(_BINDER_JOIN)  # it has posted: it is ending
        self._binder = None
        if bound.error is not None:
            logger.error("stalewatch: reload failed, keeping the running configuration: %s", bound.error)
        if bound.plan is None or self._requested:
            if not self._requested:
                self._systemd.reloaded()
            memory.reclaim()  # what it bound (settled as it went) was never started: garbage
            return
        plan = bound.plan
        logging.getLogger().setLevel(plan.settings.log_level.upper())
        self.settings = plan.settings
        self._clients.burst = 1 + len(plan.reused) + len(plan.fresh)  # before fresh snapshots are queued
        self._steps = deque(steps(plan, self._entries))
        self._shrinks = len(self._entries) > len(plan.reused) + len(plan.fresh)
        dropped = [step.old for step in self._steps if step.old is not None and step.config is None]
        # As at shutdown: the dropped checkouts' watchers halt in one pass (no worker
        # turns them while they wait for their stop, a few a turn: at 10,001 the
        # stops raced their turns), and their hooks' grace periods run side by side.
        halt(w for old in dropped if (w := old.source.watcher) is not None)
        for old in dropped:
            old.request_stop()
        self._apply_some()

    def _apply_some(self) -> None:
        """Apply the next steps: at most :data:`RELOAD_STEPS_PER_TURN`, and about as many
        as the last ones took to fill :data:`RELOAD_TURN_BUDGET`; finish the reload."""
        per_step = self._per_step
        size = max(1, min(RELOAD_STEPS_PER_TURN, int(RELOAD_TURN_BUDGET / per_step))) if per_step else 1
        batch = [self._steps.popleft() for _ in range(min(size, len(self._steps)))]
        began = time.monotonic()
        try:
            self._apply(batch)
        except Exception:
            self._steps.clear()  # a bug: never retried every turn (the loop logs it)
            raise
        if batch:
            self._per_step = max(1e-6, (time.monotonic() - began) / len(batch))
        memory.settle()  # the checkouts it started
        self._systemd.watching()
        if not self._steps:
            settings = self.settings
            self._clients.configure(settings.max_clients, settings.client_queue, settings.client_buffer)
            logger.info("stalewatch: configuration reloaded: %d checkouts", len(self._entries))
            self._systemd.changed()
            if self._shrinks:
                memory.reclaim()  # the checkouts it stopped
            self._systemd.reloaded()

    def _apply(self, batch: list[Step]) -> None:
        for step in batch:
            if step.old is not None and step.config is None:
                del self._entries[step.key]
        self._refresh_view()
        added: list[Checkout] = []
        for step in batch:
            if step.config is not None and step.old is not None:
                step.old.update(step.config)
                continue
            if step.old is not None:
                step.old.stop()
                if step.new is None:
                    logger.info("stalewatch: no longer watching %s", step.key)
                    self._observer.forget(step.key)
                    self._publisher.removed(step.key)
                    continue
                step.new.continue_from(step.old)
            if step.new is not None:
                self._entries[step.key] = step.new
                self._observer.track(step.new)
                added.append(step.new)
        self._refresh_view()
        for entry in added:
            entry.start()
            logger.info("stalewatch: watching %s (loaded %s)", entry.key, entry.guard.loaded_revision)
        self._publisher.snapshots(added)

    def stop(self) -> None:
        """The daemon stops: a reload being bound stops between two checkouts; one being
        applied stops where it is (its fresh checkouts not started yet: nothing to stop)."""
        if self._binder is not None:
            self._cancel.set()
            self._binder.join(_BINDER_JOIN)
            self._binder = None
        self._steps.clear()
