"""A reload (SIGHUP): what it does, and its course on the loop's thread, up to systemd's ``READY=1``.

:func:`plan_reload` binds every new checkout (a HEAD read each: about a second per
thousand), so a bad configuration (a missing checkout, the same one twice) changes
nothing; a start binds its checkouts with it too (:func:`.startup.bind`). What the rest of the
daemon hears: systemd (``RELOADING=1``, then ``READY=1`` whether it was applied or
not), the clients (the new limits, a ``removed`` line, the new ``snapshot`` lines), the
observer, the collector (what a reload stopped or never started is garbage, once). No
turn does unbounded work (issue 17): the file is read and the new checkouts bound on a
thread of their own, ``stalewatch-reload``, so the loop keeps serving meanwhile and
obeys a SIGTERM at once (the thread stops between two checkouts); a plan is applied
:data:`RELOAD_STEPS_PER_TURN` checkouts a turn at most: one checkout removed,
re-bound, updated or added per step.

The daemon's heap with thousands of checkouts: Python's cyclic collector walks every
object of the generation it collects, so with ten thousand checkouts (a few hundred
objects each) a full collection holds the GIL for hundreds of milliseconds (issue 17
measured 9-22 ms updates at 1,000 checkouts and 1.3 s at exit). What the daemon keeps
for as long as it watches a checkout is moved out of the collector's sight once it
exists (``gc.freeze()``); when a reload stops checkouts, their objects are garbage the
collector no longer sees: :func:`reclaim` gives it one full look, once, and hands the
freed pages back to the system (glibc keeps them in its arenas otherwise).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..core import forking
from ..core.errors import BindError, DaemonConfigError
from ..watching.watcher import halt
from .checkout import Checkout
from .config import CheckoutConfig, DaemonConfig

if TYPE_CHECKING:
    from .loop import DaemonServer

logger = logging.getLogger(__name__)

RELOAD_STEPS_PER_TURN = 64
"""Checkouts a reload starts, stops, re-binds or updates in one turn at most..."""
RELOAD_TURN_BUDGET = 0.005
"""...and about as many as fit in this many seconds (a start costs about 1 ms)."""
_BINDER_JOIN = 0.5  # seconds a stop waits for the reload thread (it stops between checkouts)
_SETTLE_EVERY = 256  # checkouts bound between two gc.freeze()

AT_START = ("socket", "metrics_address", "metrics_textfile", "metrics_interval", "metrics_daemon")
"""Settings read once, at start: a reload keeps the running ones (and says so)."""
_DEFAULTED = ("socket", "metrics_daemon")  # None in a file: the default resolved at start


@dataclass(frozen=True)
class Bound:
    """A reload's plan, bound before anything changes: what the binding thread hands the loop.

    Attributes:
        settings: the new configuration, with the :data:`AT_START` settings kept
            (``None``: no plan: ``error`` says why, else it was cancelled).
        reused: the new configuration of each checkout whose ``path`` and ``revision``
            did not change, by key (it keeps its watcher and loaded revision; its hooks
            and restart policy are updated).
        fresh: checkouts to start (new, or re-bound), already bound.
        error: a bad configuration (the running one stays).
    """

    settings: DaemonConfig | None = None
    reused: dict[str, CheckoutConfig] = field(default_factory=dict)
    fresh: dict[str, Checkout] = field(default_factory=dict)
    error: Exception | None = None


def plan_reload(
    entries: Mapping[str, Checkout],
    running: DaemonConfig,
    settings: DaemonConfig,
    make: Callable[[CheckoutConfig, int], Checkout],
    cancel: threading.Event | None = None,
) -> Bound:
    """Bind what ``settings`` adds, reuse what it keeps; change nothing that runs.

    ``cancel`` is looked at before each checkout is bound: once set, what was bound so
    far is dropped, never started (an empty :class:`Bound`).

    Raises:
        DaemonConfigError: a checkout is configured twice.
        BindError: a new checkout cannot be bound.
    """
    reused: dict[str, CheckoutConfig] = {}
    fresh: dict[str, Checkout] = {}
    by_config = {(e.config.path, e.config.revision): e for e in entries.values()}
    for number, checkout in enumerate(settings.checkouts, 1):
        if cancel is not None and cancel.is_set():
            return Bound()
        if number % _SETTLE_EVERY == 0:
            gc.freeze()  # thousands of bound checkouts: out of the collector's walks
        old = by_config.get((checkout.path, checkout.revision))
        entry = old if old is not None else make(checkout, 0)
        if entry.key in reused or entry.key in fresh:
            raise DaemonConfigError("checkout", str(checkout.path), f"{entry.key} is configured twice")
        if old is not None:
            reused[entry.key] = checkout
        else:
            fresh[entry.key] = entry
    changed = [
        key
        for key in AT_START
        if getattr(settings, key) != getattr(running, key)
        and not (key in _DEFAULTED and getattr(settings, key) is None)
    ]
    if changed:
        logger.warning("stalewatch: changed %s take effect only after a restart", ", ".join(changed))
    settings = replace(settings, **{key: getattr(running, key) for key in AT_START})
    return Bound(settings, reused, fresh)


def reclaim() -> None:
    """Collect what ``gc.freeze()`` hid and is garbage now, then give the memory back.

    One full collection (its pause is the price of a shrink, paid once, not in every
    later collection), then everything alive is frozen again.
    """
    gc.unfreeze()
    gc.collect()
    forking.prune()  # the stopped owners' at-fork references, dead since the collection
    # glibc keeps freed pages in its arenas (RSS stayed at 240 MB after 10,000 checkouts
    # went): malloc_trim(0) hands them back. musl and macOS have no such call.
    with contextlib.suppress(OSError, AttributeError):
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols: libc's among them
        trim.argtypes = [ctypes.c_size_t]
        trim(0)
    gc.freeze()


class Reloader:
    """A SIGHUP's course on the loop's thread, from the request to ``READY=1``.

    One reload at a time: a newer request while one binds cancels it, and the newer
    configuration is bound once the first has ended.

    Args:
        server: the daemon: its checkouts by key (a plan applied changes them in place),
            how it binds one (on the reload's thread), its inbox (which the :class:`Bound`
            result is posted to), its clients (the new limits, a greeting's size before
            the new snapshots), publisher (a ``removed`` line, the new ``snapshot``
            lines), observer (checkouts that come and go), the view a scrape reads
            (refreshed before clients hear of a change), and systemd.
        load: reads the configuration file (``None``: there is none to reload).
        settings: the configuration running now (:attr:`settings`; a plan's replaces it).
    """

    def __init__(self, server: DaemonServer, load: Callable[[], DaemonConfig] | None, settings: DaemonConfig):
        self.settings = settings
        self._server, self._load = server, load
        self._systemd = server.systemd
        self._requested = False
        self._binder: threading.Thread | None = None  # reading and binding a reload, off the loop
        self._cancel = threading.Event()  # set: the binder stops between two checkouts
        self._plan = Bound()  # the bound reload being applied...
        self._steps: deque[str] = deque()  # ...a few of its checkouts (keys) a turn
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
        args = (self._load, dict(self._server.entries))
        self._binder = threading.Thread(target=self._bind, args=args, name="stalewatch-reload", daemon=True)
        self._binder.start()

    def _bind(self, load: Callable[[], DaemonConfig], entries: dict[str, Checkout]) -> None:
        """On ``stalewatch-reload``: read the configuration, bind what it adds, post the result.

        :attr:`settings` and the cancel event are the loop's, which change neither until
        this has posted.
        """
        try:
            bound = plan_reload(entries, self.settings, load(), self._server.make_entry, self._cancel)
            bound = bound if not self._cancel.is_set() else Bound()
        except (DaemonConfigError, BindError) as exc:
            bound = Bound(error=exc)
        except Exception as exc:  # a bug: the running configuration stays, the loop goes on
            logger.exception("stalewatch: unexpected error while reading the configuration")
            bound = Bound(error=exc)
        self._server.inbox.post(bound)

    def bound(self, bound: Bound) -> None:
        """The reload thread ended: apply its plan, unless a newer SIGHUP came meanwhile."""
        if self._binder is not None:
            self._binder.join(_BINDER_JOIN)  # it has posted: it is ending
        self._binder = None
        if bound.error is not None:
            logger.error("stalewatch: reload failed, keeping the running configuration: %s", bound.error)
        if bound.settings is None or self._requested:
            if not self._requested:
                self._systemd.reloaded()
            reclaim()  # what it bound (frozen as it went) was never started: garbage
            return
        entries, reused, fresh = self._server.entries, bound.reused, bound.fresh
        logging.getLogger().setLevel(bound.settings.log_level.upper())
        self.settings, self._plan = bound.settings, bound
        self._server.clients.burst = 1 + len(reused) + len(fresh)  # before fresh snapshots are queued
        # Removals and re-bindings first, then updates, then additions.
        dropped = [key for key in entries if key not in reused]
        self._steps = deque([*dropped, *reused, *(key for key in fresh if key not in entries)])
        self._shrinks = len(entries) > len(reused) + len(fresh)
        # As at shutdown: the dropped checkouts' watchers halt in one pass (no worker
        # turns them while they wait for their stop, a few a turn: at 10,001 the
        # stops raced their turns), and their hooks' grace periods run side by side.
        halt(w for key in dropped if (w := entries[key].source.watcher) is not None)
        for key in dropped:
            entries[key].request_stop()
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
        gc.freeze()  # the checkouts it started
        self._systemd.watching()
        if not self._steps:
            settings = self.settings
            self._server.clients.configure(
                settings.max_clients, settings.client_queue, settings.client_buffer
            )
            logger.info("stalewatch: configuration reloaded: %d checkouts", len(self._server.entries))
            self._systemd.changed()
            if self._shrinks:
                reclaim()  # the checkouts it stopped
            self._systemd.reloaded()
            self._plan = Bound()

    def _apply(self, batch: list[str]) -> None:
        server, reused, fresh = self._server, self._plan.reused, self._plan.fresh
        entries = server.entries
        old = {key: entries.pop(key) for key in batch if key in entries and key not in reused}
        server.refresh_view()
        added: list[Checkout] = []
        for key in batch:
            if key in reused:
                entries[key].update(reused[key])
                continue
            new = fresh.get(key)
            if key in old:
                old[key].stop()
                if new is None:
                    logger.info("stalewatch: no longer watching %s", key)
                    server.observer.forget(key)
                    server.publisher.removed(key)
                    continue
                new.continue_from(old[key])
            if new is not None:
                entries[key] = new
                server.observer.track(new)
                added.append(new)
        server.refresh_view()
        for entry in added:
            entry.start()
            logger.info("stalewatch: watching %s (loaded %s)", entry.key, entry.guard.loaded_revision)
        server.publisher.snapshots(added)

    def stop(self) -> None:
        """The daemon stops: a reload being bound stops between two checkouts; one being
        applied stops where it is (its fresh checkouts not started yet: nothing to stop)."""
        if self._binder is not None:
            self._cancel.set()
            self._binder.join(_BINDER_JOIN)
            self._binder = None
        self._steps.clear()
