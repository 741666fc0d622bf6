"""A reload's course on the loop's thread, from the request (SIGHUP) to systemd's ``READY=1``.

What a reload is, how it is bound off the loop and applied in steps, is :mod:`.reload_plan`;
this is when each of those happens, and what the rest of the daemon hears: systemd
(``RELOADING=1``, then ``READY=1`` whether it was applied or not), the clients (the
new limits), the collector (what a reload stopped or never started is garbage, once).
No turn does unbounded work (issue 17): the binding runs on ``stalewatch-reload``,
and a plan is applied :data:`RELOAD_STEPS_PER_TURN` checkouts a turn at most.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from . import memory
from .checkout import Checkout
from .config import CheckoutConfig, DaemonConfig
from .connections import ClientSet
from .observer import DaemonObserver
from .publisher import Publisher
from .reload_plan import Applier, Binder, Bound
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
        publisher, observer, refresh_view: what the :class:`~.reload_plan.Applier` tells.
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
        self._binder: Binder | None = None  # reading and binding a reload, off the loop
        self._applying: Applier | None = None  # a bound reload, applied a few steps a turn

    @property
    def applying(self) -> bool:
        """A bound reload is being applied: the loop turns again at once."""
        return self._applying is not None

    def request(self) -> None:
        """Reload on the loop's next turn (signal-safe: only sets a flag; the caller wakes the loop)."""
        self._requested = True

    def turn(self) -> None:
        """Start reading a reload, or apply a few more of its steps (bounded: see :mod:`.reload_plan`)."""
        if self._applying is not None:
            self._apply_some(self._applying)
            return
        if not self._requested:
            return
        if self._binder is not None:
            self._binder.cancel()  # a newer SIGHUP: bind that configuration instead
            return
        self._requested = False
        if self._load is None:
            logger.info("stalewatch: SIGHUP: no configuration file to reload")
            return
        self._systemd.reloading()
        self._systemd.changed()
        self._binder = Binder(self._load, self._entries, self.settings, self._make, self._post).start()

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
        self._applying = Applier(plan, self._entries, self._observer, self._publisher, self._refresh_view)
        self._apply_some(self._applying)

    def _apply_some(self, applying: Applier) -> None:
        """Apply the next :data:`RELOAD_STEPS_PER_TURN` steps of the reload; finish it."""
        try:
            applying.run(RELOAD_STEPS_PER_TURN, RELOAD_TURN_BUDGET)
        except Exception:
            self._applying = None  # a bug: never retried every turn (the loop logs it)
            raise
        memory.settle()  # the checkouts it started
        self._systemd.watching()
        if applying.done:
            self._applying = None
            settings = self.settings
            self._clients.configure(settings.max_clients, settings.client_queue, settings.client_buffer)
            logger.info("stalewatch: configuration reloaded: %d checkouts", len(self._entries))
            self._systemd.changed()
            if applying.shrinks:
                memory.reclaim()  # the checkouts it stopped
            self._systemd.reloaded()

    def stop(self) -> None:
        """The daemon stops: a reload being bound stops between two checkouts; one being
        applied stops where it is (its fresh checkouts not started yet: nothing to stop)."""
        if self._binder is not None:
            self._binder.cancel()
            self._binder.join(_BINDER_JOIN)
            self._binder = None
        self._applying = None
