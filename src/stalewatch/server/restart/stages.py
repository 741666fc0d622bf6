"""The restart machine's transitions through the stages of a run (see :mod:`.machine`).

:class:`Stages` moves the run under way as far as it can without an answer, a time or
another input: each stage either passes on at once, asks for something (one request
at a time), or waits for its timer. The outcomes (confirmed, failed, a give-up) end
the run.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...core.phases import RestartPhase
from . import confirming, drain
from .effects import (
    Abort,
    Act,
    CheckMarkers,
    ProbeConfirm,
    ReadHead,
    Rebind,
    ReleaseLock,
    Retire,
    Stage,
    TakeLock,
    Verify,
)
from .run import Run
from .state import Attempt, Confirm, GiveUp, interval_left

__all__ = ["Stages"]


class Stages(Run):
    """The transitions of a run, on top of :class:`~.run.Run`'s bookkeeping."""

    def stage(self, a: Attempt) -> None:
        """Move ``a`` on from its stage, or leave it waiting (an answer, its timer, an input)."""
        rules = self.s.rules
        due = a.deadline is None or self.now >= a.deadline
        if a.stage is Stage.SCHEDULED:
            if self.s.published.phase in (RestartPhase.IDLE, RestartPhase.CONFIRMED):
                # Servers report their count once a restart is coming or their code is
                # stale: until now they may have been silent (after a failure or a
                # refusal, the servers left on old code are stale and report) (R8).
                self.put(replace(a, announced=self.now))
            self.publish(RestartPhase.SCHEDULED, None, Stage.SCHEDULED)
            if a.began is None or rules.settle <= 0:
                self.bounds()
            else:
                self.enter(Stage.SETTLE, deadline=a.began + rules.settle)
                self.publish(RestartPhase.WAITING, "settle", Stage.SETTLE)
        elif a.stage is Stage.SETTLE and due:
            self.bounds()
        elif a.stage is Stage.INTERVAL and due:
            self.enter(Stage.MARKERS)
        elif a.stage is Stage.MARKERS or a.stage is Stage.LOCKED_MARKERS:
            if not rules.markers:
                self.enter(Stage.VERIFY if a.stage is Stage.MARKERS else Stage.LOCKED_DRAIN)
            elif due:
                self.ask(CheckMarkers)
        elif a.stage is Stage.VERIFY or a.stage is Stage.LOCKED_VERIFY:
            if not rules.verify:
                self.enter(Stage.DRAIN if a.stage is Stage.VERIFY else Stage.FINAL_HEAD)
                return
            reason = None
            if a.stage is Stage.LOCKED_VERIFY:
                reason = "under the lock" if a.lock_held else "before the action"
            self.publish(RestartPhase.VERIFYING, reason, a.stage)
            self.ask(lambda t: Verify(t, a.target))
        elif a.stage is Stage.DRAIN:
            self.drain_stage(due=due)
        elif a.stage is Stage.LOCK:
            if not rules.lock:
                self.enter(Stage.LOCKED_HEAD)
            elif due:
                self.ask(TakeLock)
        elif a.stage is Stage.LOCKED_HEAD or a.stage is Stage.FINAL_HEAD:
            self.ask(ReadHead)
        elif a.stage is Stage.LOCKED_DRAIN:
            if self.looks() and a.note is None:
                self.probe_drain()
            else:
                self.drain_under_lock()
        elif a.stage is Stage.CONFIRM:
            self.confirm(a, due=due)
        # SETTLE and INTERVAL before their time wait; ACT and CONFIRM_VERIFY await an answer.

    def bounds(self) -> None:
        """The attempt bound, then the minimum interval (R6, R10)."""
        s = self.s
        if s.actions >= s.rules.max_attempts:
            # Whatever clients register, no more actions for this HEAD revision.
            reason = f"max-attempts: {s.actions} restarts of this revision already"
            self.give_up(RestartPhase.REFUSED, reason)
            return
        left = interval_left(s, self.now)
        if left > 0 and s.last_action is not None:
            self.enter(Stage.INTERVAL, deadline=s.last_action + s.rules.min_interval)
            self.publish(RestartPhase.WAITING, f"min-interval: {math.ceil(left)} s left", Stage.INTERVAL)
        else:
            self.enter(Stage.MARKERS)

    def drain_stage(self, *, due: bool) -> None:
        """Wait until no work is in flight, ``drain_timeout`` at most (R8)."""
        looks = self.looks()
        if looks and due:
            self.probe_drain()
            return
        total = self.in_flight()
        if total != 0 and self.s.drain_since is None:
            self.s = replace(self.s, drain_since=self.now)  # the drain begins
        s = self.s
        verdict = drain.decide(total, s.drain_since, self.now, s.rules)
        heard = self.heard_at()
        if verdict is drain.Next.GO and heard is not None:
            verdict = drain.Next.WAIT  # a count from before the announcement proves nothing
        if verdict is not drain.Next.WAIT:
            self.drained(verdict, total, Stage.LOCK)
            return
        told, reason = s.published, f"drain: {drain.describe(total, s.probe_detail)}"
        if total == 0 and s.started is not None and self.now < s.started + drain.grace(s.rules):
            reason += " (the daemon just started: servers may still register)"
        draining = told.phase is RestartPhase.WAITING and (told.reason or "").startswith("drain:")
        due_at = s.published_at + s.rules.drain_poll
        if draining and told.reason != reason and self.now < due_at:
            # One chatty server must not flood every client: a changed count is told
            # at most once per drain_poll (the probe, when there is one, keeps that pace).
            if not looks:
                a = s.attempt
                if a is not None and (a.deadline is None or a.deadline > due_at):
                    self.wait_until(due_at)
            return
        if not looks:
            self.wait_until(heard)  # told now: no look is owed, unless counts are due
        elif heard is not None and (s.attempt is None or s.attempt.deadline is None):
            self.wait_until(heard)
        self.publish(RestartPhase.WAITING, reason, Stage.DRAIN, inflight=total)

    def drain_under_lock(self) -> None:
        """The work in flight once more, under the lock: more came in, drain again (R8)."""
        a = self.s.attempt
        if a is None:
            return
        if a.note is not None:
            self.enter(Stage.LOCKED_VERIFY)  # the bound passed: restart anyway
            return
        total = self.in_flight()
        verdict = drain.decide(total, self.s.drain_since, self.now, self.s.rules)
        if verdict is drain.Next.WAIT:
            self.again()
        else:
            self.drained(verdict, total, Stage.LOCKED_VERIFY)

    def drained(self, verdict: drain.Next, total: int | None, nxt: Stage) -> None:
        left = "unknown" if total is None else str(total)
        if verdict is drain.Next.GO:
            self.enter(nxt)
        elif verdict is drain.Next.RESTART:
            a = self.s.attempt
            self.enter(nxt, a and replace(a, note=f"drain-timeout: {left} still in flight"))
        else:
            why = f"drain-timeout: {left} still in flight after {self.s.rules.drain_timeout:g} s"
            self.give_up(RestartPhase.REFUSED, why)

    def final(self) -> None:
        """HEAD is still the target, read right before the action (R9): act, if drained."""
        a = self.s.attempt
        if a is None:
            return
        if self.looks() and a.note is None and not a.final_look:
            # The probe's count is as old as the verify under the lock (up to its timeout):
            # looked at once more right before the action, as registrations are (R8).
            self.put(replace(a, final_look=True))
            self.probe_drain()
            return
        if self.in_flight() != 0 and a.note is None:
            self.again()  # work came in while verifying under the lock (R8)
            return
        ticket = self.ticket()
        s = self.s
        attempt = replace(
            a,
            stage=Stage.ACT,
            ask=ticket,
            asked_at=self.now,
            acted_at=self.now,
            act_ticket=ticket,
            action=s.rules.action,
            old_pids=frozenset(x.pid for x in s.servers),
        )
        self.s = replace(
            s,
            attempt=attempt,
            actions=s.actions + 1,
            last_action=self.now,
            drain_since=None,
            probed=None,
            departed=(),  # what the action stops is what the drain waited for
        )
        self.publish(RestartPhase.RESTARTING, a.note, Stage.ACT)
        self.effects.append(Act(ticket, a.target, s.rules.action))

    def confirm(self, a: Attempt, *, due: bool) -> None:
        """Do the restarted servers run the new code (R5, R9)?"""
        s = self.s
        heads = (a.target, s.head)
        if a.confirm_by is Confirm.REGISTRATIONS:
            running = confirming.registered_on(
                s.servers, heads, a.acted_at, beside=a.action.beside, old=a.old_pids
            )
            if running is not None and running != a.target and s.rules.verify:
                # A commit landed during the restart and the new servers loaded it: the
                # probe passed for the target only, so it must pass for this one too (R2).
                self.enter(Stage.CONFIRM_VERIFY, replace(a, running=running))
                self.ask(lambda t: Verify(t, running))
            elif running is not None:
                self.confirmed(running)
            elif self.now >= a.confirm_until:
                who = confirming.runs(s.servers)
                why = f"not-confirmed: after {s.rules.confirm_timeout:g} s the registered servers run {who}"
                self.restart_failed(why)
        elif a.confirm_by is Confirm.PROBE:
            if a.probe_ok and not confirming.old_code(s.servers, heads):
                self.confirmed(a.target)
            elif self.now >= a.confirm_until:
                last = f"the registered servers run {confirming.runs(s.servers)}" if a.probe_ok else a.last
                self.restart_failed(f"not-confirmed: within {s.rules.confirm_timeout:g} s: {last}")
            elif due:
                self.ask(lambda t: ProbeConfirm(t, a.target))
        else:
            self.confirmed(a.target)  # neither registrations nor a probe: the exit status says

    def unanswered(self, a: Attempt) -> None:
        """The answer awaited never came (the executor answers every request; a backstop).

        Before the action: a failed attempt (a new run after ``min_interval``, the lock
        released). The action or its confirmation: a failed restart; an action that
        aborts stops only what that very action started, if anything (R9).
        """
        self.put(replace(a, ask=None))
        if a.stage is Stage.LOCK:
            # The lost try may yet take it: released after it, before any new try (one
            # worker, in order).
            self.effects.append(ReleaseLock())
        stage = a.stage.name.lower().replace("_", " ")
        why = f"no answer from the {stage} stage in {self.s.rules.patience:g} s"
        if a.stage >= Stage.ACT:
            self.restart_failed(f"not-confirmed: {why}")
        else:
            self.failure(why)

    # -- outcomes ------------------------------------------------------------------------

    def confirmed(self, running: str) -> None:
        """The servers run ``running``: retire the old (if the action does), tell, re-bind (R5)."""
        a = self.s.attempt
        if a is None:
            return
        if a.action.retires:
            # Only now: the new ones run the target (R9).
            self.effects.append(Retire(a.old_pids, a.act_ticket))
        if a.lock_held:
            self.effects.append(ReleaseLock())
        s = self.s
        self.s = replace(
            s,
            attempt=None,
            belief=s.belief.confirmed(running),
            restart_seconds=max(0.5, self.now - a.acted_at),
        )
        if a.action.retires:
            # The old servers stay registered until they finish their work and exit
            # (gunicorn's graceful_timeout, which may well be longer than confirm_timeout):
            # they make no restart wanted meanwhile, however long that takes (R9).
            self.s = replace(self.s, retiring=a.old_pids)
        self.publish(RestartPhase.CONFIRMED, None, Stage.DONE, running)
        self.effects.append(Rebind(running))

    def restart_failed(self, reason: str, *, signalled: bool = True) -> None:
        """The restart did not come up; the new servers go (if the action aborts), the old serve on (R9).

        ``signalled``: the action may have started new servers (an action that says it
        failed signalled nothing: it has nothing to abort).
        """
        a = self.s.attempt
        if a is None:
            return
        if a.action.aborts and signalled:
            new = confirming.newcomers(self.s.servers, a.acted_at, a.old_pids)
            self.effects.append(Abort(frozenset(s.pid for s in new), a.act_ticket))
        if a.action.beside:
            reason = f"{reason}; the old servers still serve"
        self.failure(reason)

    def failure(self, reason: str) -> None:
        """A failed attempt: tell it, then a new run while attempts remain, else give up (R6)."""
        a = self.s.attempt
        if a is None:
            return
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
        """End the run with a verdict that stands for its revision (R6)."""
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
