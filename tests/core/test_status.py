"""stalewatch.core.status: statuses, the transitions a reading makes, and what events say."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from stalewatch import Event, Guard, Snapshot, Status
from stalewatch.core.cause import Cause
from stalewatch.core.phases import RestartPhase, RestartState
from stalewatch.core.status import decide, transition
from tests.support.repos import Repo

A = "a" * 40
B = "b" * 40
C = "c" * 40


def snapshot(status: Status, loaded: str | None, current: str | None, **fields: object) -> Snapshot:
    return Snapshot(status, Path("/srv/checkout"), loaded, current, generation=3, changed_at=1.0, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("loaded", "current", "readable", "status"),
    [
        (A, A, True, Status.CURRENT),
        (A, B, True, Status.STALE),
        (A, None, True, Status.UNREADABLE),  # a known revision lost to an unborn branch (C4)
        (None, None, True, Status.CURRENT),  # unborn then, unborn now
        (None, A, True, Status.STALE),  # the first commit on an unborn branch
        (A, A, False, Status.UNREADABLE),
        (None, None, False, Status.UNREADABLE),
    ],
)
def test_decide_names_the_status_of_two_revisions(
    loaded: str | None, current: str | None, readable: bool, status: Status
) -> None:
    assert decide(loaded, current, readable=readable) is status


def test_only_stale_and_unreadable_block() -> None:
    assert {s for s in Status if s.blocks} == {Status.STALE, Status.UNREADABLE}


def test_a_reading_that_changes_nothing_is_no_event() -> None:
    old = snapshot(Status.STALE, A, B)
    assert transition(old, B, None) is None
    assert transition(old, B, None, loaded=A) is None  # the revision already loaded: no adoption


def test_a_move_gives_the_next_snapshot_and_its_event() -> None:
    old = snapshot(Status.CURRENT, A, A, trusted=True, mode="native", cause=None)
    before = time.time()
    changed = transition(old, B, None)
    assert changed is not None
    new, event = changed
    assert (new.status, new.loaded_revision, new.current_revision, new.generation) == (Status.STALE, A, B, 4)
    assert before <= new.changed_at <= time.time()
    assert (new.trusted, new.mode, new.error, new.cause) == (True, "native", None, None)
    assert event == Event(Path("/srv/checkout"), Status.STALE, Status.CURRENT, A, B, 4, new.changed_at, None)


def test_a_new_commit_while_stale_is_an_event_with_the_same_status() -> None:
    changed = transition(snapshot(Status.STALE, A, B), C, None)
    assert changed is not None
    assert (changed[1].status, changed[1].previous_status, changed[1].current_revision) == (
        Status.STALE,
        Status.STALE,
        C,
    )


def test_an_unreadable_reading_keeps_its_error_and_forgets_the_cause() -> None:
    cause = Cause("commit", None, "commit: x", "alice", "a@x", 1.0, "+0000", "ahead", 1, None)
    old = snapshot(Status.STALE, A, B, cause=cause)
    changed = transition(old, None, "HEAD does not exist")
    assert changed is not None
    new, event = changed
    assert (new.status, new.error, new.cause) == (Status.UNREADABLE, "HEAD does not exist", None)
    assert (event.status, event.previous_status, event.error) == (
        Status.UNREADABLE,
        Status.STALE,
        "HEAD does not exist",
    )
    assert event.current_revision is None


def test_a_reading_after_unreadable_clears_the_error() -> None:
    old = snapshot(Status.UNREADABLE, A, None, error="HEAD does not exist")
    changed = transition(old, A, None)
    assert changed is not None
    assert (changed[0].status, changed[0].error, changed[1].error) == (Status.CURRENT, None, None)


def test_the_same_error_again_is_no_event() -> None:
    old = snapshot(Status.UNREADABLE, A, None, error="HEAD does not exist")
    assert transition(old, None, "HEAD does not exist") is None


def test_adopting_the_current_revision_makes_the_guard_current() -> None:
    changed = transition(snapshot(Status.STALE, A, B), B, None, loaded=B)
    assert changed is not None
    new, event = changed
    assert (new.status, new.loaded_revision, event.loaded_revision) == (Status.CURRENT, B, B)
    assert (event.previous_status, event.generation) == (Status.STALE, 4)


def test_adopting_is_an_event_even_when_status_and_head_hold_still() -> None:
    changed = transition(snapshot(Status.STALE, A, B), B, None, loaded=C)
    assert changed is not None
    assert (changed[0].status, changed[0].loaded_revision) == (Status.STALE, C)


def test_c8_a_latched_guard_stays_stale_after_a_rollback() -> None:
    stale = snapshot(Status.STALE, A, B)
    changed = transition(stale, A, None, latch=True)
    assert changed is not None
    assert (changed[0].status, changed[0].current_revision) == (Status.STALE, A)
    unlatched = transition(stale, A, None)
    assert unlatched is not None and unlatched[0].status is Status.CURRENT


def test_c8_a_latched_unreadable_guard_stays_blocked_when_head_comes_back() -> None:
    changed = transition(snapshot(Status.UNREADABLE, A, None, error="gone"), A, None, latch=True)
    assert changed is not None
    assert (changed[0].status, changed[0].error) == (Status.STALE, None)


def test_c8_a_latch_never_blocks_a_guard_that_was_not_blocked() -> None:
    assert transition(snapshot(Status.CURRENT, A, A), A, None, latch=True) is None


def test_c8_adopting_lifts_the_latch() -> None:
    changed = transition(snapshot(Status.STALE, A, B), B, None, loaded=B, latch=True)
    assert changed is not None
    assert changed[0].status is Status.CURRENT


def test_event_to_dict_and_to_json_carry_every_field() -> None:
    cause = Cause("reset", "HEAD~1", "reset: moving to HEAD~1", "bob", "b@x", 2.0, "+0100", "behind", None, 1)
    event = Event(
        Path("/srv/co"), Status.UNREADABLE, Status.STALE, A, None, 7, 12.5, "HEAD does not exist", cause
    )
    expected = {
        "checkout": "/srv/co",
        "status": "unreadable",
        "previous_status": "stale",
        "loaded_revision": A,
        "current_revision": None,
        "generation": 7,
        "at": 12.5,
        "error": "HEAD does not exist",
        "cause": cause.to_dict(),
    }
    assert event.to_dict() == expected
    assert event.to_json() == json.dumps(expected, separators=(",", ":"))  # one compact line


def test_an_event_without_cause_says_null() -> None:
    event = Event(Path("/srv/co"), Status.CURRENT, Status.STALE, A, A, 2, 3.0)
    assert event.to_dict()["cause"] is None
    assert event.to_dict()["error"] is None


def test_snapshot_to_dict_carries_every_field() -> None:
    restart = RestartState(
        RestartPhase.WAITING, reason="settling", revision=B, attempt=1, retry_after=4.0, at=9.0
    )
    cause = Cause("pull", "fast-forward", "pull: Fast-forward", "c", "c@x", 3.0, "+0000", "ahead", None, None)
    snap = Snapshot(
        Status.STALE,
        Path("/srv/co"),
        A,
        B,
        5,
        8.5,
        trusted=True,
        mode="daemon",
        error=None,
        restart=restart,
        cause=cause,
    )
    assert snap.to_dict() == {
        "checkout": "/srv/co",
        "status": "stale",
        "loaded_revision": A,
        "current_revision": B,
        "generation": 5,
        "at": 8.5,
        "trusted": True,
        "mode": "daemon",
        "error": None,
        "restart": restart.to_dict(),
        "cause": cause.to_dict(),
    }
    plain = snapshot(Status.UNREADABLE, A, None, error="gone").to_dict()
    assert (plain["restart"], plain["cause"], plain["error"], plain["trusted"], plain["mode"]) == (
        None,
        None,
        "gone",
        False,
        "none",
    )


def test_c4_an_unreadable_event_carries_its_error_in_process(git_repo: Repo) -> None:
    loaded = git_repo.head()
    guard = Guard.for_checkout(git_repo.path)
    seen: list[Event] = []
    guard.subscribe(seen.append)
    (git_repo.path / ".git/HEAD").write_text("garbage\n")
    before = time.time()
    guard.refresh()
    assert len(seen) == 1
    event = seen[0]
    assert (event.status, event.previous_status) == (Status.UNREADABLE, Status.CURRENT)
    assert (event.loaded_revision, event.current_revision, event.generation) == (loaded, None, 1)
    assert event.error is not None and "not a commit id" in event.error
    assert before <= event.at <= time.time()
    data = json.loads(event.to_json())
    assert data == event.to_dict()
    assert (data["status"], data["previous_status"], data["error"], data["at"]) == (
        "unreadable",
        "current",
        event.error,
        event.at,
    )
    assert guard.snapshot().error == event.error
