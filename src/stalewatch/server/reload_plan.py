"""What a reload (SIGHUP) does: a :class:`ReloadPlan`, bound before anything changes.

:func:`plan_reload` binds every new checkout (a HEAD read each: about a second per
thousand; :mod:`.reloader` runs it off the loop, and may cancel it between two
checkouts), so a bad configuration (a missing checkout, the same one twice) changes
nothing. The plan is then applied a few :class:`Step` at a time (see :func:`steps`):
one checkout removed, re-bound, updated or added per step.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from ..core.errors import DaemonConfigError
from . import memory
from .checkout import Checkout
from .config import CheckoutConfig, DaemonConfig

__all__ = ["AT_START", "Bound", "Cancelled", "ReloadPlan", "Step", "plan_reload", "steps"]

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
