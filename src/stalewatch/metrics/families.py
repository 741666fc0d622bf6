"""The metric families stalewatch exposes: every name, type, label and help text, here only.

Built at scrape time from :class:`CheckoutView` values (a guard's snapshot plus its
counts) by :func:`checkout_families`, and daemon-wide by :func:`daemon_families`.
Names follow Prometheus' conventions: the ``stalewatch_`` prefix, ``_total`` on
counters, ``_seconds`` and Unix timestamps in seconds, ``_info`` for the one metric
labelled by revisions. Every label takes values from a fixed set, except
``checkout`` (one per watched checkout) and the revisions, which appear only on
``stalewatch_revision_info`` (one series per checkout at a time) and
``stalewatch_registered_processes`` (bounded by :data:`MAX_REVISIONS`): a thousand
commits leave the number of series where it was.
"""

from __future__ import annotations

import collections
import itertools
import platform
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily as Counter
from prometheus_client.core import GaugeMetricFamily as Gauge
from prometheus_client.core import HistogramMetricFamily as Histogram
from prometheus_client.core import InfoMetricFamily as Info
from prometheus_client.core import StateSetMetricFamily as StateSet
from prometheus_client.metrics_core import Metric

from ..core.escaping import printable
from ..core.phases import RestartPhase, RestartState
from ..core.status import Snapshot, Status, WatchMode
from ..core.version import __version__
from .tally import DROP_REASONS, HOOK_OUTCOMES, HOOKS, RESTART_OUTCOMES, CheckoutCounts

MAX_REVISIONS = 8
"""Revisions of registered processes shown one by one per checkout; the rest add up
under ``revision="other"``. A host runs one or two (old and new, during a restart);
the registry itself is bounded by ``max_clients``."""


@dataclass(frozen=True)
class CheckoutView:
    """What a scrape reports for one checkout.

    Attributes:
        key: the checkout as the daemon (or the app) names it; the ``checkout`` label.
        snapshot: the guard's snapshot, taken at scrape time.
        counts: the checkout's counts (a copy).
        hooks: whether the checkout has hooks (its hook series are then all present).
        restart: the restart sequence's phase; ``None`` without a restart policy.
        processes: registered processes by revision (the daemon); ``None``: not known.
    """

    key: str
    snapshot: Snapshot
    counts: CheckoutCounts
    hooks: bool = False
    restart: RestartState | None = None
    processes: dict[str, int] | None = None


def processes_by_revision(revisions: Iterable[str], limit: int = MAX_REVISIONS) -> dict[str, int]:
    """``{revision: processes}``, the ``limit`` most common first, the rest as ``other``."""
    ranked = sorted(collections.Counter(revisions).items(), key=lambda item: (-item[1], item[0]))
    shown = dict(ranked[:limit])
    rest = sum(count for _, count in ranked[limit:])
    if rest:
        shown["other"] = rest
    return shown


def build_info() -> Metric:
    version = {"version": __version__, "python_version": platform.python_version()}
    return Info("stalewatch_build", "stalewatch's version and the Python running it.", value=version)


def checkout_families(views: Sequence[CheckoutView]) -> list[Metric]:  # noqa: PLR0915 (a table)
    """The per-checkout families (labelled ``checkout``), for the daemon and for apps."""
    families: dict[str, Metric] = {}

    def family(kind: Callable[..., Metric], name: str, doc: str, *labels: str) -> Any:
        families[name] = kind(f"stalewatch_{name}", doc, labels=["checkout", *labels])
        return families[name]

    status = family(StateSet, "status", "The checkout's status; one state is 1.")
    stale = family(
        Gauge,
        "stale",
        "1 while the barrier refuses (status stale or unreadable: the loaded code is not HEAD's).",
    )
    since = family(
        Gauge,
        "stale_since_timestamp_seconds",
        "Unix time when the checkout became stale or unreadable; absent while it is not.",
    )
    revision = family(
        Info, "revision", "The loaded revision and HEAD's current revision (empty when unknown)."
    )
    trusted = family(
        Gauge,
        "watcher_trusted",
        "1 while the watcher's flag is trusted (notifications live); 0: every check re-reads HEAD.",
    )
    mode = family(StateSet, "watcher_mode", "How changes are noticed; one state is 1.")
    events = family(Counter, "events", "Changes of status or current revision, by new status.", "status")
    latency = family(
        Histogram,
        "detection_latency_seconds",
        "From the newest write of HEAD, a ref on its chain or packed-refs to the event being counted.",
    )
    base = len(families)
    hooks = family(Counter, "hook_runs", "Hook runs, by hook and outcome.", "hook", "outcome")
    with_hooks = len(families)
    restarts = family(
        Counter, "restarts", "Automatic restart sequences that ended confirmed, failed or refused.", "outcome"
    )
    actions = family(Counter, "restart_actions", "Restart actions run (attempts).")
    phase = family(StateSet, "restart_phase", "The automatic restart's current phase; one state is 1.")
    phase_since = family(
        Gauge,
        "restart_phase_since_timestamp_seconds",
        "Unix time when the automatic restart entered its current phase.",
    )
    draining = family(
        Gauge,
        "restart_inflight",
        "Work in flight the automatic restart waits for (R8), summed over the servers; "
        "absent while it does not drain, or cannot tell.",
    )
    with_restart = len(families)
    processes = family(
        Gauge,
        "registered_processes",
        f"Server processes registered with the daemon, by loaded revision (the {MAX_REVISIONS} most "
        "common; the rest as other).",
        "revision",
    )
    behind = family(
        Gauge,
        "stale_processes",
        "Registered server processes whose loaded revision is not HEAD's current revision.",
    )
    for view in views:
        # A path may hold surrogate escapes or control characters the exposition cannot encode.
        key, snap, counts = [printable(view.key)], view.snapshot, view.counts
        status.add_metric(key, {s.value: s is snap.status for s in Status})
        stale.add_metric(key, float(snap.status.blocks))
        if snap.status.blocks:
            since.add_metric(key, snap.changed_at if counts.stale_since is None else counts.stale_since)
        revisions = {"loaded_revision": snap.loaded_revision, "current_revision": snap.current_revision}
        revision.add_metric(key, {name: rev or "" for name, rev in revisions.items()})
        trusted.add_metric(key, float(snap.trusted))
        mode.add_metric(key, {m.value: m is snap.mode for m in WatchMode})
        for s in Status:
            events.add_metric([*key, s.value], counts.events.get(s, 0))
        # repr: 0.001 -> "0.001", 1.0 -> "1.0", what le= labels look like
        buckets = [("+Inf" if b == float("inf") else repr(b), n) for b, n in counts.latency.cumulative()]
        latency.add_metric(key, buckets, counts.latency.total)
        if view.hooks:
            for hook, outcome in itertools.product(HOOKS, HOOK_OUTCOMES):
                hooks.add_metric([*key, hook, outcome], counts.hooks.get((hook, outcome), 0))
        if view.restart is not None:
            for outcome in RESTART_OUTCOMES:
                restarts.add_metric([*key, outcome], counts.restarts.get(outcome, 0))
            actions.add_metric(key, counts.restart_actions)
            phase.add_metric(key, {p.value: p is view.restart.phase for p in RestartPhase})
            phase_since.add_metric(key, view.restart.at)
            if view.restart.inflight is not None:
                draining.add_metric(key, view.restart.inflight)
        if view.processes is not None:
            for rev, count in view.processes.items():
                processes.add_metric([*key, rev], count)
            behind.add_metric(
                key, sum(n for rev, n in view.processes.items() if rev != snap.current_revision)
            )
    made = list(families.values())
    shown = made[:base]
    if any(view.hooks for view in views):
        shown += made[base:with_hooks]
    if any(view.restart is not None for view in views):
        shown += made[with_hooks:with_restart]
    if any(view.processes is not None for view in views):
        shown += made[with_restart:]
    return shown


def daemon_families(connected: int, connections: int, dropped: dict[str, int]) -> list[Metric]:
    """The daemon-wide families: its socket clients."""
    clients = "Clients connected to the daemon's socket (a dropped one until it is closed)."
    drops = Counter(
        "stalewatch_clients_dropped_total",
        "Clients the daemon dropped or refused, by reason.",
        labels=["reason"],
    )
    for reason in DROP_REASONS:
        drops.add_metric([reason], dropped.get(reason, 0))
    return [
        Gauge("stalewatch_clients", clients, value=connected),
        Counter("stalewatch_client_connections_total", "Client connections accepted.", value=connections),
        drops,
    ]
