"""The collectors: ``GuardCollector`` (an app's guards) and ``DaemonMetrics`` (the daemon's).

``GuardCollector``, for apps without the daemon (or beside it): everything is read at
scrape time from :meth:`Guard.snapshot`, so the barrier (:meth:`Guard.check`) costs
exactly what it cost before. What only events can tell (events by status, when the
checkout went stale, detection latency, restart outcomes when a daemon with a restart
policy feeds the guard) is counted by subscribers, which run once per change on the
thread that observed it, never on a request's flag read.

``DaemonMetrics`` is the one object the daemon calls when it exposes metrics. The
daemon tells it about what only happens once (an event fanned out, a hook's outcome,
a restart phase, a client connected, dropped or closed); each call is a few integer
updates (:class:`~.tally.Tally`). Everything else is read when a scrape comes, through
:meth:`DaemonMetrics.collect`: each checkout's guard snapshot, restart phase and
registered processes, read with the same thread-safe accessors the daemon's loop uses.
With nobody scraping, metrics cost the daemon those few updates per event and, with a
textfile, one write per ``metrics_interval``. Exposition: :class:`~.server.MetricsServer`
(HTTP, ``metrics_address``) and :class:`~.textfile.TextfileWriter` (``metrics_textfile``),
one thread each.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..core.escaping import printable
from ..core.phases import RestartState
from ..core.status import Event
from ..guard.guard import Guard
from ..server.checkout import Checkout
from ..server.observer import DaemonObserver
from ..server.registry import Registry
from .families import CheckoutView, build_info, checkout_families, daemon_families, processes_by_revision
from .server import MetricsServer
from .tally import Tally, newest_ref_write
from .textfile import TextfileWriter

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


class DaemonMetrics(DaemonObserver, Collector):
    """The daemon's metrics: counts fed by the daemon, the rest read at scrape time.

    Args:
        entries: returns the daemon's checkouts now (a tuple the loop replaces whole).
        registry: the daemon's registered server processes.
        address: ``(host, port)`` to serve ``/metrics`` on, or ``None``.
        textfile: a ``.prom`` file to keep written, or ``None``.
        interval: seconds between textfile writes when nothing changes.
        daemon: the ``daemon`` label every series carries (both routes alike), so that
            several daemons' textfiles merge in one node_exporter and their series in
            one Prometheus job; ``None``: no such label.
    """

    def __init__(
        self,
        entries: Callable[[], Sequence[Checkout]],
        registry: Registry,
        *,
        address: tuple[str, int] | None = None,
        textfile: Path | None = None,
        interval: float = 15.0,
        daemon: str | None = None,
    ) -> None:
        self._entries = entries
        self._daemon = None if daemon is None else printable(daemon)  # a label value
        self._registry = registry
        self.tally = Tally()
        self._errors_logged: set[str] = set()
        self.server: MetricsServer | None = None
        self.textfile: TextfileWriter | None = None
        if address is not None:
            # The HTTP endpoint adds the process' own figures (CPU, memory, descriptors,
            # read from /proc at scrape time), under their standard names. The textfile
            # leaves them out: node_exporter exposes its own process_* series.
            http = CollectorRegistry(auto_describe=False)
            http.register(self)
            ProcessCollector(registry=http)
            self.server = MetricsServer(address[0], address[1], http)
        if textfile is not None:
            self.textfile = TextfileWriter(textfile, lambda: generate_latest(self), interval)
            self.tally.on_change = self.textfile.changed

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Listen and write the textfile once, then start their threads.

        Raises:
            MetricsError: the address cannot be listened on, or the textfile written.
        """
        try:
            if self.server is not None:
                self.server.bind()
            if self.textfile is not None:
                self.textfile.write_now()
        except BaseException:
            self.stop()
            raise
        if self.server is not None:
            self.server.start()
            logger.info("stalewatch: metrics on %s", self.server.url)
        if self.textfile is not None:
            self.textfile.start()
            logger.info("stalewatch: metrics written to %s", printable(str(self.textfile.path)))

    def stop(self) -> None:
        """Stop serving and writing (the textfile is removed). Harmless twice."""
        if self.server is not None:
            self.server.stop()
        if self.textfile is not None:
            self.textfile.stop()

    # -- what the daemon tells (never raises into the daemon) -------------------------------

    def track(self, entry: Checkout) -> None:
        """A checkout begins to be watched (at start, or a reload's new guard)."""
        key, guard = entry.key, entry.guard
        self._safely(lambda: self.tally.track(key, guard.snapshot(), newest_ref_write(guard.binding.dirs)))

    def forget(self, key: str) -> None:
        """A reload stopped watching ``key``."""
        self._safely(lambda: self.tally.forget(key))

    def event(self, entry: Checkout, event: Event) -> None:
        """An event was fanned out to the clients (the loop's thread)."""
        self._safely(lambda: self.tally.seen(entry.key, event, entry.guard.binding.dirs))

    def hook(self, key: str, hook: str, outcome: str) -> None:
        """A hook finished (its runner's thread)."""
        self._safely(lambda: self.tally.hook(key, hook, outcome))

    def restart(self, entry: Checkout, state: RestartState) -> None:
        """A restart phase was published (the loop's thread)."""
        self._safely(lambda: self.tally.restart(entry.key, state))

    def changed(self) -> None:
        """Something a scrape reads changed (health, registrations): refresh the textfile."""
        if self.textfile is not None:
            self.textfile.changed()

    def client_connected(self) -> None:
        self._safely(self.tally.client_connected)

    def client_closed(self) -> None:
        self._safely(self.tally.client_closed)

    def client_dropped(self, reason: str) -> None:
        self._safely(lambda: self.tally.client_dropped(reason))

    def _safely(self, step: Callable[[], object]) -> None:
        # Metrics must never cost the daemon an event, a hook or a client: a bug
        # here is logged once per kind and the daemon goes on.
        try:
            step()
        except Exception as exc:
            self._log_once(exc, "metrics could not count something; serving on")

    def _log_once(self, exc: Exception, what: str) -> None:
        kind = type(exc).__name__
        if kind not in self._errors_logged:  # a kind of failure is logged once, not per event
            self._errors_logged.add(kind)
            logger.error("stalewatch: %s", what, exc_info=exc)

    # -- scrape time --------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """Every family, read now (a scrape's thread, or the textfile writer's)."""
        views = []
        for entry in self._entries():
            try:
                processes = processes_by_revision(p.revision for p in self._registry.processes(entry.key))
                snap, counts = entry.guard.snapshot(), self.tally.counts(entry.key)
                hooks, restart = entry.hooks is not None, entry.restart_state
                views.append(CheckoutView(entry.key, snap, counts, hooks, restart, processes))
            except Exception as exc:  # one checkout's trouble leaves the others exposed
                self._log_once(exc, f"metrics of {printable(entry.key)} could not be read")
        families = [*checkout_families(views), *daemon_families(*self.tally.clients()), build_info()]
        if self._daemon is not None:
            for family in families:  # the daemon's name first on each sample
                family.samples = [
                    s._replace(labels={"daemon": self._daemon, **s.labels}) for s in family.samples
                ]
        yield from families
