"""One step of the restart machine: the state it builds, the effects it asks for, and
the pure decisions it takes on the way (see :mod:`.machine`).

:class:`Run` is the bookkeeping shared by the machine's transitions (:mod:`.stages`,
:mod:`.machine`): changing the run under way, giving tickets to requests, telling a
phase once with a truthful ``retry_after``, asking for the next wake-up, and the
outcomes that end a run (confirmed, failed, a give-up). It is created for one step and
thrown away; only its :class:`~.state.State` survives.

**The drain** (R8). Registered servers say what they have in flight; a server that does
not register is asked by the drain probe; the restart waits, ``drain_timeout`` at most,
then ``on_drain_timeout`` decides. A server whose registration went away with work in
flight outside the restart's own action took its count with it, not its work: it stays
counted (:class:`~.state.Departed`) until it registers again or its process is gone
(without a pid: for ``reconnect_grace``); at most :data:`~.state.DEPARTED` are kept.

**Confirmation** (R5, R9). Plain restarts: every registered server runs one revision,
the target or HEAD now, and at least one registered since the action. New servers
beside the old (``Traits.beside``): those registered since the action, not among the
old, all run one such revision, and as many of them as old ones (at least one).
Servers are counted as processes, by pid.

**retry_after** (R7): every wait the machine knows of, added up; probe and restart
times as last measured. A lower bound on what is known, never a promise.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from ...core.phases import RestartPhase, RestartState
from .effects import Abort, Effect, ProbeDrain, Publish, Rebind, ReleaseLock, Retire, Stage, Wake
from .inputs import Server
from .policy import DrainOutcome, Rules
from .state import DEPARTED, MARKER_POLL, Attempt, Departed, GiveUp, Locking, State, Taken, interval_left


def grace(rules: Rules) -> float:
    """Seconds silence is not taken for nothing in flight after the daemon starts, or a
    pid-less server leaves: the servers may be reconnecting (never past the drain's bound)."""
    return min(rules.reconnect_grace, rules.drain_timeout)


def held(departed: Sequence[Departed], now: float, rules: Rules) -> tuple[Departed, ...]:
    """The departed servers whose work still counts (see the module doc)."""
    return tuple(d for d in departed if d.pid > 0 or now < d.left + grace(rules))[-DEPARTED:]


class Next(enum.Enum):
    """What a drain decision says: go on, wait, or the bound's outcome."""

    GO = "go"
    WAIT = "wait"
    RESTART = "restart"  # the bound passed: restart anyway
    REFUSE = "refuse"  # the bound passed: give up on this revision


def in_flight(
    servers: Sequence[Server], rules: Rules, probed: int | None, departed: Sequence[Departed] = ()
) -> int | None:
    """The work in flight: the registrations', the departed's still held, plus ``probed``,
    the drain probe's last answer (``None``: failed or not run yet, so the total)."""
    total = sum(max(0, server.inflight) for server in servers) + sum(d.inflight for d in departed)
    if not rules.drain_probe:
        return total
    return None if probed is None else total + max(0, probed)


def describe(total: int | None, detail: str) -> str:
    """``3 in flight``, or what is known when the probe cannot tell."""
    if total is None:
        return f"unknown in flight (the drain probe {detail or 'has not answered'})"
    return f"{total} in flight"


def decide(total: int | None, since: float | None, now: float, rules: Rules) -> Next:
    """Whether to go on, wait, or apply the bound (reached at exactly ``since + drain_timeout``;
    ``since``: when the drain began, ``None``: now)."""
    if total == 0:
        return Next.GO
    if since is None or now < since + rules.drain_timeout:
        return Next.WAIT
    return Next.RESTART if rules.on_drain_timeout is DrainOutcome.RESTART else Next.REFUSE


def newcomers(servers: Sequence[Server], acted_at: float, old: Collection[int]) -> list[Server]:
    """The servers registered since the action that are not among the old ones."""
    return [s for s in servers if s.since >= acted_at and s.pid not in old]


def registered_on(
    servers: Sequence[Server],
    heads: Collection[str | None],
    acted_at: float,
    *,
    beside: bool,
    old: Collection[int] = (),
) -> str | None:
    """The revision the restarted servers run, once confirmed, among ``heads`` (the
    target, and HEAD now); else ``None``."""
    group = newcomers(servers, acted_at, old) if beside else list(servers)
    revisions = {s.revision for s in group}
    if len(revisions) != 1 or (beside and len({s.pid for s in group}) < max(1, len(set(old)))):
        return None
    if not beside and not any(s.since >= acted_at for s in group):
        return None
    (revision,) = revisions
    return revision if revision in heads else None


def old_code(servers: Sequence[Server], heads: Collection[str | None]) -> bool:
    """Whether a registered server runs other code than ``heads`` (a confirm probe is not enough)."""
    return any(s.revision not in heads for s in servers)


def runs(servers: Sequence[Server]) -> str:
    """Who runs what: ``1a2b3c4: pids [10, 11]; ...`` (``(none): pids []`` when nobody)."""
    table: dict[str, list[int]] = {}
    for server in servers:
        table.setdefault(server.revision[:7], []).append(server.pid)
    return "; ".join(f"{rev}: pids {pids}" for rev, pids in (table or {"(none)": []}).items())


def estimate(settle: float, verify: bool, verify_seconds: float, restart_seconds: float) -> float:
    """Seconds from a new commit to new servers when nothing else waits: settle, the two
    verify probes and the restart, as last measured (a server that sees a commit first
    tells ``estimate + max(0, earliest - now)``)."""
    return settle + (2 * verify_seconds if verify else 0.0) + restart_seconds


class Run:
    """The state being built by one step (``s``) and the effects asked so far."""

    def __init__(self, state: State, now: float) -> None:
        self.now = max(now, state.clock)  # time never runs back, whatever the executor feeds
        self.s = replace(state, clock=self.now)
        self.effects: list[Effect] = []

    def put(self, attempt: Attempt) -> None:
        """The run under way is now ``attempt`` (changed with ``dataclasses.replace``)."""
        self.s = replace(self.s, attempt=attempt)

    def enter(self, stage: Stage, attempt: Attempt | None = None, *, deadline: float | None = None) -> None:
        """The run under way (or ``attempt``, a change of it) enters ``stage``, its timer at
        ``deadline`` (none by default)."""
        a = attempt or self.s.attempt
        if a is not None:
            self.put(replace(a, stage=stage, deadline=deadline))

    def next(self, attempt: Attempt | None = None) -> None:
        """The run under way (or ``attempt``, a change of it) passes its stage: on to the
        next (the stages are in the order a run moves)."""
        a = attempt or self.s.attempt
        if a is not None:
            self.enter(Stage(a.stage + 1), a)

    def wait_until(self, deadline: float | None) -> None:
        """The run under way's timer: its next look (nothing when there is none)."""
        a = self.s.attempt
        if a is not None:
            self.put(replace(a, deadline=deadline))

    def ticket(self) -> int:
        """A new ticket for a request."""
        self.s = replace(self.s, tickets=self.s.tickets + 1)
        return self.s.tickets

    def ask(self, request: Callable[[int], Effect]) -> None:
        """Ask for something whose answer the run now awaits (one at a time)."""
        ticket = self.ticket()
        a = self.s.attempt
        if a is not None:
            self.put(replace(a, ask=ticket, asked_at=self.now))
        self.effects.append(request(ticket))

    def drop(self) -> None:
        """End the run under way, releasing the lock it holds."""
        a = self.s.attempt
        if a is not None and a.lock_held:
            self.effects.append(ReleaseLock())
        self.s = replace(self.s, attempt=None)

    def again(self) -> None:
        """A new run for the same target, without settling again (HEAD did not move)."""
        a = self.s.attempt
        if a is None:
            return
        self.drop()
        self.s = replace(self.s, attempt=Attempt(a.target, Stage.SCHEDULED, None))

    def serving(self) -> tuple[Server, ...]:
        """The registered servers that say what runs: not the old ones a handoff is retiring."""
        s = self.s
        return tuple(x for x in s.servers if x.pid not in s.retiring)

    def held(self) -> tuple[Departed, ...]:
        """The departed servers whose work still counts."""
        return held(self.s.departed, self.now, self.s.rules)

    def in_flight(self) -> int | None:
        """The work in flight as last told (``None``: the drain probe cannot tell)."""
        return in_flight(self.s.servers, self.s.rules, self.s.probed, self.held())

    def looks(self) -> bool:
        """Whether the drain is looked at (the probe, or whether departed servers still run)."""
        return self.s.rules.drain_probe or bool(self.held())

    def probe_drain(self) -> None:
        """Ask for a look at the drain."""
        pids = frozenset(d.pid for d in self.held() if d.pid > 0)
        target = "" if self.s.attempt is None else self.s.attempt.target
        self.ask(lambda t: ProbeDrain(t, pids, target))

    def publish(
        self,
        phase: RestartPhase,
        reason: str | None,
        stage: Stage,
        revision: str | None = None,
        *,
        inflight: int | None = None,
    ) -> None:
        """Tell a phase, unless it is the one told last (same phase, reason and revision),
        with the ``estimate`` and ``earliest`` (for a server that sees a commit first) and
        ``inflight``, the drain's count."""
        s = self.s
        if revision is None and s.attempt is not None and phase is not RestartPhase.IDLE:
            revision = s.attempt.target
        old = s.published
        if (phase, reason, revision) == (old.phase, old.reason, old.revision):
            return
        attempt = s.actions if revision else 0
        wait = self.retry_after(stage) if phase.coming else None
        guess = estimate(s.rules.settle, s.rules.verify, s.verify_seconds, s.restart_seconds)
        state = RestartState(phase, reason, revision, attempt, wait, inflight=inflight, estimate=guess)
        self.s = replace(s, published=state, published_at=self.now)
        self.effects.append(Publish(state, stage, self.earliest()))

    def earliest(self) -> float | None:
        """When the next action may run at the earliest (``min_interval``), if later than now."""
        s = self.s
        return (
            None
            if s.last_action is None or not interval_left(s, self.now)
            else s.last_action + s.rules.min_interval
        )

    def heard_at(self) -> float | None:
        """When the servers' counts are in, if that is still ahead: one ``drain_poll`` after
        this run's announcement (a count from a registration long before is not one), and
        the clients' reconnect grace after the daemon's start (no registration yet is not
        nothing in flight)."""
        a, s = self.s.attempt, self.s
        times = [-math.inf]
        announced = None if a is None or a.drain is None else a.drain.announced
        if announced is not None and s.servers:
            times.append(announced + s.rules.drain_poll)
        if s.started is not None:
            times.append(s.started + grace(s.rules))
        at = max(times)
        return at if self.now < at else None

    def retry_after(self, stage: Stage) -> float:
        """Seconds until the new servers should answer, for a phase told at ``stage``: the
        waits ahead added up (settle, the interval and the counts run at once: the longest
        of them), then the stage's own look, a drain, the verify probes and the restart."""
        s, a, now = self.s, self.s.attempt, self.now
        if a is None:
            return s.restart_seconds  # no run: nothing is coming
        rules = s.rules
        settle = a.began + rules.settle - now if a.began is not None and stage <= Stage.SETTLE else 0.0
        interval = interval_left(s, now) if stage < Stage.ACT else 0.0
        # Fail fast, then under the lock (R9): the probes ahead.
        verifies = (stage <= Stage.VERIFY) + (stage <= Stage.LOCKED_VERIFY) if rules.verify else 0
        flowing = counts = 0.0
        if stage <= Stage.DRAIN and self.in_flight() != 0:
            flowing = rules.drain_poll  # ahead or under way; unknown length: at least the next look
        elif stage <= Stage.DRAIN and (heard := self.heard_at()) is not None:
            # Nothing in flight yet is no drain: the counts are still coming (R8: a poll
            # after the announcement, the reconnect grace after the daemon's start).
            counts = heard - now
        poll = {Stage.MARKERS: MARKER_POLL, Stage.LOCK: (a.lock or Locking()).delay}.get(stage, 0.0)
        start = max(0.0, settle, interval, counts)
        return start + poll + flowing + verifies * s.verify_seconds + s.restart_seconds

    def wake(self) -> None:
        """Ask for the next tick the run needs (while an answer is awaited: when it is lost)."""
        s, a = self.s, self.s.attempt
        at: float | None = None
        if a is not None and a.ask is not None:
            at = a.asked_at + s.rules.patience  # the backstop: never a wait for ever (R3)
        elif a is not None:
            times = [a.deadline]
            if a.stage is Stage.DRAIN and s.drain_since is not None:
                times.append(s.drain_since + s.rules.drain_timeout)
            if a.stage is Stage.CONFIRM and a.confirm is not None:
                times.append(a.confirm.until)
            at = min((t for t in times if t is not None), default=None)
        if at != s.timer:
            self.s = replace(s, timer=at)
            self.effects.append(Wake(at))

    # -- outcomes ------------------------------------------------------------------------

    def confirmed(self, a: Attempt, act: Taken, running: str) -> None:
        """The servers run ``running``: retire the old (if the action does), tell, re-bind."""
        if act.traits.retires:
            # Only now: the new ones run the target (R9).
            self.effects.append(Retire(act.old_pids, act.ticket))
        self.drop()  # ``a`` is the run under way: its lock released
        s = self.s
        # Retired, the old servers stay registered until they finish their work and exit
        # (gunicorn's graceful_timeout, which may well be longer than confirm_timeout):
        # they make no restart wanted meanwhile, however long that takes (R9).
        retiring = act.old_pids if act.traits.retires else s.retiring
        belief, took = s.belief.confirmed(running), max(0.5, self.now - act.at)
        self.s = replace(s, belief=belief, restart_seconds=took, retiring=retiring)
        self.publish(RestartPhase.CONFIRMED, None, Stage.DONE, running)
        self.effects.append(Rebind(running))

    def restart_failed(self, a: Attempt, act: Taken, reason: str, *, signalled: bool = True) -> None:
        """The restart did not come up; the new servers go (if the action aborts and,
        ``signalled``, may have started some), the old serve on."""
        if act.traits.aborts and signalled:
            new = newcomers(self.s.servers, act.at, act.old_pids)
            self.effects.append(Abort(frozenset(s.pid for s in new), act.ticket))
        if act.traits.beside:
            reason = f"{reason}; the old servers still serve"
        self.failure(a, reason)

    def unanswered(self, a: Attempt) -> None:
        """The answer awaited never came (a backstop): before the action a failed attempt,
        the lock released; the action or its confirmation, a failed restart."""
        a = replace(a, ask=None)
        self.put(a)
        if a.stage is Stage.LOCK:
            # The lost try may yet take it: released after it, before any new try (one
            # worker, in order).
            self.effects.append(ReleaseLock())
        stage = a.stage.name.lower().replace("_", " ")
        why = f"no answer from the {stage} stage in {self.s.rules.patience:g} s"
        if a.action is not None:  # the action or its confirmation
            self.restart_failed(a, a.action, f"not-confirmed: {why}")
        else:
            self.failure(a, why)

    def failure(self, a: Attempt, reason: str) -> None:
        """A failed attempt: tell it, then a new run while attempts remain, else give up."""
        if a.reloaded:
            self.drop()  # judged again under the new rules (a new run)
            return
        attempts, most = self.s.actions, self.s.rules.max_attempts
        if attempts >= most:
            self.give_up(RestartPhase.FAILED, f"{reason} (attempt {attempts} of {most})")
            return
        self.publish(RestartPhase.FAILED, reason, Stage.DONE)
        # Never a tight loop: the next run waits out min_interval, the lock released; a
        # run after a told outcome drains afresh (R8).
        self.again()
        self.s = replace(self.s, drain_since=None)

    def give_up(
        self, phase: RestartPhase, reason: str, revision: str | None = None, *, loaded: bool = False
    ) -> None:
        """End the run with a verdict that stands for its revision."""
        a = self.s.attempt
        if a is None:
            return
        self.drop()
        if a.reloaded:
            return  # the verdict on an action taken under the old rules: judge again
        s = self.s
        revision = revision or a.target
        self.s = replace(s, gave_up=GiveUp(phase, reason, revision, loaded), target=revision)
        self.publish(phase, reason, Stage.DONE, revision)
