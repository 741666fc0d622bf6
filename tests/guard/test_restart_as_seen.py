"""What a guard tells of a daemon's restart when it saw a commit first (R7): pure logic."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalewatch.core.phases import RestartPhase, RestartState
from stalewatch.core.refusal import Refusal
from stalewatch.core.status import Snapshot, Status
from stalewatch.guard.restart_as_seen import restart_as_seen

pytestmark = pytest.mark.unit

A, B, C = "a" * 40, "b" * 40, "c" * 40
NOW = 1_000.0


def seen(status: Status = Status.STALE, current: str | None = B) -> Snapshot:
    """This process loaded A; HEAD names ``current`` (it saw the move at 990)."""
    return Snapshot(status, Path("/srv/app"), A, current, 3, 990.0)


def test_r7_an_idle_daemon_that_has_not_seen_the_commit_yet_means_a_restart_is_pending() -> None:
    idle = RestartState(RestartPhase.IDLE, estimate=2.5, at=900.0)
    state = restart_as_seen(idle, seen(), NOW)
    assert state == RestartState(RestartPhase.SCHEDULED, revision=B, retry_after=2.5, at=990.0, estimate=2.5)
    assert state is not None and Refusal("stale", restart=state).restart_fields() == {
        "restart_scheduled": True,
        "retry_after": 3,
        "restart_phase": "scheduled",
    }


def test_r7_a_confirmed_restart_onto_the_loaded_revision_is_not_the_news() -> None:
    confirmed = RestartState(RestartPhase.CONFIRMED, revision=A, estimate=4.0, earliest=NOW + 20.5)
    state = restart_as_seen(confirmed, seen(), NOW)
    assert state is not None
    assert (state.phase, state.revision) == (RestartPhase.SCHEDULED, B)
    assert state.retry_after == 4.0 + 20.5  # the minimum interval's wait included
    assert Refusal("stale", restart=state).retry_after == 25


def test_r7_a_past_earliest_adds_nothing_and_no_estimate_gives_no_retry_after() -> None:
    past = RestartState(RestartPhase.IDLE, estimate=3.0, earliest=NOW - 5)
    assert restart_as_seen(past, seen(), NOW).retry_after == 3.0  # type: ignore[union-attr]
    unknown = restart_as_seen(RestartState(RestartPhase.IDLE), seen(), NOW)
    assert unknown is not None and unknown.scheduled and unknown.retry_after is None


@pytest.mark.parametrize("phase", [RestartPhase.REFUSED, RestartPhase.FAILED])
def test_r7_a_give_up_on_an_earlier_revision_does_not_hold_for_a_new_one(phase: RestartPhase) -> None:
    gave_up = RestartState(phase, "verify-failed: exit 1", revision=C, estimate=2.0)
    assert restart_as_seen(gave_up, seen(), NOW).phase is RestartPhase.SCHEDULED  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "state",
    [
        RestartState(RestartPhase.REFUSED, "incomplete", revision=B),  # about HEAD's revision: stands
        RestartState(RestartPhase.FAILED, "not-confirmed", revision=B),
        RestartState(RestartPhase.CONFIRMED, revision=B),  # the daemon's word on this revision
        RestartState(RestartPhase.WAITING, "drain: 3 in flight", revision=B, retry_after=9, inflight=3),
        RestartState(RestartPhase.RESTARTING, revision=C, retry_after=2),  # coming anyway
    ],
    ids=["refused", "failed", "confirmed", "draining", "coming-for-another"],
)
def test_r7_the_daemons_word_stands_where_it_applies(state: RestartState) -> None:
    assert restart_as_seen(state, seen(), NOW) is state


@pytest.mark.parametrize(
    "snap",
    [seen(Status.CURRENT, A), seen(Status.UNREADABLE, None), seen(Status.UNTRACKED, None)],
    ids=["current", "unreadable", "untracked"],
)
def test_r7_nothing_is_pending_unless_the_code_is_stale(snap: Snapshot) -> None:
    idle = RestartState(RestartPhase.IDLE, estimate=1.0)
    assert restart_as_seen(idle, snap, NOW) is idle


def test_r7_no_policy_no_pending_restart() -> None:
    assert restart_as_seen(None, seen(), NOW) is None
