"""``GuardCollector``: a guard's metrics in an app's own registry, read at scrape time."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from stalewatch import Guard, StaleError, StalewatchError
from stalewatch.metrics import GuardCollector
from tests.support.metrics import samples, value
from tests.support.recorder import Recorder
from tests.support.repos import Repo, make_repo


def _scrape(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return samples(generate_latest(registry).decode())


def test_a_registered_guard_reports_its_status_and_events(git_repo: Repo, recorder: type[Recorder]) -> None:
    loaded = git_repo.head()
    key = str(git_repo.path.resolve())
    registry = CollectorRegistry()  # auto_describe: the registry calls collect() at register
    with Guard.for_checkout(git_repo.path) as guard:
        assert guard.wait_ready(10)
        collector = GuardCollector(guard)
        registry.register(collector)
        try:
            found = _scrape(registry)
            assert value(found, "stalewatch_stale", checkout=key) == 0
            assert value(found, "stalewatch_watcher_trusted", checkout=key) == 1
            assert value(found, "stalewatch_build_info") == 1
            events = recorder(guard)
            new = git_repo.commit()
            event = events.wait_for("stale", new)
            found = _scrape(registry)  # the collector's subscriber ran before the recorder's
            assert value(found, "stalewatch_status", checkout=key, stalewatch_status="stale") == 1
            assert value(found, "stalewatch_stale_since_timestamp_seconds", checkout=key) == event.at  # type: ignore[attr-defined]
            assert value(found, "stalewatch_events_total", checkout=key, status="stale") == 1
            assert value(found, "stalewatch_detection_latency_seconds_count", checkout=key) == 1
            info = [dict(ls) for n, ls in found if n == "stalewatch_revision_info"]
            assert info == [{"checkout": key, "loaded_revision": loaded, "current_revision": new}]
            assert not any(n.startswith(("stalewatch_restart", "stalewatch_registered")) for n, _ in found)
        finally:
            registry.unregister(collector)
            collector.close()


def test_several_guards_one_per_checkout(tmp_path: Path) -> None:
    one, two = make_repo(tmp_path / "one"), make_repo(tmp_path / "two")
    guards = [Guard.for_checkout(one.path), Guard.for_checkout(two.path)]
    collector = GuardCollector(*guards, build_info=False)
    registry = CollectorRegistry()
    registry.register(collector)
    keys = {dict(ls)["checkout"] for n, ls in _scrape(registry) if n == "stalewatch_stale"}
    assert keys == {str(one.path.resolve()), str(two.path.resolve())}
    with pytest.raises(ValueError, match="one per checkout"):
        collector.add(Guard.for_checkout(one.path / "module.py"))
    collector.remove(guards[0])
    keys = {dict(ls)["checkout"] for n, ls in _scrape(registry) if n == "stalewatch_stale"}
    assert keys == {str(two.path.resolve())}
    collector.close()
    assert _scrape(registry) == {}


def test_the_barrier_is_the_same_function_and_checks_run_while_scraping(git_repo: Repo) -> None:
    """Read at scrape time: registering wraps nothing, and scrapes race checks harmlessly."""
    with Guard.for_checkout(git_repo.path) as guard:
        assert guard.wait_ready(10)
        collector = GuardCollector(guard)
        assert type(guard).check is Guard.check and "check" not in vars(guard)
        registry = CollectorRegistry()
        registry.register(collector)
        stop = threading.Event()
        errors: list[BaseException] = []

        def scrape_forever() -> None:
            while not stop.is_set():
                try:
                    _scrape(registry)
                except BaseException as exc:
                    errors.append(exc)
                    return

        scraper = threading.Thread(target=scrape_forever, name="test-scraper")
        scraper.start()
        try:
            for _ in range(20_000):
                guard.check()
            git_repo.commit()
            with contextlib.suppress(StaleError):
                guard.check(strict=True)
            for _ in range(2_000):
                with contextlib.suppress(StaleError):
                    guard.check()
        finally:
            stop.set()
            scraper.join(timeout=10)
        assert errors == []
        assert value(_scrape(registry), "stalewatch_stale", checkout=str(git_repo.path.resolve())) == 1
        collector.close()


def test_the_public_names_of_stalewatch_metrics_are_pinned() -> None:
    import stalewatch.metrics as metrics

    assert sorted(metrics.__all__) == [
        "DaemonMetrics",
        "DaemonObserver",
        "EXTRA",
        "GuardCollector",
        "MetricsError",
        "MetricsUnavailableError",
        "available",
        "for_daemon",
    ]
    for name in metrics.__all__:
        assert getattr(metrics, name) is not None, name
    assert issubclass(metrics.MetricsUnavailableError, metrics.MetricsError)
    assert issubclass(metrics.MetricsError, StalewatchError)
    with pytest.raises(AttributeError):
        metrics.Nothing  # type: ignore[attr-defined]  # noqa: B018
