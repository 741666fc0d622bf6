"""What metrics count between scrapes (pure logic: events, stale time, latency, outcomes)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from stalewatch.core.phases import RestartPhase, RestartState
from stalewatch.core.status import Event, Snapshot, Status
from stalewatch.git.refs import find_git_dirs
from stalewatch.metrics.families import processes_by_revision
from stalewatch.metrics.tally import LATENCY_BUCKETS, Histogram, RefWrite, Tally, newest_ref_write
from tests.support.repos import Repo

A, B, C = "a" * 40, "b" * 40, "c" * 40


def _event(status: Status, previous: Status, at: float, current: str = B) -> Event:
    return Event(Path("/srv/app"), status, previous, A, current, 1, at)


def _snapshot(status: Status, changed_at: float) -> Snapshot:
    return Snapshot(status, Path("/srv/app"), A, B, 0, changed_at)


def _write(at: float, inode: int) -> RefWrite:
    return RefWrite(at, ("/srv/app/.git/refs/heads/main", inode, int(at * 1e9), int(at * 1e9)))


def test_stale_since_is_when_the_barrier_began_refusing() -> None:
    tally = Tally()
    tally.track("k", _snapshot(Status.CURRENT, 5.0), None)
    assert tally.counts("k").stale_since is None
    tally.event("k", _event(Status.STALE, Status.CURRENT, 10.0), None)
    tally.event("k", _event(Status.STALE, Status.STALE, 20.0, C), None)  # another commit: still since 10
    tally.event("k", _event(Status.UNREADABLE, Status.STALE, 30.0), None)  # still refusing
    assert tally.counts("k").stale_since == 10.0
    tally.event("k", _event(Status.CURRENT, Status.UNREADABLE, 40.0), None)
    assert tally.counts("k").stale_since is None
    counts = tally.counts("k")
    assert counts.events == {Status.CURRENT: 1, Status.STALE: 2, Status.UNREADABLE: 1, Status.UNTRACKED: 0}


def test_a_guard_that_starts_stale_has_been_since_its_snapshot() -> None:
    tally = Tally()
    tally.track("k", _snapshot(Status.STALE, 5.0), None)  # a configured revision HEAD has left
    tally.event("k", _event(Status.STALE, Status.STALE, 20.0, C), None)
    assert tally.counts("k").stale_since == 5.0
    tally.track("k", _snapshot(Status.CURRENT, 25.0), None)  # a reload re-bound it
    assert tally.counts("k").stale_since is None


def test_latency_is_timed_only_for_an_event_a_new_ref_write_explains() -> None:
    tally = Tally()
    tally.track("k", _snapshot(Status.CURRENT, 0.0), _write(1.0, 100))
    # An event the write seen at start explains nothing (it was there before).
    tally.event("k", _event(Status.STALE, Status.CURRENT, 2.0), _write(1.0, 100), now=2.5)
    assert tally.counts("k").latency.count == 0
    # A new write (a new inode, renamed into place), before the event: timed.
    tally.event("k", _event(Status.CURRENT, Status.STALE, 3.002), _write(3.0, 101), now=3.004)
    histogram = tally.counts("k").latency
    assert histogram.count == 1 and abs(histogram.total - 0.004) < 1e-9
    # Same write again (an adopted restart changes the status, not the ref): not timed.
    tally.event("k", _event(Status.STALE, Status.CURRENT, 4.0), _write(3.0, 101), now=4.1)
    assert tally.counts("k").latency.count == 1
    # A coarse mtime older than the previous event, but a new inode: still this event's.
    tally.event("k", _event(Status.CURRENT, Status.STALE, 5.0), _write(3.9, 102), now=5.001)
    assert tally.counts("k").latency.count == 2


def test_in_a_burst_the_next_write_is_left_for_the_next_event() -> None:
    tally = Tally()
    tally.track("k", _snapshot(Status.CURRENT, 0.0), None)
    # Counted late: the file already holds the write that caused the *next* event.
    tally.event("k", _event(Status.STALE, Status.CURRENT, 1.0), _write(1.5, 7), now=1.6)
    assert tally.counts("k").latency.count == 0
    tally.event("k", _event(Status.STALE, Status.STALE, 1.501, C), _write(1.5, 7), now=1.7)
    histogram = tally.counts("k").latency
    assert histogram.count == 1 and abs(histogram.total - 0.2) < 1e-9


def test_histogram_buckets_are_cumulative_and_end_with_inf() -> None:
    histogram = Histogram()
    for value in (0.0005, 0.001, 0.003, 45.0):
        histogram.observe(value)
    cumulative = dict(histogram.cumulative())
    assert cumulative[0.001] == 2  # le: the bound itself is inside
    assert cumulative[0.005] == 3
    assert cumulative[LATENCY_BUCKETS[-1]] == 3
    assert cumulative[float("inf")] == 4 == histogram.count


def test_restart_outcomes_count_entries_into_a_final_phase() -> None:
    tally = Tally()

    def phase(p: RestartPhase, reason: str | None = None) -> None:
        tally.restart("k", RestartState(p, reason, B))

    for p in (RestartPhase.SCHEDULED, RestartPhase.WAITING, RestartPhase.RESTARTING):
        phase(p)
    phase(RestartPhase.FAILED, "action exited 1")
    phase(RestartPhase.FAILED, "action exited 1 (attempt 3 of 3)")  # the give-up: same outcome
    phase(RestartPhase.SCHEDULED)
    phase(RestartPhase.RESTARTING)
    phase(RestartPhase.CONFIRMED)
    phase(RestartPhase.SCHEDULED)
    phase(RestartPhase.VERIFYING)
    phase(RestartPhase.REFUSED, "verify-failed: exited 1")
    counts = tally.counts("k")
    assert counts.restarts == {"confirmed": 1, "failed": 1, "refused": 1}
    assert counts.restart_actions == 2


def test_label_values_stay_in_their_fixed_sets() -> None:
    tally = Tally()
    tally.hook("k", "on_stale", "success")
    tally.hook("k", "on_stale", "whatever a caller passes")
    tally.hook("k", "not-a-hook", "success")
    assert tally.counts("k").hooks == {("on_stale", "success"): 1}
    tally.client_dropped("slow-client")
    tally.client_dropped("something new")
    _, _, dropped = tally.clients()
    assert dropped == {"bad-request": 0, "slow-client": 1, "too-many-clients": 0, "error": 1}


def test_clients_connected_never_goes_below_zero() -> None:
    tally = Tally()
    tally.client_connected()
    tally.client_closed()
    tally.client_closed()
    assert tally.clients()[:2] == (0, 1)


def test_forget_drops_a_checkout_and_changes_are_announced() -> None:
    changes: list[int] = []
    tally = Tally()
    tally.on_change = lambda: changes.append(1)
    tally.hook("k", "on_stale", "success")
    tally.forget("k")
    assert tally.counts("k").hooks == {}
    assert len(changes) == 2


def test_processes_by_revision_keeps_the_most_common_and_adds_up_the_rest() -> None:
    revisions = [A] * 3 + [B] * 2 + [f"{n:040x}" for n in range(10)]
    shown = processes_by_revision(revisions, limit=3)
    assert shown[A] == 3 and shown[B] == 2
    assert len(shown) == 4 and shown["other"] == 9
    assert sum(shown.values()) == len(revisions)
    assert processes_by_revision([A, B], limit=3) == {A: 1, B: 1}


def test_newest_ref_write_follows_heads_chain(git_repo: Repo) -> None:
    dirs = find_git_dirs(git_repo.path)
    assert dirs is not None
    before = newest_ref_write(dirs)
    assert before is not None and before.identity[0].endswith("refs/heads/main")
    git_repo.commit()
    after = newest_ref_write(dirs)
    assert after is not None and after.identity != before.identity
    git_repo.git("checkout", "-q", "-b", "other")  # writes HEAD (and the new branch's ref)
    moved = newest_ref_write(dirs)
    assert moved is not None and moved.at >= after.at
    for path in (dirs.head_file, *(dirs.common_dir / "refs/heads" / n for n in ("other", "main"))):
        os.utime(path, (1.0, 1.0))
    assert not dirs.packed_refs.exists()
    oldest = newest_ref_write(dirs)
    assert oldest is not None and oldest.at == 1.0
    shutil.rmtree(git_repo.path / ".git")
    assert newest_ref_write(dirs) is None  # nothing readable: never raises
