"""A reload (SIGHUP): read and bound off the loop, then applied on it in bounded steps.

Reading the file and binding every new checkout (a HEAD read each: about a second per
thousand) happen on a thread of their own, ``stalewatch-reload``, so the loop keeps
serving meanwhile and obeys a SIGTERM at once: :meth:`Binder.cancel` stops the thread
between two checkouts. Every new checkout is bound before anything changes, so a bad
configuration (a missing checkout, the same one twice) changes nothing. The loop then
applies the plan a few :class:`Step` at a time (see :func:`steps`), each turn: one
checkout removed, re-bound, updated or added per step.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from ..core.errors import BindError, DaemonConfigError
from ..watching.watcher import halt
from . import memory
from .checkout import Checkout
from .config import CheckoutConfig, DaemonConfig
from .observer import DaemonObserver
from .publisher import Publisher

__all__ = [
    "AT_START",
    "Applier",
    "Binder",
    "Bound",
    "Cancelled",
    "ReloadPlan",
    "Step",
    "plan_reload",
    "steps",
]

logger = logging.getLogger(__name__)

_SETTLE_EVERY = 256  # checkouts bound between two memory.settle()

AT_START = ("socket", "metrics_address", "metrics_textfile", "metrics_interval", "metrics_daemon")
"""Settings read once, at start: a reload keeps the running ones (and says so)."""
_DEFAULTED = ("socket", "metrics_daemon")  # None in a file: the default resolved at start


class Cancelled(Exception):
    """A reload's binding was cancelled (a stop, or a newer SIGHUP)."""


@dataclass(frozen=True)
class ReloadPlan:
    """What a reload does.

    Attributes:
        settings: the new configuration, with the :data:`AT_START` settings kept.
        reused: the new configuration of each checkout whose ``path`` and ``revision``
            did not change, by key (it keeps its watcher and loaded revision; its hooks
            and restart policy are updated).
        fresh: checkouts to start (new, or re-bound), already bound.
    """

    settings: DaemonConfig
    reused: dict[str, CheckoutConfig]
    fresh: dict[str, Checkout]


def plan_reload(
    entries: Mapping[str, Checkout],
    running: DaemonConfig,
    settings: DaemonConfig,
    make: Callable[[CheckoutConfig, int], Checkout],
    cancel: threading.Event | None = None,
) -> ReloadPlan:
    """Bind what ``settings`` adds, reuse what it keeps; change nothing that runs.

    Raises:
        Cancelled: ``cancel`` was set (looked at before each checkout is bound: what
            was bound so far is dropped, never started).
        DaemonConfigError: a checkout is configured twice.
        BindError: a new checkout cannot be bound.
    """
    reused: dict[str, CheckoutConfig] = {}
    fresh: dict[str, Checkout] = {}
    by_config = {(e.config.path, e.config.revision): e for e in entries.values()}
    for number, checkout in enumerate(settings.checkouts, 1):
        if cancel is not None and cancel.is_set():
            raise Cancelled
        if number % _SETTLE_EVERY == 0:
            memory.settle()  # thousands of bound checkouts: out of the collector's walks
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
    return ReloadPlan(settings, reused, fresh)


@dataclass(frozen=True)
class Step:
    """One checkout's part of applying a plan, on the loop's thread.

    ``old`` alone: stop watching it. ``old`` and ``new``: ``new`` re-binds it (its
    generations go on from ``old``'s). ``new`` alone: start watching it. ``config``:
    ``old`` stays, with this configuration (hooks, restart policy).
    """

    key: str
    old: Checkout | None = None
    new: Checkout | None = None
    config: CheckoutConfig | None = None


def steps(plan: ReloadPlan, entries: Mapping[str, Checkout]) -> list[Step]:
    """The plan as steps: removals and re-bindings first, then updates, then additions."""
    out = [
        Step(key, old=entry, new=plan.fresh.get(key))
        for key, entry in entries.items()
        if key not in plan.reused
    ]
    out += [Step(key, old=entries[key], config=config) for key, config in plan.reused.items()]
    out += [Step(key, new=entry) for key, entry in plan.fresh.items() if key not in entries]
    return out


@dataclass(frozen=True)
class Bound:
    """What the binding thread hands the loop when it ends.

    ``plan`` to apply; else ``error`` (a bad configuration: the running one stays), or
    neither: it was cancelled.
    """

    plan: ReloadPlan | None
    error: Exception | None = None


class Binder:
    """Reads the configuration and binds its new checkouts on ``stalewatch-reload``.

    Args:
        load: reads the configuration file (raises ``DaemonConfigError``).
        entries: the checkouts watched now (a copy the loop does not change meanwhile:
            no plan is applied while a binder runs).
        running: the configuration running now.
        make: binds one new checkout (raises ``BindError``).
        done: called once, on the binder's thread, with the :class:`Bound` result.
    """

    def __init__(
        self,
        load: Callable[[], DaemonConfig],
        entries: Mapping[str, Checkout],
        running: DaemonConfig,
        make: Callable[[CheckoutConfig, int], Checkout],
        done: Callable[[Bound], None],
    ) -> None:
        self._load = load
        self._entries = dict(entries)
        self._running = running
        self._make = make
        self._done = done
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stalewatch-reload", daemon=True)

    def start(self) -> Binder:
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Stop between two checkouts (the result is then a :class:`Bound` with neither)."""
        self._cancel.set()

    def join(self, timeout: float) -> None:
        """Wait for the thread (it may still run after: binding one slow checkout)."""
        self._thread.join(timeout)

    def _run(self) -> None:
        result = Bound(None)
        try:
            settings = self._load()
            plan = plan_reload(self._entries, self._running, settings, self._make, self._cancel)
            result = Bound(plan if not self._cancel.is_set() else None)
        except Cancelled:
            pass
        except (DaemonConfigError, BindError) as exc:
            result = Bound(None, exc)
        except Exception as exc:  # a bug: the running configuration stays, the loop goes on
            logger.exception("stalewatch: unexpected error while reading the configuration")
            result = Bound(None, exc)
        self._done(result)


class Applier:
    """Applies a bound plan on the loop's thread, a few steps per turn (see :func:`steps`).

    Args:
        plan: the bound reload.
        entries: the daemon's checkouts, by key (changed in place).
        observer: told of checkouts that come and go (metrics).
        publisher: tells the clients (a ``removed`` line, the new ``snapshot`` lines).
        refresh_view: makes what a scrape reads agree with ``entries``; called before
            clients hear of a change.

    Attributes:
        shrinks: the plan stops more checkouts than it starts (memory to give back).
    """

    def __init__(
        self,
        plan: ReloadPlan,
        entries: dict[str, Checkout],
        observer: DaemonObserver,
        publisher: Publisher,
        refresh_view: Callable[[], None],
    ) -> None:
        self._entries = entries
        self._observer = observer
        self._publisher = publisher
        self._refresh_view = refresh_view
        self._steps = deque(steps(plan, entries))
        self._per_step = 0.0  # seconds one step took last time (0: not measured yet)
        self.shrinks = len(entries) > len(plan.reused) + len(plan.fresh)
        dropped = [step.old for step in self._steps if step.old is not None and step.config is None]
        # As at shutdown: the dropped checkouts' watchers halt in one pass (no worker
        # turns them while they wait for their stop, a few a turn: at 10,001 the
        # stops raced their turns), and their hooks' grace periods run side by side.
        halt(w for old in dropped if (w := old.source.watcher) is not None)
        for old in dropped:
            old.request_stop()

    @property
    def done(self) -> bool:
        return not self._steps

    def run(self, limit: int, budget: float) -> None:
        """Apply the next steps: at most ``limit``, and about as many as the last ones
        took to fill ``budget`` seconds (starting a watcher costs about a millisecond)."""
        size = max(1, min(limit, int(budget / self._per_step))) if self._per_step else 1
        batch = [self._steps.popleft() for _ in range(min(size, len(self._steps)))]
        began = time.monotonic()
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
        if batch:
            self._per_step = max(1e-6, (time.monotonic() - began) / len(batch))
