"""The restart sequence as a pure state machine: ``step(state, input) -> (state, effects)``.

No I/O, no clock, no thread: time arrives in the inputs (``now``, monotonic seconds),
and an executor carries out the effects (:mod:`.effects`), feeding their results back
as inputs (:mod:`.inputs`). For one target (HEAD's revision, when the servers run
another, :mod:`.running`) a run of the sequence goes, in this order (:class:`Stage`):

1. ``scheduled``; ``waiting: settle`` until ``settle`` s passed without HEAD moving (R6);
2. the bounds: at most ``max_attempts`` actions per HEAD revision, confirmed ones
   included (R6, R10); ``waiting: min-interval`` until ``min_interval`` s after the last
   action;
3. the markers (R1): ``waiting`` while an update runs or a hold exists, ``refused``
   while an update did not end cleanly (lifts when the marker goes);
4. ``verifying``: the probe (R2), to fail fast on a broken commit;
5. ``waiting: drain: N in flight`` until no work is in flight (R8), ``drain_timeout`` at
   most, then ``on_drain_timeout``: ``refuse`` gives up, ``restart`` goes on and says
   ``drain-timeout: N still in flight``;
6. ``waiting: lock`` until the handoff lock is taken (R3); under it, HEAD, the markers
   and the work in flight once more (any of them not right: release, start over);
7. ``verifying`` under the lock (R9), then HEAD read again: it must still be the target;
8. ``restarting``: the action (R4), then confirmation (R5; handoff, R9: the old servers
   are retired only once new ones run the target, else the new are aborted);
9. ``confirmed``, or ``failed`` (a new run after ``min_interval`` while attempts remain).

A move of HEAD before the action starts over for the new target; after it, the new
target's run begins once the restart is confirmed or failed. A give-up (``refused`` or
``failed``) stands for its revision until another revision is wanted or a reload; a
reload forgets give-ups and counts, and a verdict reached after it about an action
taken before it is discarded (the run starts over under the new rules).

Driving it: feed every input under one lock, from whichever thread has it (the watcher's
events as ``Head``, registry changes as ``Servers``, a reload as ``Reload``), and carry
out the effects in order: ``Publish`` at once (so a phase reaches clients before the
event that caused it), the slow ones (probes, the lock, the action, signals) on one
worker thread that feeds each answer back with its ticket, and ``Wake`` as that
thread's single timer, which feeds ``Tick`` when it expires.
"""

from __future__ import annotations

from dataclasses import replace

from ...core.phases import RestartPhase
from . import drain
from .effects import Effect, ReadHead, Stage
from .inputs import (
    Acted,
    ConfirmProbed,
    Drain,
    Head,
    Input,
    Loaded,
    Lock,
    Markers,
    Reload,
    Server,
    Servers,
    Verdict,
    Verified,
)
from .rules import Rules
from .running import wanted
from .stages import Stages
from .state import (
    CONFIRM_POLL,
    LOCK_POLL,
    MARKER_POLL,
    REFUSED_POLL,
    Attempt,
    Confirm,
    GiveUp,
    State,
    interval_left,
)

__all__ = ["Attempt", "GiveUp", "Stage", "State", "interval_left", "step"]

_MOVES = 64  # transitions in one step at most (a run has 17 stages): never a hang

Answer = Markers | Verified | Drain | Lock | Acted | ConfirmProbed


def step(state: State, event: Input) -> tuple[State, tuple[Effect, ...]]:
    """One input in: the new state and the effects to carry out, in order. Never raises."""
    run = _Step(state, event.now)
    run.take(event)
    run.advance()
    run.wake()
    return run.s, tuple(run.effects)


class _Step(Stages):
    """One step: what an input changes, then the run moved as far as it goes."""

    def take(self, event: Input) -> None:
        if isinstance(event, Head):
            self._head(event)
        elif isinstance(event, Servers):
            self._servers(event.servers)
        elif isinstance(event, Loaded):
            self.s = replace(self.s, belief=self.s.belief.told(event), why=event.why or self.s.why)
        elif isinstance(event, Reload):
            self._reload(event.rules)
        elif isinstance(event, Answer):
            self._answer(event)
        else:
            self.s = replace(self.s, timer=None)  # a Tick: that timer is spent; advance() looks

    def _head(self, event: Head) -> None:
        s = self.s
        self.s = replace(s, head=event.revision, belief=s.belief.heard(event.revision))
        a = self.s.attempt
        if a is None or a.ask is None or event.ticket != a.ask:
            return  # an event: a move before the action starts over (advance)
        self.put(replace(a, ask=None))
        if event.revision != a.target:
            return  # moved: advance() starts over for the new target
        if a.stage is Stage.LOCKED_HEAD:
            self.enter(Stage.LOCKED_MARKERS)
        elif a.stage is Stage.FINAL_HEAD:
            self.final()

    def _servers(self, servers: tuple[Server, ...]) -> None:
        s = self.s
        pids = {x.pid for x in servers}
        retiring = s.retiring & pids
        a = s.attempt
        # Work in flight that left with its registration, outside our action: it may still
        # run (R8). Counted until it registers again, its process is gone, or the bound.
        departed = [d for d in drain.held(s.departed, self.now, s.rules) if d.pid not in pids]
        if a is None or a.stage < Stage.ACT:
            gone = {x.pid for x in s.servers if x.pid not in pids and x.pid not in s.retiring}
            left: dict[int, int] = {}
            for x in s.servers:
                if x.pid in gone and x.inflight > 0:
                    left[x.pid] = left.get(x.pid, 0) + x.inflight
            departed = [d for d in departed if d.pid not in left]
            departed += [drain.Departed(pid, count, self.now) for pid, count in left.items()]
        belief = s.belief
        if s.servers and not servers and (a is None or a.stage < Stage.ACT):
            # Every registered server went away, and not in a restart of ours: they were
            # stopped. Restarting now would start them (the Hermes WebUI bug): wait.
            belief = belief.gone()
        self.s = replace(
            s,
            servers=servers,
            registered=s.registered or bool(servers),
            belief=belief,
            retiring=retiring,
            departed=tuple(departed),
        )
        a = self.s.attempt
        if a is not None and a.stage is Stage.CONFIRM:
            heads = (a.target, self.s.head)
            if any(s.revision not in heads for s in servers if s.since >= a.acted_at):
                # A new server loaded a commit the watcher has yet to report (polling):
                # read HEAD now rather than refuse it (R5).
                self.effects.append(ReadHead(self.ticket()))

    def _reload(self, rules: Rules) -> None:
        self.s = replace(self.s, rules=rules, gave_up=None, actions=0, drain_since=None)
        a = self.s.attempt
        if a is not None and a.stage < Stage.ACT:
            self.drop()  # judged again under the new rules, from the start
        elif a is not None:
            self.put(replace(a, reloaded=True))

    def _answer(self, event: Answer) -> None:
        a = self.s.attempt
        if a is None or event.ticket != a.ask:
            return  # the answer to a request of a run that is over: stale
        a = replace(a, ask=None)
        self.put(a)
        if isinstance(event, Markers):
            self._markers(a.stage, event)
        elif isinstance(event, Verified):
            self._verified(a, event)
        elif isinstance(event, Drain):
            self._probed_drain(a.stage, event)
        elif isinstance(event, Lock):
            self._locked(a, event)
        elif isinstance(event, Acted):
            self._acted(a, event)
        else:
            self._probed_confirm(a, event)

    def _markers(self, stage: Stage, event: Markers) -> None:
        reason = event.reason or f"markers: {event.verdict.value}"
        if stage is Stage.MARKERS and event.verdict is Verdict.GO:
            self.enter(Stage.VERIFY)
        elif stage is Stage.MARKERS and event.verdict is Verdict.WAIT:
            self.publish(RestartPhase.WAITING, reason, Stage.MARKERS)
            self.wait_until(self.now + MARKER_POLL)
        elif stage is Stage.MARKERS:
            self.publish(RestartPhase.REFUSED, reason, Stage.MARKERS)
            self.wait_until(self.now + REFUSED_POLL)  # lifts when the marker goes
        elif stage is Stage.LOCKED_MARKERS and event.verdict is Verdict.GO:
            self.enter(Stage.LOCKED_DRAIN)
        elif stage is Stage.LOCKED_MARKERS:
            self.again()  # an update began before the lock: wait for it, verify again

    def _verified(self, a: Attempt, event: Verified) -> None:
        if event.ok and a.stage in (Stage.VERIFY, Stage.LOCKED_VERIFY):
            self.s = replace(self.s, verify_seconds=self.now - a.asked_at)
            self.enter(Stage.DRAIN if a.stage is Stage.VERIFY else Stage.FINAL_HEAD)
        elif a.stage in (Stage.VERIFY, Stage.LOCKED_VERIFY):
            self.give_up(RestartPhase.REFUSED, f"verify-failed: {event.detail}")
        elif a.running is not None:  # CONFIRM_VERIFY: the only probe of what the servers loaded
            if event.ok:
                self.confirmed(a.running)
            elif a.action.aborts:
                # The new servers loaded a commit that landed meanwhile and fails the probe:
                # they go, the old serve on.
                why = f"the new servers loaded {a.running[:12]}; the probe {event.detail}"
                self.restart_failed(f"not-confirmed: {why}")
            else:
                # They run it already (nothing to restart onto): not confirmed, and the
                # verdict stands while they do (R2).
                why = f"verify-failed: the servers loaded {a.running[:12]}; the probe {event.detail}"
                self.give_up(RestartPhase.FAILED, why, a.running, loaded=True)

    def _probed_drain(self, stage: Stage, event: Drain) -> None:
        probed = None if event.inflight is None else max(0, event.inflight)
        held = drain.held(self.s.departed, self.now, self.s.rules)
        departed = tuple(d for d in held if d.pid not in event.gone)
        self.s = replace(self.s, probed=probed, probe_detail=event.detail, departed=departed)
        if stage is Stage.DRAIN:
            self.wait_until(self.now + self.s.rules.drain_poll)
        elif stage is Stage.LOCKED_DRAIN:
            self.drain_under_lock()
        elif stage is Stage.FINAL_HEAD:
            self.final()

    def _locked(self, a: Attempt, event: Lock) -> None:
        if a.stage is not Stage.LOCK:
            return
        if event.error is not None:
            self.give_up(RestartPhase.FAILED, f"lock: {event.error}")
        elif event.acquired:
            self.enter(Stage.LOCKED_HEAD, replace(a, lock_held=True))
        else:
            self.publish(RestartPhase.WAITING, f"lock: {event.detail or 'held'}", Stage.LOCK)
            delay = a.lock_delay
            self.put(replace(a, deadline=self.now + delay, lock_delay=min(delay * 2, LOCK_POLL[1])))

    def _acted(self, a: Attempt, event: Acted) -> None:
        if a.stage is not Stage.ACT:
            return
        if event.refused and not event.ok:
            self.give_up(RestartPhase.REFUSED, f"signal: {event.detail}")  # nothing was done
        elif not event.ok:
            # An action that failed started nothing: nothing to abort (R9).
            self.restart_failed(f"action {event.detail}", signalled=False)
        else:
            # Decided now, for this restart: a reload meanwhile does not change how.
            rules = self.s.rules
            by = Confirm.PROBE if rules.confirm_probe else Confirm.STATUS
            if a.action.beside or (self.s.registered and not rules.confirm_probe):
                by = Confirm.REGISTRATIONS
            self.enter(
                Stage.CONFIRM, replace(a, confirm_until=self.now + rules.confirm_timeout, confirm_by=by)
            )

    def _probed_confirm(self, a: Attempt, event: ConfirmProbed) -> None:
        if a.stage is not Stage.CONFIRM:
            return
        delay = a.probe_delay
        a = replace(
            a,
            probe_ok=event.ok,
            last=f"the probe {event.detail}",
            deadline=min(self.now + delay, a.confirm_until),
            probe_delay=min(delay * 2, CONFIRM_POLL[1]),
        )
        self.put(a)

    # -- moving on -----------------------------------------------------------------------

    def advance(self) -> None:
        """Move on until the machine waits: a step that changes nothing is a wait."""
        for _ in range(_MOVES):
            before = self.s
            self._move()
            if self.s is before:
                return

    def _move(self) -> None:
        s = self.s
        want = wanted(s.head, self.serving(), s.belief)
        a = s.attempt
        if a is None:
            self._idle(want)
        elif a.stage < Stage.ACT and want != a.target:
            self.drop()  # HEAD moved, or the servers run HEAD now: start over (R6, R9)
        elif a.ask is None:
            self.stage(a)
        elif self.now >= a.asked_at + s.rules.patience:
            self.unanswered(a)

    def _idle(self, want: str | None) -> None:
        if want is not None and want != self.s.target:
            # Another revision is wanted: its own bounds; older give-ups lapse (R6).
            self.s = replace(self.s, target=want, actions=0, gave_up=None, drain_since=None, probed=None)
        s = self.s
        gave_up = s.gave_up
        if gave_up is not None and (
            gave_up.revision == want or (want is None and gave_up.loaded and gave_up.revision == s.head)
        ):
            self.publish(gave_up.phase, gave_up.reason, Stage.DONE, gave_up.revision)
        elif want is not None:
            # A new run drains afresh (R8): its clock starts when its own drain starts,
            # never at a drain of a run that ended (A -> B -> A -> B an hour later).
            attempt = Attempt(want, Stage.SCHEDULED, self.now)
            self.s = replace(s, attempt=attempt, drain_since=None, probed=None)
        else:
            # Idle: say what tells what runs when no server registers (R10: unknown is
            # said, never guessed); a confirmation stays told until something else is.
            told = s.published
            why = None if s.servers or not s.why else s.why
            if told.phase not in (RestartPhase.IDLE, RestartPhase.CONFIRMED) or (
                told.phase is RestartPhase.IDLE and told.reason != why
            ):
                self.publish(RestartPhase.IDLE, why, Stage.IDLE)
