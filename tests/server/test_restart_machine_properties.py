"""Properties of the pure restart machine over random worlds (hypothesis, R1-R10).

A random world moves HEAD (told or silently), registers and unregisters servers with
work in flight, holds the lock as an updater, answers the machine's requests with
random outcomes (and stale ones), reloads, and lets time pass. After every step the
invariants of issue 15 are checked against what the world knows, not against the
machine's own bookkeeping: no action unless HEAD is the target verified under the lock
in that run, the lock held; never more than ``max_attempts`` actions while HEAD stays
on one revision; never an action with work in flight unless the drain bound passed
with ``restart``; never two actions closer than ``min_interval``; phases of a run in
order; ``retry_after`` covers the known waits; the machine never stalls or raises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from stalewatch.core.phases import RestartPhase
from stalewatch.server.restart.actions import REPLACES, Handoff
from stalewatch.server.restart.effects import (
    Abort,
    Act,
    CheckMarkers,
    Effect,
    ProbeConfirm,
    ProbeDrain,
    Publish,
    ReadHead,
    ReleaseLock,
    Retire,
    Stage,
    TakeLock,
    Verify,
    Wake,
)
from stalewatch.server.restart.inputs import (
    Acted,
    Drain,
    Head,
    Input,
    Loaded,
    Lock,
    Markers,
    Reload,
    Server,
    Servers,
    Tick,
    Verdict,
    Verified,
)
from stalewatch.server.restart.machine import State, step
from stalewatch.server.restart.policy import DrainOutcome, Rules
from tests.support.machine import A, B, C
from tests.support.properties import budget

pytestmark = pytest.mark.unit

REVISIONS = st.sampled_from([A, B, C])
DELAYS = st.sampled_from([0.0, 0.05, 0.3, 0.5, 1.0, 2.0, 5.0, 30.0, 100.0, 700.0])

RULES = st.builds(
    Rules,
    settle=st.sampled_from([0.0, 1.0, 2.0]),
    max_attempts=st.integers(1, 3),
    min_interval=st.sampled_from([0.0, 5.0, 30.0]),
    markers=st.booleans(),
    verify=st.booleans(),
    lock=st.booleans(),
    confirm_probe=st.booleans(),
    confirm_timeout=st.sampled_from([1.0, 10.0]),
    drain_timeout=st.sampled_from([1.0, 20.0, 600.0]),
    on_drain_timeout=st.sampled_from(list(DrainOutcome)),
    drain_probe=st.booleans(),
    drain_poll=st.sampled_from([0.5, 1.0]),
    action=st.sampled_from([REPLACES, Handoff.traits]),
    patience=st.sampled_from([5.0, 135.0]),  # short: answers get lost (the backstop)
)

Request = CheckMarkers | Verify | ProbeDrain | TakeLock | ReadHead | Act | ProbeConfirm


@dataclass
class Checker:
    """What the world saw of the machine, to judge each effect by."""

    rules: Rules
    acts: list[tuple[float, str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # actions per HEAD revision, since it moved
    told_head: str | None = None  # HEAD as last told to the machine
    heads_since_act: set[str | None] = field(default_factory=set)  # what HEAD was since the action
    verified_since_act: set[str] = field(default_factory=set)
    late_verified: str | None = None  # the revision verified under the lock in this run
    late_ticket: int | None = None
    drain_started: float | None = None
    target: str | None = None
    last_publish: Publish | None = None
    handoff_act: bool = False
    old_pids: frozenset[int] = frozenset()
    retired_or_aborted: bool = True
    act_ticket: int | None = None  # the last action's ticket: what Retire and Abort name
    signalled: bool = False  # the last action may have started new servers (not said failed)
    acting: bool = False  # from an action until its run ends
    stopped: bool = False  # the servers went away outside a restart, or were told stopped


class MachineWorld:
    """A random world around the machine; the checker judges every effect."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.head: str | None = A
        self.lock: str | None = None  # "machine", "updater" or None
        self.servers: dict[int, Server] = {}
        self.next_pid = 100
        self.pending: list[Request] = []
        self.answered: list[Request] = []
        self.timer: float | None = None
        self.state = State(Rules())
        self.check = Checker(Rules())
        self.probed: int | None = None  # the drain probe's last answer the machine got
        self.retired: frozenset[int] = frozenset()

    # -- feeding and judging ---------------------------------------------------------------

    def feed(self, event: Input) -> None:
        if isinstance(event, Head):
            self.check.heads_since_act.add(event.revision)
        if isinstance(event, Head) and event.revision != self.check.told_head:
            self.check.told_head = event.revision
            self.check.counts = {}  # HEAD moved: a new revision, its own bound
        if isinstance(event, Reload):
            self.check.rules = event.rules
            self.check.counts = {}
            self.check.drain_started = None
        if isinstance(event, Drain):
            state = self.state.attempt
            if state is not None and state.ask == event.ticket:
                self.probed = None if event.inflight is None else max(0, event.inflight)
        if isinstance(event, Acted) and event.ticket == self.check.act_ticket and not event.ok:
            attempt = self.state.attempt
            if attempt is not None and attempt.ask == event.ticket:
                self.check.signalled = False  # it says it failed: it signalled nothing
        if isinstance(event, Verified) and event.ok:
            self.check.verified_since_act |= {
                r.revision for r in self.answered if isinstance(r, Verify) and r.ticket == event.ticket
            }
        if isinstance(event, Verified) and event.ticket == self.check.late_ticket and event.ok:
            self.check.late_verified = next(
                (r.revision for r in self.answered if isinstance(r, Verify) and r.ticket == event.ticket),
                None,
            )
        self.state, effects = step(self.state, event)
        for effect in effects:
            self.judge(effect)
        retired, self.retired = self.retired, frozenset()
        if retired & set(self.servers):  # the old master stops: its workers go
            for pid in retired:
                self.servers.pop(pid, None)
            self.servers_changed()

    def judge(self, effect: Effect) -> None:
        check = self.check
        if isinstance(effect, Publish):
            self.judge_publish(effect)
        elif isinstance(effect, Wake):
            self.timer = effect.at
        elif isinstance(effect, ReleaseLock):
            if self.lock == "machine":
                self.lock = None
            check.late_verified = None
        elif isinstance(effect, Verify) and self.last_stage() is Stage.LOCKED_VERIFY:
            check.late_ticket = effect.ticket
        elif isinstance(effect, Act):
            self.judge_act(effect)
        elif isinstance(effect, Retire):
            assert check.handoff_act and not check.retired_or_aborted, "retire without a handoff"
            acted_at, revision = check.acts[-1]
            newcomers = [s for s in self.servers.values() if s.since >= acted_at and s.pid not in effect.pids]
            assert len(newcomers) >= max(1, len(effect.pids)), "retired before as many new ones came (R9)"
            # They run the target, or a HEAD since the action that passed the probe (R2, R5).
            loaded = {s.revision for s in newcomers} - {revision}
            assert loaded <= check.heads_since_act, loaded
            if check.rules.verify:
                assert loaded <= check.verified_since_act, loaded
            assert effect.pids == check.old_pids
            assert effect.ticket == check.act_ticket, "retired another action's old servers (R9)"
            check.retired_or_aborted = True
            self.retired = effect.pids
        elif isinstance(effect, Abort):
            assert check.handoff_act and not check.retired_or_aborted, "abort without a handoff"
            assert effect.ticket == check.act_ticket, "aborted another action's new servers (R9)"
            assert check.signalled, "aborted after an action that signalled nothing (R9)"
            check.retired_or_aborted = True
        if isinstance(effect, Request):
            self.pending.append(effect)

    def last_stage(self) -> Stage | None:
        return None if self.check.last_publish is None else self.check.last_publish.stage

    def judge_publish(self, effect: Publish) -> None:
        check, told = self.check, effect.state
        assert (told.revision is None) == (told.phase is RestartPhase.IDLE), told
        last = check.last_publish
        if last is not None:
            # Never told twice in a row (R7: only changes are published).
            assert (last.state.phase, last.state.reason, last.state.revision) != (
                told.phase,
                told.reason,
                told.revision,
            )
            same_run = (
                last.state.revision == told.revision
                and effect.stage not in (Stage.SCHEDULED, Stage.IDLE)
                and last.stage is not Stage.IDLE
            )
            if same_run:
                assert effect.stage >= last.stage, f"phases out of order: {last} then {effect}"
        if effect.stage is Stage.SCHEDULED and told.revision != check.target:
            check.target = told.revision
            check.drain_started = None
        if effect.stage is Stage.SCHEDULED and (last is None or last.stage in (Stage.IDLE, Stage.DONE)):
            # A run after a told outcome (idle, confirmed, failed, refused) drains afresh:
            # its bound counts from its own drain, never from one long over (R8). A start
            # over within a run (the re-check under the lock) keeps counting.
            check.drain_started = None
        if effect.stage is Stage.SCHEDULED:
            check.late_verified = None
        if effect.stage in (Stage.SCHEDULED, Stage.DONE, Stage.IDLE):
            check.acting = False
        if told.reason is not None and told.reason.startswith("drain:") and check.drain_started is None:
            check.drain_started = self.now
        if told.phase.coming:
            assert told.retry_after is not None and told.retry_after > 0
            if effect.stage < Stage.ACT and check.acts:
                interval = check.acts[-1][0] + check.rules.min_interval - self.now
                assert told.retry_after >= interval, f"retry_after {told.retry_after} < interval {interval}"
            if effect.stage is Stage.SETTLE:
                assert told.retry_after >= check.rules.settle
            if effect.stage is Stage.DRAIN:
                assert told.retry_after >= check.rules.drain_poll
        else:
            assert told.retry_after is None
        check.last_publish = effect

    def in_flight(self) -> float:
        total = sum(max(0, s.inflight) for s in self.servers.values())
        if self.check.rules.drain_probe:
            return math.inf if self.probed is None else total + self.probed
        return total

    def judge_act(self, effect: Act) -> None:
        check, rules, now = self.check, self.check.rules, self.now
        assert self.servers or not check.stopped, "started servers that were stopped (R10)"
        check.acting = True
        assert effect.revision == self.head, "acted on a revision HEAD is not on (R9)"
        assert effect.revision == check.told_head
        if rules.lock:
            assert self.lock == "machine", "acted without the lock (R3)"
        if rules.verify:
            assert check.late_verified == effect.revision, "acted without verifying under the lock (R9)"
        if self.in_flight() > 0:
            assert rules.on_drain_timeout is DrainOutcome.RESTART, "cut off work in flight (R8)"
            assert check.drain_started is not None and now >= check.drain_started + rules.drain_timeout
        if check.acts:
            assert now - check.acts[-1][0] >= rules.min_interval, "two actions too close (R6)"
        check.counts[effect.revision] = check.counts.get(effect.revision, 0) + 1
        assert check.counts[effect.revision] <= rules.max_attempts, "over the bound per revision (R6, R10)"
        assert effect.action == rules.action
        check.acts.append((now, effect.revision))
        check.heads_since_act = {check.told_head}
        check.verified_since_act = set()
        check.late_verified = None
        check.drain_started = None
        check.handoff_act = effect.action.retires
        check.old_pids = frozenset(self.servers)
        check.retired_or_aborted = False
        check.act_ticket = effect.ticket
        check.signalled = True
        self.probed = None

    # -- the world -------------------------------------------------------------------------

    def start(self, rules: Rules, loaded: str | None, told: bool) -> None:
        self.state = State(rules, started=self.now)  # the daemon starts with the world
        self.check = Checker(rules)
        if loaded is not None:
            self.feed(Loaded(self.now, revision=loaded))
        if told:
            self.feed(Head(self.now, self.head))

    def servers_changed(self) -> None:
        before = self.state.servers
        if self.servers:
            self.check.stopped = False
        elif before and not self.check.acting:
            self.check.stopped = True
        self.feed(Servers(self.now, tuple(self.servers.values())))

    def tell(self, revision: str | None, not_revision: str | None, stopped: bool) -> None:
        if revision is not None or not_revision is not None:
            self.check.stopped = False
        elif stopped:
            self.check.stopped = True
        self.feed(Loaded(self.now, revision=revision, not_revision=not_revision, stopped=stopped))

    def move(self, revision: str | None, silent: bool) -> None:
        self.head = revision
        if not silent:
            self.feed(Head(self.now, revision))

    def register(self, pid: int, revision: str, inflight: int) -> None:
        old = self.servers.get(pid)
        since = old.since if old is not None and old.revision == revision else self.now
        self.servers[pid] = Server(pid, revision, inflight, since)
        self.servers_changed()

    def leave(self, pid: int) -> None:
        self.servers.pop(pid, None)
        self.servers_changed()

    def new_servers(self, count: int, revision: str, *, replace: bool) -> None:
        """What a supervisor does: new servers come up (the old go, unless a handoff)."""
        if replace:
            self.servers.clear()
        for _ in range(count):
            self.next_pid += 1
            self.servers[self.next_pid] = Server(self.next_pid, revision, 0, self.now)
        self.servers_changed()

    def time_passes(self, delay: float) -> None:
        self.now += delay
        if self.timer is not None and self.now >= self.timer:
            self.timer = None
            self.feed(Tick(self.now))

    def updater(self, take: bool) -> None:
        if take and self.lock is None:
            self.lock = "updater"
        elif not take and self.lock == "updater":
            self.lock = None

    def awaited(self) -> Request | None:
        attempt = self.state.attempt
        ask = None if attempt is None else attempt.ask
        for request in self.pending:
            if request.ticket == ask:
                return request
        return self.pending[-1] if self.pending else None

    def work(self, outcomes: list[Outcome]) -> None:
        """The executor at work: answer what is awaited, else wait for the timer."""
        for outcome in outcomes:
            request = self.awaited()
            if request is None:
                if self.timer is None:
                    return
                self.now = max(self.now, self.timer)
                self.timer = None
                self.feed(Tick(self.now))
                continue
            self.answer(request, outcome)

    def answer(self, request: Request, outcome: Outcome) -> None:
        if outcome.bump is not None and self.servers:
            pids = sorted(self.servers)
            old = self.servers[pids[outcome.bump % len(pids)]]
            self.register(old.pid, old.revision, outcome.bump % 3)
        if request not in self.pending:
            return  # the bump ended the run that asked
        self.pending.remove(request)
        self.answered.append(request)
        self.now += outcome.delay
        self.feed(self.reply(request, outcome))
        if isinstance(request, Act) and outcome.good and outcome.follow and self.head is not None:
            self.new_servers(1 + outcome.inflight_or_zero % 2, self.head, replace=not request.action.beside)

    def stale(self, outcome: Outcome) -> None:
        """An answer to a request answered before (or never awaited): must change nothing."""
        if self.answered:
            request = self.answered[outcome.inflight_or_zero % len(self.answered)]
            self.feed(self.reply(request, outcome))

    def reply(self, request: Request, outcome: Outcome) -> Input:
        now, ticket, good = self.now, request.ticket, outcome.good
        if isinstance(request, CheckMarkers):
            verdict = outcome.verdict
            return Markers(ticket, now, Verdict.GO if good else verdict, "" if good else f"marker {verdict}")
        if isinstance(request, Verify):
            return Verified(ticket, now, good, "" if good else "exited 1")
        if isinstance(request, ProbeDrain):
            gone = request.pids if good else frozenset()  # departed servers' processes exit, or not yet
            return Drain(ticket, now, 0 if good else outcome.inflight, "" if good else "probe said so", gone)
        if isinstance(request, TakeLock):
            if self.lock == "updater" or not good:
                error = "cannot open" if outcome.verdict is Verdict.REFUSE and not good else None
                return Lock(ticket, now, acquired=False, detail="held", error=error)
            attempt = self.state.attempt
            if attempt is not None and attempt.ask == ticket:
                self.lock = "machine"
            return Lock(ticket, now, acquired=True)
        if isinstance(request, ReadHead):
            return Head(now, self.head, ticket)
        if isinstance(request, Act):
            return Acted(ticket, now, good, "" if good else "exited 3")
        return Verified(ticket, now, good, "" if good else "exited 1")

    # -- invariants --------------------------------------------------------------------------

    def invariants(self) -> None:
        s = self.state
        if s.attempt is not None:
            assert s.attempt.ask is not None or s.timer is not None, f"stalled at {s.attempt.stage}"
            if s.attempt.ask is not None:  # the only timer then: the backstop (R3)
                assert s.timer == s.attempt.asked_at + s.rules.patience, "no backstop for an answer"
        assert s.timer is None or s.timer > self.now, "a timer in the past: a transition was missed"
        if self.lock == "machine":
            assert s.attempt is not None and s.attempt.lock_held, "the lock leaked (R3)"
        last = self.check.last_publish
        if last is not None:
            assert s.published == last.state


@dataclass(frozen=True)
class Outcome:
    """How the world answers one request."""

    good: bool
    verdict: Verdict
    inflight: int | None
    delay: float
    follow: bool  # after a good action, new servers come up on HEAD
    bump: int | None  # meanwhile, a server's work in flight changes

    @property
    def inflight_or_zero(self) -> int:
        return self.inflight or 0


OUTCOMES = st.builds(
    Outcome,
    good=st.sampled_from([True] * 9 + [False]),
    verdict=st.sampled_from(list(Verdict)),
    inflight=st.none() | st.integers(0, 2),
    delay=st.sampled_from([0.0, 0.0, 0.1, 1.0, 3.0]),
    follow=st.sampled_from([True, True, False]),
    bump=st.none() | st.none() | st.integers(0, 5),
)
PIDS = st.integers(1, 4)
STEPS = st.one_of(
    st.tuples(st.just("move"), st.none() | REVISIONS, st.booleans()),
    st.tuples(st.just("register"), PIDS, REVISIONS, st.integers(-1, 3)),
    st.tuples(st.just("leave"), PIDS),
    st.tuples(st.just("new_servers"), st.integers(1, 2), REVISIONS, st.booleans()),
    st.tuples(st.just("tell"), st.none() | REVISIONS, st.none() | REVISIONS, st.booleans()),
    st.tuples(st.just("reload"), RULES),
    st.tuples(st.just("time"), DELAYS),
    st.tuples(st.just("tick")),
    st.tuples(st.just("updater"), st.booleans()),
    st.tuples(st.just("stale"), OUTCOMES),
)
COMMIT = st.tuples(st.just("move"), REVISIONS, st.just(False))
# Each step of the world, then the executor at work for a while (answers, timers).
PLAN = st.lists(st.tuples(st.one_of(STEPS, COMMIT), st.lists(OUTCOMES, max_size=10)), min_size=1, max_size=25)


def play(world: MachineWorld, plan: list[tuple[tuple[Any, ...], list[Outcome]]]) -> None:
    for (kind, *args), outcomes in plan:
        if kind == "move":
            world.move(*args)
        elif kind == "register":
            world.register(*args)
        elif kind == "leave":
            world.leave(*args)
        elif kind == "new_servers":
            world.new_servers(args[0], args[1], replace=args[2])
        elif kind == "tell":
            world.tell(*args)
        elif kind == "reload":
            world.feed(Reload(world.now, args[0]))
        elif kind == "time":
            world.time_passes(*args)
        elif kind == "tick":
            world.feed(Tick(world.now))
        elif kind == "updater":
            world.updater(*args)
        elif kind == "work":
            world.work(*args)
        else:
            world.stale(*args)
        world.invariants()
        world.work(outcomes)
        world.invariants()


_GO = Outcome(good=True, verdict=Verdict.GO, inflight=None, delay=0.0, follow=True, bump=None)


@pytest.mark.timeout(300)  # mutation testing runs it slowly
@budget(100)
@given(rules=RULES, loaded=st.none() | REVISIONS, told=st.booleans(), plan=PLAN)
@example(  # found by a mutation run's own seed: a drain waiting only for the servers'
    # counts (a poll after the announcement) told a retry_after short of that wait (R7)
    rules=Rules(settle=0.0, max_attempts=1, min_interval=0.0, confirm_timeout=1.0, drain_timeout=1.0),
    loaded=None,
    told=False,
    plan=[
        (("move", "b" * 40, False), []),
        (("move", "a" * 40, False), [_GO] * 10),
        (("move", "b" * 40, False), []),
    ],
)
def test_r1_r10_hold_in_any_world(
    rules: Rules, loaded: str | None, told: bool, plan: list[tuple[tuple[Any, ...], list[Outcome]]]
) -> None:
    """Every action on a verified, locked, drained HEAD; bounds; order; retry_after; no stall."""
    world = MachineWorld()
    world.start(rules, loaded, told)
    play(world, plan)


ANY_INPUT = st.one_of(
    st.builds(Head, st.floats(-1e3, 1e6), st.none() | REVISIONS, st.none() | st.integers(-2, 40)),
    st.builds(
        Servers,
        st.floats(-1e3, 1e6),
        st.lists(
            st.builds(Server, st.integers(0, 5), REVISIONS, st.integers(-5, 10**12), st.floats(-1e3, 1e6)),
            max_size=4,
        ).map(tuple),
    ),
    st.builds(Loaded, st.floats(-1e3, 1e6), st.none() | REVISIONS, st.none() | REVISIONS, st.booleans()),
    st.builds(Reload, st.floats(-1e3, 1e6), RULES),
    st.builds(Tick, st.floats(-1e3, 1e6)),
    st.builds(
        Markers,
        st.integers(-2, 40),
        st.floats(-1e3, 1e6),
        st.sampled_from(list(Verdict)),
        st.text(max_size=5),
    ),
    st.builds(Verified, st.integers(-2, 40), st.floats(-1e3, 1e6), st.booleans(), st.text(max_size=5)),
    st.builds(Drain, st.integers(-2, 40), st.floats(-1e3, 1e6), st.none() | st.integers(-5, 10**12)),
    st.builds(
        Lock,
        st.integers(-2, 40),
        st.floats(-1e3, 1e6),
        st.booleans(),
        st.text(max_size=5),
        st.none() | st.text(max_size=5),
    ),
    st.builds(Acted, st.integers(-2, 40), st.floats(-1e3, 1e6), st.booleans()),
    st.builds(Verified, st.integers(-2, 40), st.floats(-1e3, 1e6), st.booleans()),
)


@pytest.mark.timeout(300)
@budget(100)
@given(rules=RULES, inputs=st.lists(ANY_INPUT, max_size=40))
def test_any_input_sequence_never_raises_and_never_stalls(rules: Rules, inputs: list[Input]) -> None:
    """Whatever the executor feeds (stale tickets, time running back, odd counts)."""
    state = State(rules)
    for event in inputs:
        state, effects = step(state, event)
        assert all(isinstance(e, Effect) for e in effects)
        if state.attempt is not None:
            assert state.attempt.ask is not None or state.timer is not None
        assert state.timer is None or state.timer > state.clock
