"""When a registered server tells the daemon its work in flight (R8): the pure bookkeeping."""

from __future__ import annotations

import pytest

from stalewatch.client.inflight import REPORT_INTERVAL, InflightReport

pytestmark = pytest.mark.unit


class Load:
    """A guard's side: its status and its count, and how often the count was read."""

    def __init__(self, count: int = 0) -> None:
        self.count = count
        self.stale = False
        self.reads = 0

    def inflight(self) -> int:
        self.reads += 1
        return self.count


def lines(report: InflightReport, *times: float) -> list[int | None]:
    """What each look at these times sends (its count), ``None`` for nothing."""
    sent = [report.look(t) for t in times]
    return [None if line is None else line["inflight"] for line in sent]


def test_r8_the_registration_carries_the_count_and_nothing_follows_while_current() -> None:
    load = Load(3)
    report = InflightReport("/srv/app", load)
    assert report.registering(offered=True) == 3
    assert report.enabled and not report.matters()
    load.count = 7
    assert lines(report, 1.0, 2.0, 3.0) == [None, None, None]
    assert report.due() is None  # the client thread need not wake for it
    assert load.reads == 1  # the counters are not read while current: only at registration


def test_r8_a_coming_restart_sends_the_count_at_once_then_each_change_coalesced() -> None:
    load = Load(2)
    report = InflightReport("/srv/app", load)
    report.registering(offered=True)
    load.count = 5
    report.coming = True
    assert report.due() == 0.0  # due now
    line = report.look(10.0)
    assert line == {"type": "inflight", "checkout": "/srv/app", "inflight": 5}
    assert report.due() == pytest.approx(10.0 + REPORT_INTERVAL)
    load.count = 4
    load.count = 3
    assert lines(report, 10.05) == [None]  # within the interval: not even read
    assert lines(report, 10.1, 10.15, 10.2) == [3, None, None]  # two changes, one line
    assert lines(report, 10.3) == [None]  # unchanged: nothing


def test_r8_a_stale_guard_reports_before_the_daemon_announces_anything() -> None:
    load = Load(1)
    report = InflightReport("/srv/app", load)
    report.registering(offered=True)
    load.count = 2
    load.stale = True  # the process saw the commit first (a polling daemon)
    assert report.matters()
    assert lines(report, 5.0) == [2]


def test_r8_one_last_look_once_it_stops_mattering_then_silence() -> None:
    load = Load(4)
    report = InflightReport("/srv/app", load)
    report.registering(offered=True)
    report.coming = True
    assert lines(report, 1.0) == [4]  # as registered, but told: a count read after the news
    assert lines(report, 1.1) == [None]  # unchanged: nothing more
    report.coming = False  # confirmed or refused: not coming any more
    load.count = 0
    assert report.due() == pytest.approx(1.1 + REPORT_INTERVAL)
    assert lines(report, 1.25) == [0]  # the last look says where it ended
    load.count = 9
    assert report.due() is None
    assert lines(report, 2.0, 3.0) == [None, None]


def test_r8_a_daemon_without_the_feature_gets_no_count_and_no_line() -> None:
    load = Load(6)
    report = InflightReport("/srv/app", load)
    assert report.registering(offered=False) == 0
    report.coming = True
    load.stale = True
    assert not report.matters() and report.due() is None
    assert lines(report, 1.0, 2.0) == [None, None]
    assert load.reads == 0


def test_r8_nothing_after_a_refused_registration_or_a_lost_connection() -> None:
    load = Load(1)
    report = InflightReport("/srv/app", load)
    report.registering(offered=True)
    report.coming = True
    report.refused()
    load.count = 2
    assert lines(report, 1.0) == [None]
    report.registering(offered=True)  # a new connection registers afresh
    assert report.coming is True  # (until the daemon's next restart line says otherwise)
    report.lost()
    assert (report.enabled, report.coming) == (False, False)
    assert lines(report, 2.0) == [None]


def test_r8_without_a_guard_nothing_is_counted() -> None:
    report = InflightReport("/srv/app", None)
    assert report.registering(offered=True) == 0
    report.coming = True
    assert lines(report, 1.0) == [None] and report.due() is None


class Broken:
    def __init__(self) -> None:
        self.answer: object = 1

    @property
    def stale(self) -> bool:
        raise RuntimeError("the application's status failed")

    def inflight(self) -> int:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer  # type: ignore[return-value]


def test_r8_a_failing_or_odd_count_never_breaks_the_report_nor_breaks_the_protocol() -> None:
    work = Broken()
    report = InflightReport("/srv/app", work)
    assert report.registering(offered=True) == 1
    assert not report.matters()  # a status that raises is read as not stale
    report.coming = True
    work.answer = RuntimeError("counter failed")
    assert lines(report, 1.0) == [1]  # the last count stands (told: the first look)
    assert lines(report, 1.5) == [None]
    work.answer = 10**12
    assert lines(report, 2.0) == [1_000_000_000]  # the protocol's bound, not a bad request
    work.answer = -5
    assert lines(report, 3.0) == [0]
    work.answer = "many"
    assert lines(report, 4.0) == [None]
