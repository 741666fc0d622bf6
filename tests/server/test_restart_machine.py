"""The restart sequence as a pure state machine (R1-R10), one rule at a time.

Pure logic: a :class:`~tests.support.machine.Driver` plays the executor and the world. The
real daemon, servers and supervisors are tested elsewhere (test_restart*.py).
"""

from __future__ import annotations

import pytest

from stalewatch.client.connection import MAX_BACKOFF
from stalewatch.core.phases import RestartPhase
from stalewatch.core.refusal import Refusal
from stalewatch.server.restart.actions import REPLACES, Handoff
from stalewatch.server.restart.effects import (
    Abort,
    Act,
    CheckMarkers,
    ProbeConfirm,
    ProbeDrain,
    Publish,
    ReadHead,
    Rebind,
    ReleaseLock,
    Retire,
    Stage,
    TakeLock,
    Verify,
    Wake,
)
from stalewatch.server.restart.inputs import (
    Head,
    Loaded,
    Markers,
    Reload,
    Server,
    Servers,
    Tick,
    Verdict,
    Verified,
)
from stalewatch.server.restart.machine import State, step
from stalewatch.server.restart.policy import ANSWER_MARGIN, RECONNECT_GRACE, DrainOutcome, Rules
from stalewatch.server.restart.state import interval_left
from tests.support.machine import A, B, C, D, Driver, names, phase

HANDOFF = Handoff.traits

pytestmark = pytest.mark.unit

SETTLE = 1.0


def rules(**keys: object) -> Rules:
    keys.setdefault("settle", SETTLE)
    keys.setdefault("min_interval", 0.0)
    return Rules(**keys)  # type: ignore[arg-type]


def settled(driver: Driver, revision: str = B) -> None:
    """HEAD moves to ``revision`` and settles."""
    driver.move(revision)
    driver.later(SETTLE)


def restarted(driver: Driver, revision: str = B) -> None:
    """A whole restart onto ``revision``, every answer good."""
    settled(driver, revision)
    driver.through(Act)
    driver.reply()
    for _ in range(10):
        if driver.request is None:
            break
        driver.reply()
    assert driver.last.phase is RestartPhase.CONFIRMED, names(driver.told)


# -- the order of a run (R1-R7) ------------------------------------------------------------


def test_r4_r7_a_commit_is_scheduled_settled_and_restarted_with_every_phase_told() -> None:
    d = Driver()
    d.move(B)
    assert names(d.told) == ["scheduled", "waiting: settle"]
    assert d.state.timer == 101.0 and d.of(Wake)[-1] == Wake(101.0)
    d.later(SETTLE)
    assert isinstance(d.request, ReadHead)  # no lock: HEAD is read again all the same
    d.through(Act)
    assert names(d.told)[-1] == "restarting" and d.of(Act) == [Act(d.request.ticket, B)]
    d.reply()
    assert names(d.told) == ["scheduled", "waiting: settle", "restarting", "confirmed"]
    assert {s.revision for s in d.told} == {B}
    assert d.of(Rebind) == [Rebind(B)]
    assert d.effects.index(Rebind(B)) > d.effects.index(Publish(d.told[-1], Stage.DONE))


def test_r9_the_full_order_verify_drain_lock_recheck_verify_head_act() -> None:
    d = Driver(rules(markers=True, verify=True, lock=True, drain_probe=True))
    settled(d)
    asked = []
    for _ in range(20):
        request = d.request
        assert request is not None
        asked.append(type(request).__name__)
        if isinstance(request, Act):
            break
        d.reply()
    assert asked == [
        "CheckMarkers",
        "Verify",
        "ProbeDrain",
        "TakeLock",
        "ReadHead",
        "CheckMarkers",
        "ProbeDrain",
        "Verify",
        "ProbeDrain",  # once more: the verify under the lock took its time
        "ReadHead",  # the last look: HEAD moved during the probe is never acted on
        "Act",
    ]
    assert names(d.told) == [
        "scheduled",
        "waiting: settle",
        "verifying",
        "verifying: under the lock",
        "restarting",
    ]


def test_r7_phases_are_published_only_when_they_change() -> None:
    d = Driver(rules(markers=True))
    settled(d)
    d.reply(verdict=Verdict.WAIT, reason="hold: /x exists")
    mark = d.mark()
    d.until_timer()
    d.reply(verdict=Verdict.WAIT, reason="hold: /x exists")
    assert not [e for e in d.since(mark) if isinstance(e, Publish)]
    d.until_timer()
    d.reply(verdict=Verdict.WAIT, reason="update-running: pid 7 since 3 s")
    assert names(d.told)[-2:] == ["waiting: hold", "waiting: update-running"]


def test_the_published_state_leaves_at_to_the_executor() -> None:
    d = Driver()
    d.move(B)
    assert all(s.at == 0.0 for s in d.told)


# -- settle (R6) ---------------------------------------------------------------------------


def test_r6_settle_holds_until_exactly_settle_seconds_have_passed() -> None:
    d = Driver()
    d.move(B)
    d.later(SETTLE - 0.001)
    assert d.stage == "SETTLE" and d.request is None
    d.later(0.001)
    assert d.stage == "LOCKED_HEAD"


def test_r6_a_burst_of_commits_settles_once_onto_the_last() -> None:
    d = Driver()
    for revision in (B, C, D):
        d.move(revision)
        d.later(SETTLE / 2)
    assert d.stage == "SETTLE" and d.state.attempt is not None and d.state.attempt.target == D
    d.later(SETTLE / 2)
    d.through(Act)
    d.reply()
    assert len(d.of(Act)) == 1 and d.of(Act)[0].revision == D


def test_r6_a_move_and_back_during_settle_settles_from_scratch() -> None:
    d = Driver()
    d.move(B)
    d.later(0.9)
    d.move(C)
    d.move(B)
    d.later(0.9)
    assert d.stage == "SETTLE"
    d.later(0.1)
    assert d.stage != "SETTLE"


def test_without_settle_a_run_goes_straight_on() -> None:
    d = Driver(rules(settle=0.0))
    d.move(B)
    assert names(d.told) == ["scheduled"] and isinstance(d.request, ReadHead)


# -- bounds: attempts and interval (R6, R10) -----------------------------------------------


def test_r7_retry_after_covers_the_min_interval_left() -> None:
    """Issue 15 item 3: 'min-interval: 28 s left' while the 409s said retry_after 2."""
    d = Driver(rules(min_interval=30.0))
    restarted(d, B)
    d.move(C)
    assert d.last.retry_after is not None and d.last.retry_after >= 30.0  # settle runs meanwhile
    d.later(SETTLE + 1.0)  # 28 s of the interval left
    assert phase(d.last) == (RestartPhase.WAITING, "min-interval: 28 s left", C)
    assert d.last.retry_after is not None and d.last.retry_after >= 28.0
    assert d.last.retry_after == pytest.approx(28.0 + d.state.restart_seconds)
    wait = Refusal("stale", restart=d.last).retry_after  # the 409's Retry-After
    assert wait is not None and wait >= 28


def test_r6_min_interval_holds_until_exactly_its_end() -> None:
    d = Driver(rules(min_interval=30.0))
    restarted(d, B)
    acted = d.state.last_action
    assert acted is not None
    d.move(C)
    d.later(SETTLE)
    assert d.stage == "INTERVAL" and d.state.timer == acted + 30.0
    d.now = acted + 30.0 - 0.001
    d.feed(Tick(d.now))
    assert d.stage == "INTERVAL"
    d.now = acted + 30.0
    d.feed(Tick(d.now))
    assert d.stage == "LOCKED_HEAD"


def test_r6_the_interval_left_is_said_in_whole_seconds_rounded_up() -> None:
    d = Driver(rules(min_interval=10.0, settle=0.0))
    restarted(d, B)
    d.later(0.5)
    d.move(C)
    assert d.last.reason == "min-interval: 10 s left"
    assert interval_left(d.state, d.now) == 9.5
    assert interval_left(d.state, d.now + 20) == 0.0
    assert interval_left(State(rules()), 0.0) == 0.0


def test_r6_r10_a_client_registering_an_old_revision_gets_at_most_max_attempts_actions() -> None:
    """Issue 15 item 5: register an old revision, wait for the restart, register HEAD, again."""
    d = Driver(rules(max_attempts=2))
    settled(d, B)
    d.through(Act)
    d.reply()
    d.register(10, B)
    assert d.last.phase is RestartPhase.CONFIRMED and len(d.of(Act)) == 1
    for pid in range(11, 16):  # a compromised worker, on a new connection each time
        d.leave(pid - 1)
        d.register(pid, A)
        d.later(SETTLE)
        if isinstance(d.request, ReadHead):
            d.through(Act)
            d.reply()
            d.leave(pid)
            d.register(pid + 100, B)
    assert len(d.of(Act)) == 2
    assert phase(d.last) == (RestartPhase.REFUSED, "max-attempts: 2 restarts of this revision already", B)
    assert d.last.attempt == 2


def test_r6_the_attempt_bound_counts_per_revision_and_a_new_head_starts_afresh() -> None:
    d = Driver(rules(max_attempts=1))
    restarted(d, B)
    restarted(d, C)
    assert [a.revision for a in d.of(Act)] == [B, C]


def test_r6_a_refusal_by_the_bound_stands_while_the_servers_come_and_go() -> None:
    d = Driver(rules(max_attempts=1))
    restarted(d, B)
    d.register(1, A)
    d.later(SETTLE)
    assert d.last.phase is RestartPhase.REFUSED
    d.leave(1)
    assert d.last.phase is RestartPhase.IDLE
    mark = d.mark()
    d.register(2, A)
    assert d.last.phase is RestartPhase.REFUSED
    assert not [
        e for e in d.since(mark) if isinstance(e, Publish) and e.state.phase is RestartPhase.SCHEDULED
    ]


# -- markers (R1) --------------------------------------------------------------------------


def test_r1_markers_that_say_wait_are_looked_at_again_every_half_second() -> None:
    d = Driver(rules(markers=True))
    settled(d)
    d.reply(verdict=Verdict.WAIT, reason="update-running: pid 7 since 1 s")
    assert phase(d.last) == (RestartPhase.WAITING, "update-running: pid 7 since 1 s", B)
    assert d.state.timer == d.now + 0.5 and d.request is None
    d.later(0.499)
    assert d.request is None
    d.later(0.001)
    assert isinstance(d.request, CheckMarkers)
    d.reply()
    assert d.stage == "LOCK" or isinstance(d.request, ReadHead)


def test_r1_a_refusing_marker_refuses_and_the_refusal_lifts_when_it_goes() -> None:
    d = Driver(rules(markers=True))
    settled(d)
    d.reply(verdict=Verdict.REFUSE, reason="incomplete: /x exists")
    assert phase(d.last) == (RestartPhase.REFUSED, "incomplete: /x exists", B)
    assert d.last.retry_after is None and d.state.timer == d.now + 2.0
    d.later(1.999)
    assert d.request is None
    d.later(0.001)
    d.reply()  # removed by hand
    d.through(Act)
    assert d.last.phase is RestartPhase.RESTARTING


def test_r1_a_marker_answer_without_a_reason_still_says_what_it_is() -> None:
    d = Driver(rules(markers=True))
    settled(d)
    d.reply(verdict=Verdict.WAIT)
    assert d.last.reason == "markers: wait"


def test_r1_r3_an_update_that_began_before_the_lock_is_waited_for_and_verified_again() -> None:
    d = Driver(rules(markers=True, verify=True, lock=True))
    settled(d)
    d.through(CheckMarkers)
    d.reply()  # before the lock: clean
    d.reply()  # verified
    d.reply()  # the lock
    d.reply()  # HEAD under it
    assert isinstance(d.request, CheckMarkers)
    mark = d.mark()
    d.reply(verdict=Verdict.WAIT, reason="update-running: pid 9 since 0 s")
    assert ReleaseLock() in d.since(mark)
    assert names(d.told)[-1] == "scheduled" and isinstance(d.request, CheckMarkers)
    d.reply()
    assert isinstance(d.request, Verify)  # verified again: the update may have changed it


# -- verify (R2, R9) -----------------------------------------------------------------------


def test_r2_a_failing_probe_refuses_and_the_refusal_stands_for_its_revision() -> None:
    d = Driver(rules(verify=True))
    settled(d)
    d.reply(ok=False, detail="exited 1: SyntaxError")
    assert phase(d.last) == (RestartPhase.REFUSED, "verify-failed: exited 1: SyntaxError", B)
    assert d.state.attempt is None and d.state.timer is None
    d.move(A)
    assert d.last.phase is RestartPhase.IDLE and d.of(Publish)[-1].stage is Stage.IDLE
    mark = d.mark()
    d.move(B)  # HEAD comes back: the refusal stands, no probe runs again
    assert d.of(Publish)[-1].stage is Stage.DONE
    assert [e for e in d.since(mark) if isinstance(e, Publish)][-1].state == d.told[-1]
    assert phase(d.last) == (RestartPhase.REFUSED, "verify-failed: exited 1: SyntaxError", B)
    assert not [e for e in d.since(mark) if isinstance(e, Verify)]


def test_r2_another_revision_ends_a_refusal() -> None:
    d = Driver(rules(verify=True))
    settled(d)
    d.reply(ok=False)
    settled(d, C)
    assert isinstance(d.request, Verify) and d.request.revision == C
    assert d.last.reason is None  # the first probe, to fail fast
    settled(d, B)  # back: the refusal lapsed when C was wanted, B is judged afresh
    assert isinstance(d.request, Verify) and d.request.revision == B


def test_r2_servers_restarted_by_hand_onto_a_refused_revision_end_the_refusal() -> None:
    d = Driver(rules(verify=True))
    settled(d)
    d.reply(ok=False)
    d.register(1, B)
    assert d.last.phase is RestartPhase.IDLE


def test_r9_a_commit_broken_under_the_lock_is_refused_and_the_lock_released() -> None:
    d = Driver(rules(verify=True, lock=True))
    settled(d)
    d.through(Verify)
    d.reply()
    d.through(Verify)
    assert d.last.reason == "under the lock" and d.state.attempt is not None and d.state.attempt.lock_held
    mark = d.mark()
    d.reply(ok=False, detail="exited 1")
    assert ReleaseLock() in d.since(mark) and not d.of(Act)
    assert phase(d.last) == (RestartPhase.REFUSED, "verify-failed: exited 1", B)


def test_r9_without_a_lock_the_last_probe_runs_right_before_the_action() -> None:
    d = Driver(rules(verify=True))
    settled(d)
    d.reply()
    d.through(Verify)
    assert d.last.reason == "before the action"


def test_r9_head_moving_during_the_last_probe_is_caught_by_the_last_read() -> None:
    d = Driver(rules(verify=True, lock=True))
    settled(d)
    d.through(Verify)
    d.reply()
    d.through(Verify)
    d.move(C, silent=True)  # an updater that does not take the lock
    mark = d.mark()
    d.reply()
    assert isinstance(d.request, ReadHead)
    d.reply()  # reads C
    assert ReleaseLock() in d.since(mark) and not d.of(Act)
    assert names(d.told)[-2:] == ["scheduled", "waiting: settle"] and d.last.revision == C


def test_r7_the_verify_time_is_measured_and_told_in_retry_after() -> None:
    d = Driver(rules(verify=True))
    settled(d)
    d.now += 4.0
    d.reply()
    assert d.state.verify_seconds == 4.0
    d.through(Verify)
    assert d.last.retry_after == pytest.approx(4.0 + d.state.restart_seconds)


# -- the lock (R3) -------------------------------------------------------------------------


def test_r3_a_held_lock_is_tried_again_backing_off_up_to_a_second() -> None:
    d = Driver(rules(lock=True))
    settled(d)
    waits = []
    for _ in range(7):
        assert isinstance(d.request, TakeLock)
        d.reply(acquired=False, detail="/run/update.lock is held")
        waits.append(round(d.state.timer - d.now, 3))  # type: ignore[operator]
        d.until_timer()
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert phase(d.last) == (RestartPhase.WAITING, "lock: /run/update.lock is held", B)
    assert d.last.retry_after is not None and d.last.retry_after >= 0.05
    d.reply()
    assert d.state.attempt is not None and d.state.attempt.lock_held


def test_r3_a_lock_that_cannot_be_opened_fails_and_stands() -> None:
    d = Driver(rules(lock=True))
    settled(d)
    d.reply(acquired=False, error="cannot open the lock /x: Permission denied")
    assert phase(d.last) == (RestartPhase.FAILED, "lock: cannot open the lock /x: Permission denied", B)
    assert not d.of(ReleaseLock)


def test_r3_a_held_lock_with_no_detail_says_held() -> None:
    d = Driver(rules(lock=True))
    settled(d)
    d.reply(acquired=False)
    assert d.last.reason == "lock: held"


def test_r3_the_lock_is_held_from_the_recheck_to_the_confirmation() -> None:
    d = Driver(rules(lock=True, confirm_probe=True))
    settled(d)
    d.through(Act)
    assert not d.of(ReleaseLock)
    d.reply()
    d.reply()  # the confirm probe passes
    assert d.effects[-4:-2] == [ReleaseLock(), Publish(d.last, Stage.DONE)] or ReleaseLock() in d.effects[-4:]
    assert d.last.phase is RestartPhase.CONFIRMED


def test_r3_a_failed_attempt_releases_the_lock_before_waiting_out_the_interval() -> None:
    d = Driver(rules(lock=True, min_interval=30.0, max_attempts=2))
    settled(d)
    d.through(Act)
    mark = d.mark()
    d.reply(ok=False, detail="exited 3")
    assert ReleaseLock() in d.since(mark)
    assert names(d.told)[-3:] == ["failed: action exited 3", "scheduled", "waiting: min-interval"]
    assert d.request is None


# -- drain (R8) ----------------------------------------------------------------------------


def test_r8_registered_work_in_flight_holds_the_restart_until_it_ends() -> None:
    """Issue 15 item 1: a 40 s agent turn was cut off 4 s after the pull."""
    d = Driver(rules(verify=True))
    d.register(1, A, inflight=1)
    d.register(2, A, inflight=2)
    settled(d)
    d.reply()  # verified: fail fast, before the drain
    assert phase(d.last) == (RestartPhase.WAITING, "drain: 3 in flight", B)
    assert d.request is None and d.state.drain_since == d.now
    d.later(30.0)
    d.register(2, A, inflight=0)
    assert d.last.reason == "drain: 1 in flight"
    d.register(1, A, inflight=0)
    assert isinstance(d.request, ReadHead)
    d.through(Act)
    assert names(d.told)[-3:] == ["waiting: drain", "verifying: before the action", "restarting"]


def test_r8_the_drain_bound_refuses_by_default_and_stands() -> None:
    d = Driver(rules(drain_timeout=600.0))
    d.register(1, A, inflight=1)
    settled(d)
    began = d.state.drain_since
    assert began is not None and d.state.timer == began + 600.0
    d.now = began + 600.0 - 0.001
    d.feed(Tick(d.now))
    assert d.last.reason == "drain: 1 in flight"
    d.now = began + 600.0
    d.feed(Tick(d.now))
    assert phase(d.last) == (RestartPhase.REFUSED, "drain-timeout: 1 still in flight after 600 s", B)
    d.register(1, A, inflight=0)  # too late: given up for this revision
    assert d.last.phase is RestartPhase.REFUSED and not d.of(Act)


def test_r8_the_drain_bound_can_restart_anyway_and_says_what_was_cut_off() -> None:
    d = Driver(rules(drain_timeout=60.0, on_drain_timeout=DrainOutcome.RESTART))
    d.register(1, A, inflight=2)
    settled(d)
    d.later(60.0)
    d.through(Act)
    assert phase(d.last) == (RestartPhase.RESTARTING, "drain-timeout: 2 still in flight", B)


def test_r8_a_drain_probe_asks_servers_that_do_not_register() -> None:
    d = Driver(rules(drain_probe=True, drain_poll=1.0))
    settled(d)
    assert isinstance(d.request, ProbeDrain)
    d.reply(inflight=4)
    assert d.last.reason == "drain: 4 in flight" and d.state.timer == d.now + 1.0
    d.later(0.999)
    assert d.request is None
    d.later(0.001)
    d.reply(inflight=None, detail="exited 2")
    assert d.last.reason == "drain: unknown in flight (the drain probe exited 2)"
    d.until_timer()
    d.reply(inflight=0)
    assert isinstance(d.request, ReadHead)  # drained; under the lock it is asked again
    d.reply()
    assert isinstance(d.request, ProbeDrain)


def test_r8_work_in_flight_of_the_probe_and_the_registrations_adds_up() -> None:
    d = Driver(rules(drain_probe=True))
    d.register(1, A, inflight=2)
    settled(d)
    d.reply(inflight=3)
    assert d.last.reason == "drain: 5 in flight"


def test_r8_work_that_came_in_under_the_lock_releases_it_and_drains_again() -> None:
    d = Driver(rules(lock=True, drain_probe=True))
    settled(d)
    d.reply(inflight=0)
    d.reply()  # the lock
    d.reply()  # HEAD
    assert isinstance(d.request, ProbeDrain)
    mark = d.mark()
    d.reply(inflight=1)
    assert ReleaseLock() in d.since(mark) and not d.of(Act)
    assert names(d.told)[-1] == "scheduled"
    d.reply(inflight=1)
    assert d.last.reason == "drain: 1 in flight"


def test_r8_a_registration_with_work_just_before_the_action_holds_it() -> None:
    d = Driver(rules(verify=True))
    settled(d)
    d.reply()
    d.through(Verify)
    d.register(1, A, inflight=1)
    d.reply()
    mark = d.mark()
    d.reply()  # HEAD: still the target, but work is in flight: a new run
    assert (
        not d.of(Act) and names([e.state for e in d.since(mark) if isinstance(e, Publish)])[0] == "scheduled"
    )
    d.reply()  # verified again
    assert d.last.reason == "drain: 1 in flight" and not d.of(Act)


def test_r8_the_drain_bound_counts_from_the_first_wait_across_runs() -> None:
    d = Driver(rules(lock=True, drain_timeout=10.0))
    d.register(1, A, inflight=1)
    settled(d)
    began = d.state.drain_since
    assert began == d.now
    d.later(5.0)
    d.register(1, A, inflight=0)
    d.reply()  # the lock
    d.register(1, A, inflight=1)
    d.reply()  # HEAD: work in flight again, start over
    assert d.state.drain_since == began and d.last.reason == "drain: 1 in flight"
    d.now = began + 10.0  # type: ignore[operator]
    d.feed(Tick(d.now))
    assert d.last.phase is RestartPhase.REFUSED


@pytest.mark.parametrize("outcome", list(DrainOutcome))
def test_r8_a_drain_bound_spent_by_a_run_long_over_is_never_spent_again(outcome: DrainOutcome) -> None:
    """Review of issue 15: A -> B -> A -> B an hour later, a long request in flight all the
    while: the second drain took its clock from the first, so it acted at once over the work
    (``restart``) or refused at once saying "after 600 s" (``refuse``)."""
    d = Driver(rules(drain_timeout=600.0, on_drain_timeout=outcome))
    d.register(1, A, inflight=1)
    settled(d)
    assert d.stage == "DRAIN"
    d.move(A)  # reverted: nothing wanted, the run ends
    assert d.stage == "none"
    d.later(3600.0)
    settled(d)  # B again, the request still running
    assert d.state.drain_since == d.now and d.stage == "DRAIN"
    assert phase(d.last) == (RestartPhase.WAITING, "drain: 1 in flight", B) and not d.of(Act)
    d.later(599.0)
    assert d.stage == "DRAIN" and not d.of(Act)


def test_r8_a_run_after_a_failed_one_drains_afresh() -> None:
    d = Driver(rules(drain_timeout=60.0, max_attempts=2, confirm_timeout=1.0))
    d.register(1, A, inflight=1)
    settled(d)
    d.later(30.0)
    d.register(1, A, inflight=0)
    d.through(Act)
    d.reply()
    d.register(1, A, inflight=1)  # the action did not restart it: still old, at work again
    d.later(1.0)  # not confirmed
    assert d.last.phase is RestartPhase.WAITING and d.last.reason == "drain: 1 in flight"
    assert d.state.drain_since == d.now


@pytest.mark.parametrize("pid", [1, 4242])  # 1: a container's server may be its init
def test_r8_a_server_whose_connection_drops_mid_drain_is_waited_for_while_its_process_runs(pid: int) -> None:
    """Review of issue 15: its registration and its count vanished together; the drain
    passed and the action cut off the work it still had in flight."""
    d = Driver(rules(drain_poll=1.0))
    d.register(7, A, inflight=0)
    d.register(pid, A, inflight=3)
    settled(d)
    assert d.stage == "DRAIN"
    d.leave(pid)  # its connection closed; the process and its 3 requests live on
    assert d.request == ProbeDrain(d.request.ticket, frozenset({pid}), B)  # type: ignore[union-attr]
    d.reply()  # pid 2 still runs
    assert phase(d.last) == (RestartPhase.WAITING, "drain: 3 in flight", B)
    for _ in range(5):
        d.until_timer()
        d.reply()  # still runs
        assert d.stage == "DRAIN" and not d.of(Act)
    d.until_timer()
    d.reply(gone=frozenset({pid}))  # its process exited: its work with it
    assert d.state.departed == () and isinstance(d.request, ReadHead)


def test_r8_a_server_that_registers_again_after_a_drop_counts_what_it_says_now() -> None:
    d = Driver(rules())
    d.register(1, A, inflight=0)
    d.register(2, A, inflight=3)
    settled(d)
    d.leave(2)
    d.reply()
    d.register(2, A, inflight=1)  # reconnected: its count rules again
    d.until_timer()
    assert d.state.departed == () and d.last.reason == "drain: 1 in flight"


def test_r8_a_departed_server_with_no_pid_is_waited_for_while_it_may_reconnect() -> None:
    d = Driver(rules(drain_poll=1.0))
    d.register(1, A, inflight=0)
    d.register(0, A, inflight=2)  # the platform could not tell its pid
    settled(d)
    d.leave(0)
    left = d.now
    assert d.request == ProbeDrain(d.request.ticket, frozenset(), B)  # type: ignore[union-attr]
    d.reply()
    while d.now < left + RECONNECT_GRACE - 1.0:
        d.until_timer()
        d.reply()
        assert d.stage == "DRAIN"
    d.now = left + RECONNECT_GRACE
    d.feed(Tick(d.now))
    for _ in range(3):
        if isinstance(d.request, ProbeDrain):
            d.reply()
    assert d.stage != "DRAIN"
    assert RECONNECT_GRACE >= MAX_BACKOFF + 0.5  # the client's longest reconnect backoff


def test_r8_a_departed_server_that_never_goes_holds_the_drain_to_its_bound() -> None:
    d = Driver(rules(drain_timeout=10.0))
    d.register(1, A, inflight=0)
    d.register(2, A, inflight=1)
    settled(d)
    began = d.now
    d.leave(2)
    while d.last.phase is RestartPhase.WAITING:
        if d.request is not None:
            d.reply()  # pid 2 still runs
        else:
            d.until_timer()
    assert d.now == began + 10.0 and not d.of(Act)
    assert phase(d.last) == (RestartPhase.REFUSED, "drain-timeout: 1 still in flight after 10 s", B)


def test_r8_servers_the_action_stopped_are_not_waited_for() -> None:
    d = Driver(rules(confirm_timeout=5.0))
    d.register(1, A, inflight=0)
    settled(d)
    d.through(Act)
    d.reply()
    d.register(1, A, inflight=2)
    d.leave(1)  # the action stops it, work and all: what the drain was for
    assert d.state.departed == ()


def test_r8_with_settle_0_the_drain_waits_for_counts_told_after_the_announcement() -> None:
    """Review of issue 15: servers report their count only once a restart is coming; with
    settle 0 the drain was judged, on the count of a registration hours old, in the very
    step that announced the restart."""
    d = Driver(rules(settle=0.0, drain_poll=1.0))
    d.register(1, A, inflight=0)  # hours ago
    d.later(3600.0)
    announced = d.now
    effects = d.move(B)  # the step that announces the restart
    assert names(d.told)[0] == "scheduled"
    assert not [e for e in effects if isinstance(e, TakeLock | ReadHead | Act)]
    assert d.stage == "DRAIN" and d.state.timer == announced + 1.0
    d.now += 0.05
    d.register(1, A, inflight=2)  # its count, told at once on hearing of the restart
    d.until_timer()
    assert d.last.reason == "drain: 2 in flight" and d.stage == "DRAIN"
    d.register(1, A, inflight=0)
    assert isinstance(d.request, ReadHead)


def test_r8_a_settle_longer_than_the_poll_adds_no_wait_for_counts() -> None:
    d = Driver(rules(settle=2.0, drain_poll=1.0))
    d.register(1, A)
    d.move(B)
    d.later(2.0)
    assert isinstance(d.request, ReadHead)  # the counts came during settle


def test_r8_r10_a_daemon_just_started_gives_its_servers_time_to_register_again() -> None:
    """Review of issue 15: a daemon (re)started after the move, told by the pidfile that
    the server runs old code, drained with no registration at all and acted at settle's
    end, while the clients were still backing off (up to 2 s) before reconnecting."""
    d = Driver(rules(settle=2.0), head=B, started=100.0)
    d.feed(Loaded(d.now, not_revision=B, why="started before HEAD moved to B"))
    d.later(2.0)
    assert d.stage == "DRAIN" and d.request is None and not d.of(Act)
    assert d.state.timer == 100.0 + RECONNECT_GRACE
    d.now = 102.5
    d.register(1, A, inflight=1)  # reconnected, a request in flight
    d.until_timer()
    assert d.last.reason == "drain: 1 in flight" and not d.of(Act)
    d.register(1, A, inflight=0)
    assert isinstance(d.request, ReadHead)


def test_r8_long_after_the_daemon_started_no_reconnect_grace_is_waited() -> None:
    d = Driver(rules(settle=2.0), started=100.0 - RECONNECT_GRACE)
    d.move(B)
    d.later(2.0)
    assert isinstance(d.request, ReadHead)


def test_r8_the_drain_probe_is_asked_once_more_right_before_the_action() -> None:
    """Review of issue 15: the probe's last count was read before the verify under the lock
    (up to verify_timeout); long work that came in meanwhile was cut off."""
    d = Driver(rules(verify=True, drain_probe=True), head=A)
    d.feed(Loaded(d.now, revision=A))
    settled(d)
    d.through(Verify)  # fail fast
    d.reply()
    d.through(Verify)  # under the lock: the probe said 0 before it
    d.now += 60.0  # the probe takes its time; new long work arrives meanwhile
    d.reply()
    assert isinstance(d.request, ProbeDrain) and not d.of(Act)
    mark = d.mark()
    d.reply(inflight=1)
    assert not d.of(Act) and ReleaseLock() not in d.since(mark)  # no lock in this policy
    assert "scheduled" in names([e.state for e in d.since(mark) if isinstance(e, Publish)])  # a new run
    d.through(ProbeDrain)
    d.reply(inflight=1)
    assert d.last.reason == "drain: 1 in flight" and not d.of(Act)


def test_r9_head_is_the_last_look_before_the_action_so_a_move_during_the_drain_probe_is_never_acted_on() -> (
    None
):
    """Found by the world property: HEAD was read, the drain probed once more, and the
    action then ran on the revision HEAD had left while the probe ran."""
    d = Driver(rules(verify=True, drain_probe=True), head=A)
    d.feed(Loaded(d.now, revision=A))
    settled(d)
    d.through(Verify)
    d.reply()
    d.through(Verify)  # under the lock
    d.reply()
    assert isinstance(d.request, ProbeDrain)  # the final look at the drain
    d.move(None, silent=True)  # HEAD becomes unreadable; the watcher has not said so yet
    d.reply()
    assert isinstance(d.request, ReadHead) and not d.of(Act)
    d.reply()
    assert not d.of(Act)


def test_r8_no_drain_without_work_in_flight() -> None:
    d = Driver()
    d.register(1, A)
    settled(d)
    assert d.state.drain_since is None and "waiting: drain" not in names(d.told)


def test_r8_a_new_revision_drains_from_scratch() -> None:
    d = Driver(rules(drain_timeout=10.0))
    d.register(1, A, inflight=1)
    settled(d)
    d.later(9.0)
    settled(d, C)
    assert d.state.drain_since == d.now


def test_r8_the_drain_phase_carries_its_count_and_no_other_phase_does() -> None:
    d = Driver(rules())
    d.register(1, A, inflight=3)
    settled(d)
    assert (d.last.reason, d.last.inflight) == ("drain: 3 in flight", 3)
    d.later(1.0)
    d.register(1, A, inflight=0)
    d.through(Act)
    assert [s.inflight for s in d.told if s.reason is None or not s.reason.startswith("drain")] == [None] * 3


def test_r8_a_chatty_server_is_told_at_most_once_per_drain_poll() -> None:
    """One server reporting every request must not put a line in every client's queue."""
    d = Driver(rules(drain_poll=1.0))
    d.register(1, A, inflight=5)
    settled(d)
    told = d.last
    assert told.inflight == 5
    for count in (6, 7, 4, 9):
        d.now += 0.1
        d.register(1, A, inflight=count)
    assert d.last == told and d.state.timer == pytest.approx(d.now - 0.4 + 1.0)
    d.until_timer()
    assert (d.last.reason, d.last.inflight) == ("drain: 9 in flight", 9)
    d.now += 0.5
    d.register(1, A, inflight=0)  # drained: said at once, whatever the pace
    assert isinstance(d.request, ReadHead) or d.of(Act)


def test_r8_a_count_back_to_what_was_told_needs_no_new_phase() -> None:
    d = Driver(rules(drain_poll=1.0))
    d.register(1, A, inflight=2)
    settled(d)
    mark = d.mark()
    d.now += 0.1
    d.register(1, A, inflight=3)
    d.now += 0.1
    d.register(1, A, inflight=2)
    assert not [e for e in d.since(mark) if isinstance(e, Publish)]
    assert d.state.timer is None or d.state.timer > d.now


def test_r7_every_phase_carries_the_estimate_and_the_earliest_next_action() -> None:
    """What a server that sees a commit before the daemon tells its clients (polling)."""
    d = Driver(rules(min_interval=30.0, verify=True))
    d.move(B)
    assert all(s.estimate == pytest.approx(SETTLE + 2 * 1.0 + 5.0) for s in d.told)
    assert [e.earliest for e in d.of(Publish)] == [None, None]  # no action yet
    d.later(SETTLE)
    d.through(Act)
    acted = d.now
    d.reply()
    confirmed = d.of(Publish)[-1]
    assert confirmed.state.phase is RestartPhase.CONFIRMED and confirmed.earliest == acted + 30.0
    assert confirmed.state.estimate == pytest.approx(SETTLE + 2 * d.state.verify_seconds + 0.5)
    d.later(31.0)
    d.move(C)
    assert d.of(Publish)[-1].earliest is None  # the interval has passed


def test_r7_retry_after_while_the_counts_are_coming_is_what_is_left_of_that_wait() -> None:
    """Nothing in flight yet: the drain waits a poll after the announcement for the
    servers' counts, and retry_after says what is left of it (a mutation run's seed
    found it left out)."""
    d = Driver(rules(drain_poll=3.0))
    d.register(1, A, inflight=0)
    d.move(B)
    assert d.told[0].retry_after == pytest.approx(3.0 + 5.0)  # the counts' wait, longer than settle's
    d.later(SETTLE)
    assert d.last.reason == "drain: 0 in flight"
    assert d.last.retry_after == pytest.approx(3.0 - SETTLE + 5.0)


def test_r7_retry_after_while_draining_is_at_least_the_next_look() -> None:
    d = Driver(rules(drain_poll=3.0, verify=True))
    d.register(1, A, inflight=1)
    d.move(B)
    assert d.told[0].retry_after == pytest.approx(SETTLE + 3.0 + 2 * 1.0 + 5.0)  # drain is ahead
    d.later(SETTLE)
    d.reply()
    assert d.last.retry_after == pytest.approx(3.0 + 1 * d.state.verify_seconds + 5.0)


# -- handoff (R9) --------------------------------------------------------------------------


def test_r9_handoff_retires_the_old_only_once_new_servers_run_the_target() -> None:
    d = Driver(rules(action=HANDOFF))
    d.register(10, A)
    d.register(11, A)
    settled(d)
    d.through(Act)
    assert d.request == Act(d.request.ticket, B, HANDOFF)  # type: ignore[union-attr]
    d.now += 0.1
    d.reply()
    d.register(20, B)  # a new worker of the new master: its others may still fail to boot
    assert d.last.phase is RestartPhase.RESTARTING and not d.of(Retire)
    d.register(21, B)  # as many new workers as old ones, all on the target
    (retire,) = d.of(Retire)
    assert retire == Retire(frozenset({10, 11}), d.of(Act)[0].ticket)  # that action's handoff
    assert d.last.phase is RestartPhase.CONFIRMED
    assert d.effects.index(retire) < d.effects.index(Rebind(B))


def test_r9_one_new_process_on_two_connections_is_one_new_server() -> None:
    """Review of issue 15: two registrations of one process (two guards, or a client) stood
    for two new workers; the old master was retired before a second one booted."""
    d = Driver(rules(action=HANDOFF))
    d.register(10, A)
    d.register(11, A)
    settled(d)
    d.through(Act)
    d.reply()
    d.now += 0.1
    old = tuple(d.servers.values())
    d.feed(Servers(d.now, (*old, Server(20, B, 0, d.now), Server(20, B, 0, d.now))))
    assert not d.of(Retire) and d.last.phase is RestartPhase.RESTARTING
    d.servers[20] = Server(20, B, 0, d.now)  # one of its connections closes
    d.register(21, B)  # a second new process
    assert [r.pids for r in d.of(Retire)] == [frozenset({10, 11})]


def test_r9_handoff_waits_while_a_new_server_runs_other_code() -> None:
    d = Driver(rules(action=HANDOFF))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    d.register(21, A)  # registered since the action, on the old code
    d.register(20, B)
    assert d.last.phase is RestartPhase.RESTARTING and not d.of(Retire)
    d.leave(21)
    assert d.last.phase is RestartPhase.CONFIRMED and [r.pids for r in d.of(Retire)] == [frozenset({10})]


def test_r9_the_old_servers_a_handoff_retires_make_no_restart_wanted_while_they_leave() -> None:
    d = Driver(rules(action=HANDOFF, confirm_timeout=30.0))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    d.register(20, B)
    assert d.state.timer is None  # nothing to wait for: they count for nothing until they go
    d.later(29.0)
    assert d.last.phase is RestartPhase.CONFIRMED and d.state.attempt is None
    d.leave(10)  # it finished its work and exited
    assert d.state.retiring == frozenset()
    d.later(1.0)
    assert d.last.phase is RestartPhase.CONFIRMED and d.state.attempt is None


def test_r9_old_servers_still_finishing_after_confirm_timeout_never_make_a_second_handoff() -> None:
    """Review of issue 15: gunicorn's graceful_timeout (30 s) beyond confirm_timeout, an old
    worker still at a long unguarded response: the same revision was wanted again, and its
    USR2 went to the new master, all that serves besides the exiting old one."""
    d = Driver(rules(action=HANDOFF, confirm_timeout=5.0))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    d.register(20, B)
    assert d.last.phase is RestartPhase.CONFIRMED
    d.later(3600.0)  # the old worker is still registered, finishing its response
    d.later(SETTLE)
    assert len(d.of(Act)) == 1 and d.state.attempt is None, names(d.told)[-3:]
    assert d.last.phase is RestartPhase.CONFIRMED


def test_r9_a_handoff_action_that_signalled_nothing_aborts_nothing() -> None:
    """Review of issue 15: the action failed before any signal (a handoff under way), yet
    the machine asked to abort: the executor then stopped the new master of the *previous*
    handoff, whose old master was exiting: nothing left serving."""
    d = Driver(rules(action=HANDOFF, max_attempts=2))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply(ok=False, detail="/run/g.pid.2 names the new master (pid 7), not yet promoted, still after 5 s")
    failed = next(s for s in d.told if s.phase is RestartPhase.FAILED)
    assert not d.of(Abort) and failed.reason is not None
    assert failed.reason.endswith("the old servers still serve")


def test_r9_an_abort_names_the_action_whose_new_servers_it_stops() -> None:
    d = Driver(rules(action=HANDOFF, confirm_timeout=5.0, max_attempts=1))
    d.register(10, A)
    settled(d)
    d.through(Act)
    ticket = d.request.ticket  # type: ignore[union-attr]
    d.reply()
    d.register(20, C)
    d.later(5.0)
    assert d.of(Abort) == [Abort(frozenset({20}), ticket)]


def test_r9_a_handoff_whose_new_servers_never_come_up_aborts_them_and_the_old_serve_on() -> None:
    """Issue 15 item 2: code that fails to import; the old master must keep serving."""
    d = Driver(rules(action=HANDOFF, confirm_timeout=60.0, max_attempts=1))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    until = d.now + 60.0
    assert d.state.timer == until
    d.now = until - 0.001
    d.feed(Tick(d.now))
    assert d.last.phase is RestartPhase.RESTARTING
    d.now = until
    d.feed(Tick(d.now))
    assert [a.pids for a in d.of(Abort)] == [frozenset()] and not d.of(Retire)
    assert d.last.phase is RestartPhase.FAILED
    assert d.last.reason == (
        "not-confirmed: after 60 s the registered servers run aaaaaaa: pids [10]; "
        "the old servers still serve (attempt 1 of 1)"
    )


def test_r9_a_handoff_aborts_new_servers_on_the_wrong_code() -> None:
    d = Driver(rules(action=HANDOFF, confirm_timeout=5.0, max_attempts=1))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    d.register(21, C)  # a commit that is not HEAD
    d.register(20, B)  # new servers on two revisions: not confirmed
    d.later(5.0)
    assert [a.pids for a in d.of(Abort)] == [frozenset({20, 21})]


def test_r9_a_handoff_whose_action_fails_says_the_old_still_serve() -> None:
    d = Driver(rules(action=HANDOFF, max_attempts=1))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply(ok=False, detail="signal: no such process")
    assert not d.of(Abort)  # nothing was signalled: nothing to stop
    assert d.last.reason == "action signal: no such process; the old servers still serve (attempt 1 of 1)"


def test_r9_a_handoff_onto_a_newer_commit_that_fails_the_probe_aborts() -> None:
    d = Driver(rules(action=HANDOFF, verify=True, max_attempts=1))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    d.move(C)
    d.register(20, C)
    assert isinstance(d.request, Verify) and d.request.revision == C
    d.reply(ok=False, detail="exited 1")
    assert [a.pids for a in d.of(Abort)] == [frozenset({20})] and not d.of(Retire)
    failed = next(s for s in d.told if s.phase is RestartPhase.FAILED)
    assert failed.reason == (
        f"not-confirmed: the new servers loaded {C[:12]}; the probe exited 1; "
        "the old servers still serve (attempt 1 of 1)"
    )


def test_r9_plain_restarts_never_retire_or_abort() -> None:
    d = Driver(rules(confirm_timeout=1.0, max_attempts=1))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    d.later(1.0)
    assert not d.of(Abort) and not d.of(Retire)
    assert (
        d.last.reason
        == "not-confirmed: after 1 s the registered servers run aaaaaaa: pids [10] (attempt 1 of 1)"
    )


# -- confirmation (R5) ---------------------------------------------------------------------


def test_r5_confirmed_once_every_registered_server_runs_the_target_and_one_came_since() -> None:
    d = Driver()
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.now += 0.5
    d.reply()
    d.register(11, B)
    assert d.last.phase is RestartPhase.RESTARTING  # 10 still runs the old code
    d.leave(10)
    assert d.last.phase is RestartPhase.CONFIRMED
    assert d.state.restart_seconds == 0.5


def test_r5_servers_registered_before_the_action_do_not_confirm_it() -> None:
    d = Driver(rules(confirm_timeout=2.0))
    d.register(10, A)
    settled(d)
    d.register(11, B)  # a server already on B (restarted by hand)
    d.leave(10)
    assert d.last.phase is RestartPhase.IDLE  # nothing to do: they run HEAD


def test_r5_a_newer_commit_the_new_servers_loaded_is_verified_before_confirming() -> None:
    d = Driver(rules(verify=True))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    d.leave(10)
    mark = d.mark()
    d.register(11, C)  # the watcher has yet to tell: HEAD is read at once
    assert d.since(mark) == [ReadHead(d.state.tickets)]
    d.feed(Head(d.now, C, d.since(mark)[0].ticket))  # type: ignore[union-attr]
    assert isinstance(d.request, Verify) and d.request.revision == C
    d.reply()
    assert phase(d.last) == (RestartPhase.CONFIRMED, None, C) and d.of(Rebind) == [Rebind(C)]


def test_r5_a_newer_commit_that_fails_the_probe_stands_while_the_servers_run_it() -> None:
    d = Driver(rules(verify=True))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    d.leave(10)
    d.move(C)
    d.register(11, C)
    d.reply(ok=False, detail="exited 1")
    reason = f"verify-failed: the servers loaded {C[:12]}; the probe exited 1"
    assert phase(d.last) == (RestartPhase.FAILED, reason, C)
    d.later(60.0)
    assert phase(d.last) == (RestartPhase.FAILED, reason, C)
    d.move(D)  # another revision: the verdict lapses
    assert names(d.told)[-2:] == ["scheduled", "waiting: settle"] and d.last.revision == D


def test_r5_a_confirm_probe_confirms_once_no_registered_server_runs_old_code() -> None:
    d = Driver(rules(confirm_probe=True, confirm_timeout=10.0))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    assert isinstance(d.request, ProbeConfirm) and d.request.revision == B
    d.reply()
    assert d.last.phase is RestartPhase.RESTARTING  # 10 is still on the old code
    d.leave(10)
    assert d.last.phase is RestartPhase.CONFIRMED


def test_r5_the_confirm_probe_backs_off_and_fails_at_the_timeout() -> None:
    d = Driver(rules(confirm_probe=True, confirm_timeout=5.0, max_attempts=1))
    settled(d)
    d.through(Act)
    d.reply()
    started = d.now
    waits = []
    while d.request is not None:
        d.reply(ok=False, detail="exited 7")
        if d.state.timer is None:
            break
        waits.append(round(d.state.timer - d.now, 3))
        d.until_timer()
    assert waits == [0.2, 0.4, 0.8, 1.6, 2.0]
    assert d.now == started + 5.0
    assert d.last.reason == "not-confirmed: within 5 s: the probe exited 7 (attempt 1 of 1)"


def test_r5_a_passing_probe_with_old_servers_left_says_so_at_the_timeout() -> None:
    d = Driver(rules(confirm_probe=True, confirm_timeout=1.0, max_attempts=1))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    while d.request is not None or d.state.timer is not None:
        if d.request is not None:
            d.reply()
        else:
            d.until_timer()
    assert (
        d.last.reason
        == "not-confirmed: within 1 s: the registered servers run aaaaaaa: pids [10] (attempt 1 of 1)"
    )


def test_r5_without_registrations_or_probe_the_exit_status_confirms() -> None:
    d = Driver()
    settled(d)
    d.through(Act)
    d.reply()
    assert d.last.phase is RestartPhase.CONFIRMED and d.request is None


def test_r5_once_servers_registered_their_registrations_confirm_even_when_gone() -> None:
    d = Driver(rules(confirm_timeout=3.0, max_attempts=1))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.leave(10)  # the supervisor stops it, and starts nothing that registers
    d.reply()
    assert d.last.phase is RestartPhase.RESTARTING
    d.later(3.0)
    assert (
        d.last.reason
        == "not-confirmed: after 3 s the registered servers run (none): pids [] (attempt 1 of 1)"
    )


def test_r6_a_failed_action_is_retried_after_the_interval_then_given_up() -> None:
    d = Driver(rules(max_attempts=2, min_interval=10.0))
    settled(d)
    d.through(Act)
    d.reply(ok=False, detail="exited 3")
    assert names(d.told)[-3:] == ["failed: action exited 3", "scheduled", "waiting: min-interval"]
    assert d.told[-3].attempt == 1
    d.until_timer()
    d.through(Act)
    d.reply(ok=False, detail="exited 3")
    assert phase(d.last) == (RestartPhase.FAILED, "action exited 3 (attempt 2 of 2)", B)
    d.later(100.0)
    assert len(d.of(Act)) == 2 and d.state.timer is None


# -- moves of HEAD (R6, R9) ----------------------------------------------------------------

ALL = Rules(settle=SETTLE, min_interval=0.0, markers=True, verify=True, lock=True, drain_probe=True)
BEFORE_ACT = [
    "MARKERS",
    "VERIFY",
    "DRAIN",
    "LOCK",
    "LOCKED_HEAD",
    "LOCKED_MARKERS",
    "LOCKED_DRAIN",
    "LOCKED_VERIFY",
    "FINAL_HEAD",
]


@pytest.mark.parametrize("stage", ["SETTLE", *BEFORE_ACT])
def test_r6_r9_a_move_of_head_before_the_action_starts_over_for_the_new_target(stage: str) -> None:
    d = Driver(ALL)
    d.move(B)
    if stage != "SETTLE":
        d.later(SETTLE)
    for _ in range(20):
        if d.stage == stage:
            break
        d.reply(inflight=0)
    assert d.stage == stage
    held = d.state.attempt is not None and d.state.attempt.lock_held
    old = d.request
    mark = d.mark()
    d.move(C)
    assert (ReleaseLock() in d.since(mark)) == held
    assert phase(d.last) == (RestartPhase.WAITING, "settle", C)
    if old is not None:
        d.feed(d.answer_to(old, inflight=0))  # the stale answer of the old run changes nothing
    assert d.stage == "SETTLE" and d.state.attempt is not None and d.state.attempt.target == C
    d.later(SETTLE)
    d.through(Act, inflight=0)
    assert d.request.revision == C  # type: ignore[union-attr]


def test_r6_a_move_during_the_restart_is_handled_once_it_is_confirmed() -> None:
    d = Driver(rules(confirm_probe=True))
    settled(d)
    d.through(Act)
    d.move(C)
    assert d.last.phase is RestartPhase.RESTARTING and d.state.attempt is not None
    d.reply()
    d.reply()
    assert [s.phase for s in d.told[-3:]] == [
        RestartPhase.CONFIRMED,
        RestartPhase.SCHEDULED,
        RestartPhase.WAITING,
    ]
    assert d.told[-3].revision == B and d.last.revision == C


def test_a_head_that_becomes_unreadable_ends_the_run() -> None:
    d = Driver()
    d.move(B)
    d.move(None)
    assert d.last.phase is RestartPhase.IDLE and d.state.attempt is None


# -- know what runs (R10) ------------------------------------------------------------------


def test_r10_servers_that_started_before_head_moved_are_restarted_by_a_daemon_started_later() -> None:
    """Issue 15 item 4: the daemon took HEAD as loaded and never restarted the old server."""
    d = Driver(head=None)
    d.feed(Loaded(d.now, revision=A))  # the pidfile's process started when HEAD was at A
    d.move(B)
    assert phase(d.last) == (RestartPhase.WAITING, "settle", B)


def test_r10_the_supervisor_telling_a_revision_after_the_first_reading_overrides_the_presumption() -> None:
    d = Driver(head=B)
    assert d.last.phase is RestartPhase.IDLE  # nothing tells yet: HEAD presumed loaded
    d.feed(Loaded(d.now, revision=A))
    assert phase(d.last) == (RestartPhase.WAITING, "settle", B)


def test_r10_servers_that_started_after_the_move_run_head() -> None:
    d = Driver(head=None)
    d.feed(Loaded(d.now, revision=B))
    d.move(B)
    assert d.last.phase is RestartPhase.IDLE and d.state.attempt is None


def test_r10_a_server_that_started_before_head_moved_to_it_does_not_run_it() -> None:
    d = Driver(head=B)
    d.feed(Loaded(d.now, not_revision=B))
    assert d.state.attempt is not None and d.state.attempt.target == B
    d.move(C)  # unknown whether it runs C: the presumption (B) decides
    assert d.state.attempt is not None and d.state.attempt.target == C


def test_r10_a_supervisor_that_cannot_tell_changes_nothing() -> None:
    d = Driver(head=None)
    d.feed(Loaded(d.now, revision=A))
    d.feed(Loaded(d.now))
    d.move(A)
    assert d.state.attempt is None
    assert d.state.belief.runs == A


def test_r10_servers_that_registered_then_went_away_are_never_started_again() -> None:
    """The Hermes WebUI bug: stopped by hand, then started by the daemon's restart."""
    d = Driver()
    d.register(1, B)  # restarted by hand onto B, without the daemon
    d.move(B)
    assert d.state.attempt is None
    d.leave(1)  # then stopped
    assert d.state.attempt is None and d.last.phase is RestartPhase.IDLE
    d.move(C)
    assert d.state.attempt is None and not d.of(Act)
    d.register(2, A)  # a server starts on an old commit: registrations decide again
    assert d.state.attempt is not None and d.state.attempt.target == C


def test_r10_servers_that_leave_before_the_action_end_the_run() -> None:
    d = Driver(rules(verify=True))
    d.register(1, A)
    settled(d)
    probe = d.request
    assert isinstance(probe, Verify)
    d.leave(1)
    assert d.state.attempt is None and d.last.phase is RestartPhase.IDLE
    d.feed(d.answer_to(probe))  # the probe's answer, for a run that is over
    assert d.state.attempt is None and not d.of(Act)


def test_r10_a_supervisor_that_says_none_runs_makes_no_restart_wanted() -> None:
    d = Driver(head=None)
    d.feed(Loaded(d.now, stopped=True))
    d.move(B)
    assert d.state.attempt is None
    d.feed(Loaded(d.now, revision=A))  # started by hand, on A
    assert d.state.attempt is not None and d.state.attempt.target == B


def test_r10_what_tells_what_runs_is_said_while_idle_and_nobody_registers() -> None:
    d = Driver(head=B)
    d.feed(Loaded(d.now, revision=B, why="the server started when HEAD was bbbbbbb"))
    assert phase(d.last) == (RestartPhase.IDLE, "the server started when HEAD was bbbbbbb", None)
    d.feed(Loaded(d.now, why="cannot tell what the servers run: no pidfile"))
    assert d.last.reason == "cannot tell what the servers run: no pidfile"
    d.register(1, B)  # registrations tell now
    assert phase(d.last) == (RestartPhase.IDLE, None, None)


def test_r10_registrations_win_over_what_the_supervisor_tells() -> None:
    d = Driver(head=B)
    d.feed(Loaded(d.now, revision=A))
    d.register(1, B)
    assert d.state.attempt is None and d.last.phase is RestartPhase.IDLE


def test_r10_without_registrations_or_a_supervisor_head_moving_is_a_restart() -> None:
    d = Driver()
    d.move(B)
    d.move(A)  # A->B->A: nothing to do (C8)
    assert d.last.phase is RestartPhase.IDLE and d.state.attempt is None


def test_r10_a_confirmed_restart_is_what_runs_afterwards() -> None:
    d = Driver()
    restarted(d, B)
    d.move(A)
    assert d.state.attempt is not None and d.state.attempt.target == A


# -- reloads (R6) --------------------------------------------------------------------------


def test_r6_a_reload_while_the_probe_runs_judges_again_under_the_new_rules() -> None:
    d = Driver(rules(verify=True))
    settled(d)
    old = d.request
    assert isinstance(old, Verify)
    d.feed(Reload(d.now, rules(verify=True, settle=0.0)))
    assert isinstance(d.request, Verify) and d.request.ticket != old.ticket
    d.feed(Verified(old.ticket, d.now, ok=False, detail="exited 1"))  # the old probe's verdict
    assert d.last.phase is RestartPhase.VERIFYING
    d.reply()
    d.through(Act)


def test_r6_a_reload_forgets_give_ups_and_counts() -> None:
    d = Driver(rules(verify=True))
    settled(d)
    d.reply(ok=False)
    d.feed(Reload(d.now, rules(verify=True)))
    assert isinstance(d.request, Verify) or d.stage == "SETTLE"


def test_r6_a_reload_during_the_restart_discards_its_failure_and_runs_again() -> None:
    d = Driver(rules(max_attempts=1, lock=True))
    settled(d)
    d.through(Act)
    d.feed(Reload(d.now, rules(max_attempts=1, lock=True)))
    mark = d.mark()
    d.reply(ok=False, detail="exited 3")
    assert ReleaseLock() in d.since(mark)
    assert "failed" not in [s.phase.value for s in d.told]
    assert d.stage in ("SETTLE", "SCHEDULED") and d.state.actions == 0


def test_r6_a_reload_during_the_restart_keeps_its_success() -> None:
    d = Driver()
    settled(d)
    d.through(Act)
    d.feed(Reload(d.now, rules()))
    d.reply()
    assert d.last.phase is RestartPhase.CONFIRMED


def test_r6_a_reload_during_confirmation_discards_a_give_up_of_the_old_rules() -> None:
    d = Driver(rules(verify=True))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    d.leave(10)
    d.move(C)
    d.register(11, C)
    d.feed(Reload(d.now, rules(verify=True)))
    d.reply(ok=False)
    assert d.state.gave_up is None


# -- robustness ----------------------------------------------------------------------------


def test_answers_with_a_stale_ticket_are_ignored() -> None:
    d = Driver(rules(markers=True))
    settled(d)
    request = d.request
    assert isinstance(request, CheckMarkers)
    d.feed(Markers(request.ticket + 5, d.now, Verdict.REFUSE, "x"))
    d.feed(Verified(request.ticket, d.now, ok=False))  # the right ticket, the wrong kind
    assert d.last.phase is not RestartPhase.REFUSED
    assert isinstance(d.request, CheckMarkers) and d.request.ticket != request.ticket


def test_time_never_runs_back_for_the_machine() -> None:
    d = Driver()
    d.move(B)
    d.feed(Tick(d.now - 50.0))
    assert d.state.clock == d.now and d.stage == "SETTLE"


def test_a_spurious_tick_changes_nothing_and_asks_for_the_timer_again() -> None:
    d = Driver()
    d.move(B)
    timer = d.state.timer
    assert d.feed(Tick(d.now)) == [Wake(timer)]


def test_while_an_answer_is_awaited_the_only_timer_is_the_backstop_and_none_when_nothing_runs() -> None:
    d = Driver()
    assert d.state.timer is None and not d.of(Wake)
    d.move(B)
    d.later(SETTLE)  # the tick spends the timer; an answer is awaited now
    assert d.request is not None and d.state.timer == d.now + d.state.rules.patience


@pytest.mark.parametrize("stage", ["ACT", "CONFIRM_VERIFY", "LOCK", "VERIFY"])
def test_r3_an_answer_that_never_comes_fails_the_run_and_releases_the_lock(stage: str) -> None:
    """Review of issue 15: an exception on the executor's thread lost the action's answer;
    ACT had no timer, so the machine waited for ever holding the flock (updaters blocked)."""
    action = HANDOFF if stage == "ACT" else REPLACES
    d = Driver(rules(lock=True, verify=True, action=action, max_attempts=1, confirm_timeout=5.0))
    d.register(10, A)
    settled(d)
    if stage == "CONFIRM_VERIFY":
        d.through(Act)
        d.reply()
        d.move(C)
        d.leave(10)
        d.register(20, C)  # a newer commit the new servers loaded: verified before confirmed
    else:
        d.through({"ACT": Act, "LOCK": TakeLock, "VERIFY": Verify}[stage])
    assert d.stage == stage
    asked = d.now
    mark = d.mark()
    d.now = asked + d.state.rules.patience - 0.001
    d.feed(Tick(d.now))
    assert d.stage == stage and all(isinstance(e, Wake) for e in d.since(mark))
    d.until_timer()
    assert d.now == asked + d.state.rules.patience
    assert d.state.attempt is None or d.state.attempt.stage < Stage.LOCK
    assert (ReleaseLock() in d.since(mark)) is (stage != "VERIFY")  # the fail-fast verify: no lock yet
    failed = next(s for s in d.told[::-1] if s.phase is RestartPhase.FAILED)
    assert failed.reason is not None and "no answer from the" in failed.reason
    if stage in ("ACT", "CONFIRM_VERIFY"):
        assert failed.reason.startswith("not-confirmed: no answer")
    if stage == "ACT":
        # Whether it signalled is unknown: the executor stops a new master only if that very
        # action started one (R9).
        assert [a.ticket for a in d.of(Abort)] == [d.of(Act)[-1].ticket]


TIMEOUTS = ("verify_timeout", "action_timeout", "drain_probe_timeout", "confirm_timeout")


@pytest.mark.parametrize("longest", TIMEOUTS)
def test_the_backstop_follows_from_the_policys_longest_timeout(longest: str) -> None:
    from stalewatch.server.restart.policy import RestartPolicy

    timeouts = dict.fromkeys(TIMEOUTS, 9.0)
    policy = RestartPolicy(action=("x",), **{**timeouts, longest: 100.0})  # type: ignore[arg-type]
    assert Rules.of(policy).patience == 2 * 100.0 + ANSWER_MARGIN


def test_a_machine_with_nothing_to_do_says_nothing() -> None:
    state = State(rules())
    state, effects = step(state, Head(1.0, A))
    assert effects == () and state.published.phase is RestartPhase.IDLE


def test_the_first_published_phase_after_a_confirmation_is_not_idle_when_head_is_run() -> None:
    d = Driver()
    restarted(d, B)
    d.register(1, B)
    assert d.last.phase is RestartPhase.CONFIRMED


def test_retry_after_is_told_only_while_a_restart_is_coming() -> None:
    d = Driver(rules(verify=True))
    settled(d)
    d.reply(ok=False)
    assert all((s.retry_after is not None) == s.phase.coming for s in d.told)
    assert all(s.retry_after is None or s.retry_after > 0 for s in d.told)


def test_the_attempt_told_counts_actions_for_the_revision() -> None:
    d = Driver(rules(max_attempts=3))
    restarted(d, B)
    d.register(1, A)
    d.later(SETTLE)
    assert d.last.attempt == 1 and d.last.revision == B
    d.through(Act)
    assert d.last.attempt == 2


# -- the rules a policy makes ----------------------------------------------------------------


def test_the_rules_of_a_policy_say_which_parts_it_has() -> None:
    from pathlib import Path

    from stalewatch.server.restart.policy import RestartPolicy

    bare = Rules.of(RestartPolicy(action=("true",)))
    assert bare == Rules()  # the defaults agree
    full = Rules.of(
        RestartPolicy(
            settle=0.5,
            max_attempts=7,
            min_interval=4.0,
            verify=("v",),
            lock=Path("/l"),
            confirm=("c",),
            confirm_timeout=9.0,
            drain_timeout=20.0,
            on_drain_timeout=DrainOutcome.RESTART,
            drain_probe=("p",),
            drain_poll=0.25,
            reconnect_grace=0.0,
            handoff=True,
            pidfile=Path("/p"),
            signal="USR2",
            action=None,
        )
    )
    assert full == Rules(
        settle=0.5,
        max_attempts=7,
        min_interval=4.0,
        markers=True,  # a handoff's pidfile is looked at with the markers
        verify=True,
        lock=True,
        confirm_probe=True,
        confirm_timeout=9.0,
        drain_timeout=20.0,
        on_drain_timeout=DrainOutcome.RESTART,
        drain_probe=True,
        drain_poll=0.25,
        reconnect_grace=0.0,
        action=HANDOFF,
    )
    for markers in (
        {"update_marker": Path("/m")},
        {"incomplete_markers": (Path("/i"),)},
        {"hold_while": (Path("/h"),)},
    ):
        assert Rules.of(RestartPolicy(action=("true",), **markers)).markers  # type: ignore[arg-type]


def test_the_new_keys_default_to_a_ten_minute_drain_that_refuses() -> None:
    from stalewatch.server.restart.policy import RestartPolicy

    keys = RestartPolicy(action=("true",))
    assert (keys.drain_timeout, keys.on_drain_timeout, keys.drain_probe) == (600.0, DrainOutcome.REFUSE, None)
    assert (keys.drain_probe_timeout, keys.drain_poll, keys.handoff) == (10.0, 1.0, False)


def test_r6_a_last_half_second_of_the_interval_is_waited_out() -> None:
    d = Driver(rules(min_interval=10.0, settle=0.0))
    restarted(d, B)
    d.now += 9.5
    d.move(C)
    assert phase(d.last) == (RestartPhase.WAITING, "min-interval: 1 s left", C)
    assert d.state.timer == d.now + 0.5


# -- what each phase is told at, and with what -------------------------------------------------


def test_r7_every_phase_is_told_with_the_stage_it_was_decided_at() -> None:
    d = Driver(rules(markers=True, verify=True, lock=True, max_attempts=1))
    d.register(1, A, inflight=1)
    d.move(B)
    d.later(SETTLE)
    d.reply(verdict=Verdict.REFUSE, reason="incomplete: /x")
    d.until_timer()
    d.reply()  # markers clean now
    d.reply()  # verified
    d.register(1, A, inflight=0)
    d.reply(acquired=False, detail="/l is held")
    d.until_timer()
    d.through(Act)
    d.reply(ok=False, detail="exited 3")
    stages = [(p.state.phase.value, p.stage) for p in d.of(Publish)]
    assert stages == [
        ("scheduled", Stage.SCHEDULED),
        ("waiting", Stage.SETTLE),
        ("refused", Stage.MARKERS),
        ("verifying", Stage.VERIFY),
        ("waiting", Stage.DRAIN),
        ("waiting", Stage.LOCK),
        ("verifying", Stage.LOCKED_VERIFY),
        ("restarting", Stage.ACT),
        ("failed", Stage.DONE),
    ]


def test_r7_every_phase_but_idle_names_its_revision() -> None:
    d = Driver(rules(verify=True, max_attempts=1, confirm_timeout=1.0))
    d.register(1, A)
    settled(d)
    d.reply(ok=False)  # a give-up
    d.move(C)
    d.later(SETTLE)
    d.through(Act)
    d.reply()
    d.later(1.0)  # not confirmed: the last attempt
    d.move(A)
    assert all((s.revision is None) == (s.phase is RestartPhase.IDLE) for s in d.told), d.told


def test_r6_a_failed_attempt_is_followed_at_once_by_the_next_run() -> None:
    d = Driver(rules(confirm_timeout=2.0, max_attempts=2))
    d.register(1, A)
    settled(d)
    d.through(Act)
    d.reply()
    mark = d.mark()
    d.later(2.0)
    told = [e for e in d.since(mark) if isinstance(e, Publish)]
    assert names([p.state for p in told]) == ["failed: not-confirmed", "scheduled"]
    assert [p.stage for p in told] == [Stage.DONE, Stage.SCHEDULED]
    assert isinstance(d.request, ReadHead)  # no interval, no settle: straight on


def test_r5_a_give_up_for_servers_that_loaded_a_failing_commit_stands_for_old_servers_too() -> None:
    d = Driver(rules(verify=True))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    d.leave(10)
    d.move(C)
    d.register(11, C)
    d.reply(ok=False)
    mark = d.mark()
    d.register(12, A)  # a server on old code: C is wanted, and C is refused
    assert not [e for e in d.since(mark) if isinstance(e, Verify | Act)]
    assert d.last.phase is RestartPhase.FAILED and d.last.revision == C


def test_r9_an_old_server_that_registers_again_after_a_handoff_is_still_old() -> None:
    d = Driver(rules(action=HANDOFF, confirm_timeout=5.0, max_attempts=1))
    d.register(10, A)
    settled(d)
    d.through(Act)
    d.reply()
    d.leave(10)
    d.register(10, A)  # a new connection of an old worker, since the action
    d.register(20, B)
    assert d.last.phase is RestartPhase.CONFIRMED and [r.pids for r in d.of(Retire)] == [frozenset({10})]


# -- the pure parts, one by one -----------------------------------------------------------------


def test_drain_says_what_it_knows() -> None:
    from stalewatch.server.restart import run

    assert run.describe(3, "") == "3 in flight"
    assert run.describe(None, "") == "unknown in flight (the drain probe has not answered)"
    assert run.describe(None, "exited 2") == "unknown in flight (the drain probe exited 2)"


def test_drain_counts_registrations_and_the_probe() -> None:
    from stalewatch.server.restart import run
    from stalewatch.server.restart.inputs import Server

    servers = [Server(1, A, 2), Server(2, A, -4)]
    assert run.in_flight(servers, rules(), None) == 2
    assert run.in_flight(servers, rules(drain_probe=True), None) is None
    assert run.in_flight(servers, rules(drain_probe=True), 3) == 5
    assert run.in_flight(servers, rules(drain_probe=True), -3) == 2


def test_drain_decides_at_exactly_the_bound() -> None:
    from stalewatch.server.restart import run

    bound = rules(drain_timeout=10.0)
    assert run.decide(0, None, 0.0, bound) is run.Next.GO
    assert run.decide(1, None, 50.0, bound) is run.Next.WAIT
    assert run.decide(1, 0.0, 9.999, bound) is run.Next.WAIT
    assert run.decide(None, 0.0, 10.0, bound) is run.Next.REFUSE
    anyway = rules(drain_timeout=10.0, on_drain_timeout=DrainOutcome.RESTART)
    assert run.decide(1, 0.0, 10.0, anyway) is run.Next.RESTART


def test_confirming_tells_new_servers_from_old() -> None:
    from stalewatch.server.restart import run
    from stalewatch.server.restart.inputs import Server

    servers = [Server(1, A, 0, 5.0), Server(2, B, 0, 10.0), Server(3, B, 0, 4.0)]
    assert run.newcomers(servers, 5.0, {1}) == [servers[1]]
    assert run.newcomers(servers, 3.0, set()) == servers
    assert run.registered_on(servers[1:], (B,), 10.0, beside=False) == B
    assert run.registered_on(servers[1:], (B,), 10.5, beside=False) is None  # none since
    assert run.registered_on(servers[1:], (A,), 10.0, beside=False) is None
    assert run.registered_on(servers, (A, B), 5.0, beside=False) is None  # two revisions
    assert run.registered_on(servers, (B,), 5.0, beside=True, old={1}) == B
    assert run.registered_on(servers, (B,), 5.0, beside=True) is None  # 1 counts as new
    assert run.old_code(servers, (B,)) and not run.old_code(servers[1:], (B,))
    assert run.runs(servers) == "aaaaaaa: pids [1]; bbbbbbb: pids [2, 3]"
    assert run.runs([]) == "(none): pids []"


def test_belief_keeps_its_presumption_until_something_tells() -> None:
    from stalewatch.server.restart.state import Belief, wanted

    first = Belief().heard(None).heard(A).heard(B)
    assert first == Belief(presumed=A)
    assert Belief(runs=B, not_runs=C).heard(A) == Belief(B, C, A)
    assert first.confirmed(B) == Belief(runs=B, presumed=A)
    assert first.told(Loaded(0.0, not_revision=C)) == Belief(not_runs=C, presumed=A)
    assert first.told(Loaded(0.0, revision=C)) == Belief(runs=C, presumed=A)
    assert wanted(C, [], Belief(not_runs=C, presumed=C)) == C
    assert wanted(B, [], Belief(not_runs=C, presumed=A)) == B
    assert wanted(A, [], Belief(not_runs=C, presumed=A)) is None
    assert wanted(A, [], Belief()) is None


def test_retry_after_adds_the_waits_up() -> None:
    """Settle and the interval run at once (the longest of them), then the probes and the
    restart, as last measured; a stage's own wait is added to them."""
    d = Driver(rules(min_interval=30.0, verify=True))
    restarted(d, B)
    d.move(C)  # settle (1 s) runs within the interval's 30
    assert phase(d.last) == (RestartPhase.WAITING, "settle", C)
    probes, restart = 2 * d.state.verify_seconds, d.state.restart_seconds
    assert d.last.retry_after == pytest.approx(interval_left(d.state, d.now) + probes + restart)
    d = Driver(rules(markers=True, verify=True))
    settled(d)
    d.reply(verdict=Verdict.WAIT, reason="update-running")  # the next look is 0.5 s away
    assert d.last.retry_after == pytest.approx(0.5 + 2 * d.state.verify_seconds + d.state.restart_seconds)


def test_r7_a_fast_probe_is_measured_as_fast() -> None:
    d = Driver(rules(verify=True))
    settled(d)
    d.now += 0.25
    d.reply()
    assert d.state.verify_seconds == 0.25


def test_r7_r8_what_the_drain_probe_said_before_a_restart_is_not_taken_for_after_it() -> None:
    d = Driver(rules(drain_probe=True, drain_poll=2.0))
    settled(d, B)
    d.reply(inflight=0)
    d.through(Act, inflight=0)
    d.reply()
    assert d.last.phase is RestartPhase.CONFIRMED
    d.move(C)  # new servers: how much they have in flight is unknown until asked
    assert d.last.retry_after == pytest.approx(SETTLE + 2.0 + d.state.restart_seconds)


@pytest.mark.parametrize("outcome", list(DrainOutcome))
def test_r8_work_under_the_lock_after_the_bound_applies_the_bound_there(outcome: DrainOutcome) -> None:
    d = Driver(rules(lock=True, drain_timeout=10.0, on_drain_timeout=outcome))
    d.register(1, A, inflight=1)
    settled(d)
    began = d.state.drain_since
    assert began is not None
    d.later(5.0)
    d.register(1, A, inflight=0)  # drained: the lock next, held by an updater for a while
    d.reply(acquired=False, detail="held")
    d.now = began + 12.0
    d.until_timer()
    d.reply()  # the lock, at last
    d.register(1, A, inflight=1)  # new work meanwhile
    mark = d.mark()
    d.reply()  # HEAD, under the lock: the work in flight, past the bound
    if outcome is DrainOutcome.RESTART:
        assert isinstance(d.request, ReadHead)  # on under the lock: HEAD once more, then act
        d.reply()
    told = [e.state for e in d.since(mark) if isinstance(e, Publish)]
    if outcome is DrainOutcome.RESTART:
        assert (
            names(told) == ["restarting: drain-timeout"]
            and told[0].reason == "drain-timeout: 1 still in flight"
        )
        assert len(d.of(Act)) == 1
    else:
        assert [phase(s) for s in told] == [
            (RestartPhase.REFUSED, "drain-timeout: 1 still in flight after 10 s", B)
        ]
        assert ReleaseLock() in d.since(mark) and not d.of(Act)


def test_r8_a_drain_probe_that_cannot_tell_until_the_bound_says_unknown() -> None:
    d = Driver(rules(drain_probe=True, drain_timeout=3.0))
    settled(d)
    for _ in range(10):
        if d.request is None:
            if d.state.timer is None:
                break
            d.until_timer()
        else:
            d.reply(inflight=None, detail="exited 2")
    assert phase(d.last) == (RestartPhase.REFUSED, "drain-timeout: unknown still in flight after 3 s", B)


def test_r8_a_retry_after_a_failed_action_drains_from_scratch() -> None:
    d = Driver(rules(max_attempts=2, min_interval=5.0, drain_timeout=100.0))
    d.register(1, A, inflight=1)
    settled(d)
    d.later(60.0)
    d.register(1, A, inflight=0)
    d.through(Act)
    d.reply(ok=False)
    d.register(1, A, inflight=1)
    d.until_timer()  # the interval is over
    assert d.last.reason == "drain: 1 in flight" and d.state.drain_since == d.now


def test_each_request_gets_the_next_ticket() -> None:
    d = Driver(rules(markers=True, verify=True))
    settled(d)
    first = d.request
    d.reply()
    assert first == CheckMarkers(1) and d.request == Verify(2, B)


def test_r7_retry_after_adds_up_every_wait_ahead_at_each_phase() -> None:
    """Defaults until measured: a probe takes 1 s, a restart 5 s; the drain probe looks every 2 s."""
    d = Driver(rules(min_interval=30.0, markers=True, verify=True, lock=True, drain_poll=2.0))
    d.register(1, A, inflight=1)
    d.move(B)
    assert [(s.reason, s.retry_after) for s in d.told] == [(None, 10.0), ("settle", 10.0)]  # 1+2+2*1+5
    d.later(SETTLE)
    d.reply(verdict=Verdict.WAIT, reason="hold: /h")
    assert d.last.retry_after == 9.5  # 0.5 to the next look, drain 2, two probes, restart
    d.until_timer()
    d.reply()
    assert d.last.phase is RestartPhase.VERIFYING and d.last.retry_after == 9.0
    d.now += 1.0
    d.reply()
    assert d.last.reason == "drain: 1 in flight" and d.last.retry_after == 8.0  # 2 + 1 + 5
    d.register(1, A, inflight=0)
    d.reply(acquired=False, detail="held")
    assert d.last.reason == "lock: held" and d.last.retry_after == pytest.approx(6.05)
    d.until_timer()
    d.reply()  # the lock
    d.reply()  # HEAD
    d.reply()  # markers
    assert d.last.reason == "under the lock" and d.last.retry_after == 6.0
    d.reply()
    d.reply()  # HEAD
    assert d.last.phase is RestartPhase.RESTARTING and d.last.retry_after == 5.0  # not the interval
    d.reply(ok=False)
    assert [s.phase.value for s in d.told[-3:]] == ["failed", "scheduled", "waiting"]
    assert d.told[-3].retry_after is None
    # No settle again; the last probe was measured at 0 s; the whole interval is ahead.
    assert [s.retry_after for s in d.told[-2:]] == [pytest.approx(30.0 + 5.0)] * 2


def test_r7_idle_counts_no_attempt() -> None:
    d = Driver()
    restarted(d, B)
    d.register(1, A)
    assert d.last.attempt == 1 and d.last.phase is RestartPhase.WAITING
    d.leave(1)
    assert phase(d.last) == (RestartPhase.IDLE, None, None) and d.last.attempt == 0


def test_r5_a_reload_during_confirmation_does_not_change_how_it_is_confirmed() -> None:
    """Found by the properties: a probe-confirmed restart switched to registrations mid-way."""
    d = Driver(rules(confirm_probe=True, confirm_timeout=1.0))
    d.register(1, A)
    settled(d)
    d.through(Act)
    d.leave(1)
    d.reply()
    d.feed(Reload(d.now, rules(confirm_timeout=1.0)))  # no probe any more
    d.reply(ok=False)
    assert d.state.attempt is not None and d.state.timer == d.now + 0.2
    d.until_timer()
    assert isinstance(d.request, ProbeConfirm)
    d.reply()
    assert d.last.phase is RestartPhase.CONFIRMED


def test_r9_old_servers_a_handoff_retires_count_for_nothing_until_all_are_gone() -> None:
    d = Driver(rules(action=HANDOFF, confirm_timeout=30.0))
    d.register(10, A)
    d.register(11, A)
    settled(d)
    d.through(Act)
    d.reply()
    d.register(20, B)
    d.register(21, B)
    d.leave(10)  # one old worker finished; the other is still at work
    assert d.state.retiring == frozenset({11})
    assert d.state.attempt is None and d.last.phase is RestartPhase.CONFIRMED
    d.later(3600.0)
    assert d.state.attempt is None and d.last.phase is RestartPhase.CONFIRMED


def test_r8_a_retry_does_not_take_the_drain_probe_of_before_the_action_for_now() -> None:
    d = Driver(rules(drain_probe=True, drain_poll=2.0, max_attempts=2))
    settled(d, B)
    d.reply(inflight=0)
    d.through(Act, inflight=0)
    d.reply(ok=False)
    assert d.last.phase is RestartPhase.SCHEDULED
    assert d.last.retry_after == pytest.approx(2.0 + d.state.restart_seconds)  # the drain is unknown again


def test_r7_r8_a_new_target_does_not_take_the_drain_probe_of_the_old_one() -> None:
    d = Driver(rules(drain_probe=True, drain_poll=2.0))
    settled(d, B)
    d.reply(inflight=0)
    d.move(C)
    assert d.last.retry_after == pytest.approx(SETTLE + 2.0 + d.state.restart_seconds)


def test_r6_r8_a_reload_gives_the_drain_its_whole_bound_again() -> None:
    d = Driver(rules(drain_timeout=10.0))
    d.register(1, A, inflight=1)
    settled(d)
    began = d.state.drain_since
    d.later(5.0)
    d.feed(Reload(d.now, rules(drain_timeout=10.0)))
    d.later(SETTLE)
    assert d.state.drain_since == d.now and began != d.now
    d.now = began + 10.0  # type: ignore[operator]
    d.feed(Tick(d.now))
    assert d.last.reason == "drain: 1 in flight"
