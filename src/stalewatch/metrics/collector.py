"""``GuardCollector``: a guard's metrics in an application's own Prometheus registry.

For apps without the daemon (or beside it): everything is read at scrape time from
:meth:`Guard.snapshot`, so the barrier (:meth:`Guard.check`) costs exactly what it
cost before. What only events can tell (events by status, when the checkout went
stale, detection latency, restart outcomes when a daemon with a restart policy feeds
the guard) is counted by subscribers, which run once per change on the thread that
observed it, never on a request's flag read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..guard.guard import Guard
from .families import CheckoutView, build_info, checkout_families
from .tally import Tally, newest_ref_write

__all__ = ["GuardCollector"]

logger = logging.getLogger(__name__)


class GuardCollector(Collector):
    """Exposes one or more guards' metrics; register it in a ``CollectorRegistry``.

    Each guard's checkout is a ``checkout`` label: two guards of one checkout would
    expose the same series twice, so the second is refused.

    Example::

        from prometheus_client import REGISTRY, start_http_server
        from stalewatch.metrics import GuardCollector

        guard = Guard.for_module("myapp").start()
        collector = GuardCollector(guard)
        REGISTRY.register(collector)       # read at scrape time; check() is unchanged
        ...
        REGISTRY.unregister(collector)
        collector.close()                  # unsubscribes from the guards

    Args:
        guards: the guards to expose (more with :meth:`add`).
        build_info: also expose ``stalewatch_build_info``.

    Raises:
        ValueError: two guards of the same checkout.
    """

    def __init__(self, *guards: Guard, build_info: bool = True) -> None:
        self._lock = threading.Lock()
        self._tally = Tally()
        self._guards: dict[str, tuple[Guard, Callable[[], object]]] = {}
        self._build_info = build_info
        for guard in guards:
            self.add(guard)

    def add(self, guard: Guard) -> None:
        """Expose ``guard`` too (from its current snapshot on)."""
        key = str(guard.checkout)
        with self._lock:
            if key in self._guards:
                raise ValueError(f"a guard of {key} is already collected; one per checkout")
            self._tally.track(key, guard.snapshot(), newest_ref_write(guard.binding.dirs))
            unsubscribers = [
                guard.subscribe(lambda event: self._tally.seen(key, event, guard.binding.dirs)),
                guard.subscribe_restart(lambda state: self._tally.restart(key, state)),
            ]
            self._guards[key] = (guard, lambda: [unsubscribe() for unsubscribe in unsubscribers])

    def remove(self, guard: Guard) -> None:
        """Stop exposing ``guard`` (harmless when it is not exposed)."""
        key = str(guard.checkout)
        with self._lock:
            found = self._guards.get(key)
            if found is None or found[0] is not guard:
                return
            del self._guards[key]
        found[1]()
        self._tally.forget(key)

    def close(self) -> None:
        """Unsubscribe from every guard (the collector then exposes nothing)."""
        with self._lock:
            guards = [guard for guard, _ in self._guards.values()]
        for guard in guards:
            self.remove(guard)

    def collect(self) -> Iterator[Metric]:
        """The families, from each guard's snapshot now (what a scrape calls)."""
        with self._lock:
            guards = [(key, guard) for key, (guard, _) in self._guards.items()]
        views = []
        for key, guard in guards:
            snap = guard.snapshot()
            views.append(CheckoutView(key, snap, self._tally.counts(key), restart=snap.restart))
        yield from checkout_families(views)
        if self._build_info:
            yield build_info()
