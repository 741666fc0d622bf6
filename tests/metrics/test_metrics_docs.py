"""The metrics table in docs/metrics.md names every metric stalewatch exposes, with its type and labels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from stalewatch.core.phases import RestartPhase, RestartState
from stalewatch.core.status import Snapshot, Status
from stalewatch.metrics.families import CheckoutView, build_info, checkout_families, daemon_families
from stalewatch.metrics.tally import CheckoutCounts
from tests.support.metrics import samples, value

pytestmark = pytest.mark.unit

METRICS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
_TYPES = {
    "counter": "counter",
    "gauge": "gauge",
    "histogram": "histogram",
    "stateset": "state set",
    "info": "info",
}


def _table() -> dict[str, tuple[str, set[str]]]:
    """``{metric: (type, labels)}`` from the docs' table."""
    text = METRICS_PAGE.read_text()
    section = text[text.index("## The metrics") : text.index("## For apps without the daemon")]
    rows = {}
    for line in section.splitlines():
        found = re.match(r"\| `(stalewatch_\w+)` \| ([^|]+) \|([^|]*)\|", line)
        if found:
            labels = set(re.findall(r"`(\w+)`", found.group(3)))
            rows[found.group(1)] = (found.group(2).strip(), labels)
    return rows


def _view(status: Status, **extra: object) -> CheckoutView:
    snap = Snapshot(status, Path("/srv/app"), "a" * 40, "b" * 40, 3, 1.0, True, "native")
    return CheckoutView("/srv/app", snap, CheckoutCounts(), **extra)  # type: ignore[arg-type]


class _Everything(Collector):
    def __init__(self, *views: CheckoutView) -> None:
        self.views = views

    def collect(self):  # type: ignore[no-untyped-def]
        yield from checkout_families(list(self.views))
        yield from daemon_families(0, 0, {})
        yield build_info()


def _families(*views: CheckoutView) -> list:  # type: ignore[type-arg]
    return list(_Everything(*views).collect())


def test_the_table_lists_every_metric_with_its_type_and_labels() -> None:
    draining = RestartState(RestartPhase.WAITING, "drain: 2 in flight", "c" * 40, inflight=2)
    full = _view(Status.STALE, hooks=True, restart=draining, processes={"c" * 40: 2})
    exposed = {}
    for family in _families(full):
        labels = {name for sample in family.samples for name in sample.labels if name != "le"}
        suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
        exposed[family.name + suffix] = (_TYPES[family.type], labels)
    table = _table()
    assert set(table) == set(exposed)
    for name, (kind, labels) in exposed.items():
        assert kind in table[name][0], (name, kind, table[name][0])
        assert table[name][1] == labels, (name, labels, table[name][1])


def _count(*views: CheckoutView) -> int:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Everything(*views))
    return len(samples(generate_latest(registry).decode()))


def test_the_series_counts_the_docs_give() -> None:
    daemon = _count()  # no checkout: the daemon's own
    assert daemon == 7
    assert _count(_view(Status.CURRENT)) - daemon == 32
    assert _count(_view(Status.STALE)) - daemon == 33
    assert _count(_view(Status.CURRENT, hooks=True)) - daemon == 32 + 15
    assert _count(_view(Status.CURRENT, restart=RestartState(RestartPhase.IDLE))) - daemon == 32 + 13
    draining = RestartState(RestartPhase.WAITING, "drain: 3 in flight", "c" * 40, inflight=3)
    assert _count(_view(Status.CURRENT, restart=draining)) - daemon == 32 + 14
    processes = {f"{n:040x}": 1 for n in range(8)} | {"other": 4}
    assert _count(_view(Status.CURRENT, processes=processes)) - daemon == 32 + 9 + 1


def test_r8_the_drain_gauge_is_the_count_the_restart_waits_for_and_absent_otherwise() -> None:
    def exposed(state: RestartState) -> float | None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Everything(_view(Status.STALE, restart=state)))
        return value(samples(generate_latest(registry).decode()), "stalewatch_restart_inflight")

    revision = "c" * 40
    assert exposed(RestartState(RestartPhase.WAITING, "drain: 3 in flight", revision, inflight=3)) == 3
    assert exposed(RestartState(RestartPhase.WAITING, "drain: 0 in flight", revision, inflight=0)) == 0
    assert exposed(RestartState(RestartPhase.WAITING, "settle", revision)) is None
    unknown = "drain: unknown in flight (the drain probe has not answered)"
    assert exposed(RestartState(RestartPhase.WAITING, unknown, revision)) is None
