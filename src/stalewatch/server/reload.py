"""A reload (SIGHUP), planned before anything changes: which checkouts stay, come, go.

Every new checkout is bound first, so a bad configuration (a missing checkout, the same
one twice) changes nothing; the server then applies the plan on its loop's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from ..core.errors import DaemonConfigError
from .checkout import Checkout
from .config import CheckoutConfig, DaemonConfig

__all__ = ["AT_START", "ReloadPlan", "plan_reload"]

logger = logging.getLogger(__name__)

AT_START = ("socket", "metrics_address", "metrics_textfile", "metrics_interval")
"""Settings read once, at start: a reload keeps the running ones (and says so)."""


@dataclass(frozen=True)
class ReloadPlan:
    """What a reload does.

    Attributes:
        settings: the new configuration, with the :data:`AT_START` settings kept.
        reused: checkouts whose ``path`` and ``revision`` did not change (keep their
            watcher and loaded revision; their hooks and restart policy are updated).
        updates: the new configuration of each reused checkout, by key.
        fresh: checkouts to start (new, or re-bound), already bound.
    """

    settings: DaemonConfig
    reused: dict[str, Checkout]
    updates: dict[str, CheckoutConfig]
    fresh: dict[str, Checkout]


def plan_reload(
    entries: Mapping[str, Checkout],
    running: DaemonConfig,
    settings: DaemonConfig,
    make: Callable[[CheckoutConfig, int], Checkout],
) -> ReloadPlan:
    """Bind what ``settings`` adds, reuse what it keeps; change nothing that runs.

    Raises:
        DaemonConfigError: a checkout is configured twice.
        BindError: a new checkout cannot be bound.
    """
    reused: dict[str, Checkout] = {}
    updates: dict[str, CheckoutConfig] = {}
    fresh: dict[str, Checkout] = {}
    by_config = {(e.config.path, e.config.revision): e for e in entries.values()}
    for checkout in settings.checkouts:
        old = by_config.get((checkout.path, checkout.revision))
        entry = old if old is not None else make(checkout, 0)
        if entry.key in reused or entry.key in fresh:
            raise DaemonConfigError("checkout", str(checkout.path), f"{entry.key} is configured twice")
        (reused if old is not None else fresh)[entry.key] = entry
        if old is not None:
            updates[entry.key] = checkout
    changed = [key for key in AT_START if getattr(settings, key) != getattr(running, key)]
    if changed and not (changed == ["socket"] and settings.socket is None):
        logger.warning("stalewatch: changed %s take effect only after a restart", ", ".join(changed))
    settings = replace(settings, **{key: getattr(running, key) for key in AT_START})
    return ReloadPlan(settings, reused, updates, fresh)
