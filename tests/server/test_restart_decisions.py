"""The restart machine's small pure decisions, one value at a time (issue 20's survivors):
what a pidfile refusal does to a run, what the servers are believed to run, the estimate."""

from __future__ import annotations

import pytest

from stalewatch.core.phases import RestartPhase
from stalewatch.server.restart.effects import Act
from stalewatch.server.restart.inputs import Acted, Loaded, Verdict
from stalewatch.server.restart.policy import Rules
from stalewatch.server.restart.run import estimate
from stalewatch.server.restart.state import Belief, wanted
from tests.support.machine import A, B, C, Driver, phase

pytestmark = pytest.mark.unit


def _acting(driver: Driver) -> Act:
    driver.move(B)
    driver.later(1.0)
    driver.through(Act)
    request = driver.request
    assert isinstance(request, Act)
    return request


def test_r10_a_signal_refused_on_purpose_gives_up_on_the_revision_without_retrying() -> None:
    d = Driver(Rules(settle=1.0, min_interval=0.0, max_attempts=3))
    act = _acting(d)
    d.feed(Acted(act.ticket, d.now, False, "pid 12 is not the process the pidfile names", refused=True))
    assert phase(d.last) == (RestartPhase.REFUSED, "signal: pid 12 is not the process the pidfile names", B)
    d.later(1000.0)
    assert len(d.of(Act)) == 1 and d.state.timer is None  # it stands: nothing was done, nothing retried


def test_r6_a_failed_action_is_a_failure_not_a_refusal() -> None:
    d = Driver(Rules(settle=1.0, min_interval=0.0, max_attempts=1))
    act = _acting(d)
    d.feed(Acted(act.ticket, d.now, False, "exited 3"))
    assert phase(d.last) == (RestartPhase.FAILED, "action exited 3 (attempt 1 of 1)", B)


def test_an_action_that_succeeded_is_confirmed_whatever_else_it_says() -> None:
    told = []
    for refused in (False, True):
        d = Driver(Rules(settle=1.0, min_interval=0.0))
        act = _acting(d)
        d.feed(Acted(act.ticket, d.now, True, "", refused=refused))
        told.append([phase(state) for state in d.told])
    assert told[0] == told[1] and told[1][-1][0] is RestartPhase.CONFIRMED


def test_a_belief_keeps_its_presumption_through_every_change() -> None:
    belief = Belief(presumed=A)
    assert belief.gone() == Belief(None, None, A, stopped=True)
    assert Belief(B, C, A).gone() == Belief(None, None, A, True)
    assert belief.confirmed(B) == Belief(B, None, A, False)
    assert belief.told(Loaded(0.0, revision=B)) == Belief(B, None, A)
    assert belief.told(Loaded(0.0, not_revision=B)) == Belief(None, B, A)
    assert belief.told(Loaded(0.0, stopped=True)) == Belief(None, None, A, True)
    assert belief.told(Loaded(0.0)) is belief


def test_the_first_head_heard_is_presumed_and_keeps_what_else_is_known() -> None:
    stopped = Belief(B, C, None, stopped=True)
    assert stopped.heard(A) == Belief(B, C, A, True)
    assert Belief(runs=B).heard(A) == Belief(B, None, A, False)
    assert Belief(presumed=A).heard(B) == Belief(presumed=A)  # only the first
    assert Belief().heard(None) == Belief()  # unreadable: nothing presumed


def test_a_belief_says_what_it_knows() -> None:
    """The log of a policy that cannot ask (issue 29: it said `presumed ... B` of servers on A)."""
    assert Belief(presumed=A).describe() == f"what they run is presumed to be {A[:7]}, the loaded revision"
    assert Belief(presumed=A).confirmed(B).describe() == f"they run {B[:7]}"
    assert Belief(None, B, A).describe() == f"they do not run {B[:7]}"
    assert Belief(presumed=A).gone().describe().startswith("no server runs")


def test_stopped_servers_want_no_restart_and_a_confirmed_one_wants_what_it_does_not_run() -> None:
    assert wanted(B, (), Belief(presumed=A).gone()) is None
    assert wanted(B, (), Belief(presumed=A)) == B
    assert wanted(A, (), Belief(presumed=A)) is None
    assert wanted(B, (), Belief(presumed=A).confirmed(B)) is None
    assert wanted(C, (), Belief(presumed=A).confirmed(B)) == C
    assert wanted(B, (), Belief(None, B, None)) == B
    assert wanted(None, (), Belief(presumed=A)) is None


@pytest.mark.parametrize(
    ("settle", "verify", "verify_seconds", "restart_seconds", "expected"),
    [
        (2.0, False, 5.0, 3.0, 5.0),  # no probe: settle and the restart
        (2.0, True, 5.0, 3.0, 15.0),  # a probe runs twice (fail fast, then under the lock)
        (0.0, False, 0.0, 0.0, 0.0),
    ],
)
def test_r7_the_estimate_is_settle_two_probes_and_the_restart(
    settle: float, verify: bool, verify_seconds: float, restart_seconds: float, expected: float
) -> None:
    assert estimate(settle, verify, verify_seconds, restart_seconds) == expected


def test_r7_a_confirmation_stays_told_while_nothing_else_is() -> None:
    d = Driver(Rules(settle=1.0, min_interval=0.0))
    act = _acting(d)
    d.feed(Acted(act.ticket, d.now, True, ""))
    confirmed = d.last
    assert confirmed.phase is RestartPhase.CONFIRMED
    d.later(100.0)
    d.move(B)  # HEAD read again, unchanged
    d.feed(Loaded(d.now, revision=B, why="the pidfile's server started after HEAD moved to it"))
    assert d.last == confirmed and d.told[-1] == confirmed


def test_r8_the_drain_is_told_at_once_after_another_wait() -> None:
    # A changed count is told at most once per drain_poll, but the drain's first phase is
    # news: right after "waiting: hold", it is told at once, not a drain_poll later.
    d = Driver(Rules(settle=1.0, min_interval=0.0, markers=True, drain_poll=100.0))
    d.register(12, A, inflight=2)
    d.move(B)
    d.later(1.0)
    d.reply(verdict=Verdict.WAIT, reason="hold: /srv/app/.updating exists")
    assert phase(d.last) == (RestartPhase.WAITING, "hold: /srv/app/.updating exists", B)
    d.until_timer()
    d.reply()  # the markers say go
    assert phase(d.last) == (RestartPhase.WAITING, "drain: 2 in flight", B)
    assert d.last.inflight == 2
