"""The restart machine moving a run on through its stages (see :mod:`.machine`).

Each stage's handler (:data:`MOVES`) moves the run under way as far as it can without
an answer, a time or another input: it passes on at once, asks for something (one
request at a time), or waits for its timer. :func:`advance` moves on until the
machine waits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from ...core.phases import RestartPhase
from .effects import Act, CheckMarkers, ProbeConfirm, ReadHead, Stage, TakeLock, Verify
from .run import Next, Run, decide, describe, grace, old_code, registered_on, runs
from .state import Attempt, Confirm, Draining, Taken, interval_left, wanted

_MOST_MOVES = 64  # transitions in one step at most (a run has 17 stages): never a hang


def advance(r: Run) -> None:
    """Move on until the machine waits: a step that changes nothing is a wait."""
    for _ in range(_MOST_MOVES):
        before = r.s
        _move(r)
        if r.s is before:
            return


def _move(r: Run) -> None:
    s = r.s
    want = wanted(s.head, r.serving(), s.belief)
    a = s.attempt
    if a is None:
        _idle(r, want)
    elif a.stage < Stage.ACT and want != a.target:
        r.drop()  # HEAD moved, or the servers run HEAD now: start over (R6, R9)
    elif a.ask is None:
        handle = MOVES.get(a.stage)  # none for ACT and CONFIRM_VERIFY: they await an answer
        if handle is not None:
            handle(r, a, a.deadline is None or r.now >= a.deadline)
    elif r.now >= a.asked_at + s.rules.patience:
        r.unanswered(a)


def _idle(r: Run, want: str | None) -> None:
    if want is not None and want != r.s.target:
        # Another revision is wanted: its own bounds; older give-ups lapse (R6).
        r.s = replace(r.s, target=want, actions=0, gave_up=None, drain_since=None, probed=None)
    s = r.s
    gave_up = s.gave_up
    if gave_up is not None and (
        gave_up.revision == want or (want is None and gave_up.loaded and gave_up.revision == s.head)
    ):
        r.publish(gave_up.phase, gave_up.reason, Stage.DONE, gave_up.revision)
    elif want is not None:
        # A new run drains afresh (R8): its clock starts when its own drain starts,
        # never at a drain of a run that ended (A -> B -> A -> B an hour later).
        attempt = Attempt(want, Stage.SCHEDULED, r.now)
        r.s = replace(s, attempt=attempt, drain_since=None, probed=None)
    else:
        # Idle: say what tells what runs when no server registers (unknown is
        # said, never guessed); a confirmation stays told until something else is.
        told = s.published
        why = None if s.servers or not s.why else s.why
        if told.phase not in (RestartPhase.IDLE, RestartPhase.CONFIRMED) or (
            told.phase is RestartPhase.IDLE and told.reason != why
        ):
            r.publish(RestartPhase.IDLE, why, Stage.IDLE)


# -- each stage: ``due`` when its timer has expired (or it has none) ------------------


def _scheduled(r: Run, a: Attempt, due: bool) -> None:
    if r.s.published.phase in (RestartPhase.IDLE, RestartPhase.CONFIRMED):
        # Servers report their count once a restart is coming or their code is
        # stale: until now they may have been silent (after a failure or a
        # refusal, the servers left on old code are stale and report) (R8).
        r.put(replace(a, drain=Draining(announced=r.now)))
    r.publish(RestartPhase.SCHEDULED, None, Stage.SCHEDULED)
    if a.began is None or r.s.rules.settle <= 0:
        bounds(r)
    else:
        r.enter(Stage.SETTLE, deadline=a.began + r.s.rules.settle)
        r.publish(RestartPhase.WAITING, "settle", Stage.SETTLE)


def _timer(r: Run, a: Attempt, due: bool) -> None:
    """Settle, then the interval: the bounds once more when the timer is due."""
    if due:
        bounds(r)


def _check_markers(r: Run, a: Attempt, due: bool) -> None:
    if not r.s.rules.markers:
        r.next()
    elif due:
        r.ask(CheckMarkers)


def _verify(r: Run, a: Attempt, due: bool) -> None:
    if not r.s.rules.verify:
        r.next()
        return
    reason = None
    if a.stage is Stage.LOCKED_VERIFY:
        reason = "under the lock" if a.lock_held else "before the action"
    r.publish(RestartPhase.VERIFYING, reason, a.stage)
    r.ask(lambda t: Verify(t, a.target))


def _take_lock(r: Run, a: Attempt, due: bool) -> None:
    if not r.s.rules.lock:
        r.next()
    elif due:
        r.ask(TakeLock)


def _read_head(r: Run, a: Attempt, due: bool) -> None:
    r.ask(ReadHead)


def _locked_drain(r: Run, a: Attempt, due: bool) -> None:
    if r.looks() and a.note is None:
        r.probe_drain()
    else:
        drain_under_lock(r, a)


def bounds(r: Run) -> None:
    """The attempt bound, then the minimum interval."""
    s = r.s
    if s.actions >= s.rules.max_attempts:
        # Whatever clients register, no more actions for this HEAD revision.
        reason = f"max-attempts: {s.actions} restarts of this revision already"
        r.give_up(RestartPhase.REFUSED, reason)
        return
    left = interval_left(s, r.now)
    if left > 0 and s.last_action is not None:
        r.enter(Stage.INTERVAL, deadline=s.last_action + s.rules.min_interval)
        r.publish(RestartPhase.WAITING, f"min-interval: {math.ceil(left)} s left", Stage.INTERVAL)
    else:
        r.enter(Stage.MARKERS)


def drain_stage(r: Run, a: Attempt, due: bool) -> None:
    """Wait until no work is in flight, ``drain_timeout`` at most."""
    looks = r.looks()
    if looks and due:
        r.probe_drain()
        return
    total = r.in_flight()
    if total != 0 and r.s.drain_since is None:
        r.s = replace(r.s, drain_since=r.now)  # the drain begins
    s = r.s
    verdict = decide(total, s.drain_since, r.now, s.rules)
    heard = r.heard_at()
    if verdict is Next.GO and heard is not None:
        verdict = Next.WAIT  # a count from before the announcement proves nothing
    if verdict is not Next.WAIT:
        drained(r, verdict, total)
        return
    told, reason = s.published, f"drain: {describe(total, s.probe_detail)}"
    if total == 0 and s.started is not None and r.now < s.started + grace(s.rules):
        reason += " (the daemon just started: servers may still register)"
    draining = told.phase is RestartPhase.WAITING and (told.reason or "").startswith("drain:")
    due_at = s.published_at + s.rules.drain_poll
    if draining and told.reason != reason and r.now < due_at:
        # One chatty server must not flood every client: a changed count is told
        # at most once per drain_poll (the probe, when there is one, keeps that pace).
        if not looks and (a.deadline is None or a.deadline > due_at):
            r.wait_until(due_at)
        return
    if not looks:
        r.wait_until(heard)  # told now: no look is owed, unless counts are due
    elif heard is not None and a.deadline is None:
        r.wait_until(heard)
    r.publish(RestartPhase.WAITING, reason, Stage.DRAIN, inflight=total)


def drain_under_lock(r: Run, a: Attempt) -> None:
    """The work in flight once more, under the lock: more came in, drain again."""
    if a.note is not None:
        r.next()  # the bound passed: restart anyway
        return
    total = r.in_flight()
    verdict = decide(total, r.s.drain_since, r.now, r.s.rules)
    if verdict is Next.WAIT:
        r.again()
    else:
        drained(r, verdict, total)


def drained(r: Run, verdict: Next, total: int | None) -> None:
    """The drain's verdict: on to the next stage, restart anyway, or give up."""
    left = "unknown" if total is None else str(total)
    if verdict is Next.GO:
        r.next()
    elif verdict is Next.RESTART:
        a = r.s.attempt
        note = f"drain-timeout: {left} still in flight"
        r.next(a and replace(a, drain=replace(a.drain or Draining(), note=note)))
    else:
        why = f"drain-timeout: {left} still in flight after {r.s.rules.drain_timeout:g} s"
        r.give_up(RestartPhase.REFUSED, why)


def _final_head(r: Run, a: Attempt, due: bool) -> None:
    draining = a.drain or Draining()
    if r.looks() and draining.note is None and not draining.final_look:
        # The probe's count is as old as the verify under the lock (up to its timeout):
        # looked at once more before the action, as registrations are (R8). HEAD is read
        # after it, the last look of all: a move during the probe is never acted on (R9).
        r.put(replace(a, drain=replace(draining, final_look=True)))
        r.probe_drain()
    else:
        r.ask(ReadHead)


def final(r: Run, a: Attempt) -> None:
    """HEAD is still the target, read right before the action: act, if drained."""
    if r.in_flight() != 0 and a.note is None:
        r.again()  # work came in while verifying under the lock (R8)
        return
    ticket = r.ticket()
    s = r.s
    taken = Taken(r.now, ticket, s.rules.action, frozenset(x.pid for x in s.servers))
    attempt = replace(a, stage=Stage.ACT, ask=ticket, asked_at=r.now, action=taken)
    r.s = replace(
        s,
        attempt=attempt,
        actions=s.actions + 1,
        last_action=r.now,
        drain_since=None,
        probed=None,
        departed=(),  # what the action stops is what the drain waited for
    )
    r.publish(RestartPhase.RESTARTING, a.note, Stage.ACT)
    r.effects.append(Act(ticket, a.target, s.rules.action))


def confirm(r: Run, a: Attempt, due: bool) -> None:
    """Do the restarted servers run the new code?"""
    s, act, c = r.s, a.action, a.confirm
    if act is None or c is None:
        return  # never: the stage is entered with both
    heads = (a.target, s.head)
    if c.by is Confirm.REGISTRATIONS:
        running = registered_on(s.servers, heads, act.at, beside=act.traits.beside, old=act.old_pids)
        if running is not None and running != a.target and s.rules.verify:
            # A commit landed during the restart and the new servers loaded it: the
            # probe passed for the target only, so it must pass for this one too (R2).
            r.enter(Stage.CONFIRM_VERIFY, replace(a, confirm=replace(c, running=running)))
            r.ask(lambda t: Verify(t, running))
        elif running is not None:
            r.confirmed(a, act, running)
        elif r.now >= c.until:
            who = runs(s.servers)
            why = f"not-confirmed: after {s.rules.confirm_timeout:g} s the registered servers run {who}"
            r.restart_failed(a, act, why)
    elif c.by is Confirm.PROBE:
        if c.probe_ok and not old_code(s.servers, heads):
            r.confirmed(a, act, a.target)
        elif r.now >= c.until:
            last = f"the registered servers run {runs(s.servers)}" if c.probe_ok else c.last
            r.restart_failed(a, act, f"not-confirmed: within {s.rules.confirm_timeout:g} s: {last}")
        elif due:
            r.ask(lambda t: ProbeConfirm(t, a.target))
    else:
        r.confirmed(a, act, a.target)  # neither registrations nor a probe: the exit status says


MOVES: dict[Stage, Callable[[Run, Attempt, bool], None]] = {
    Stage.SCHEDULED: _scheduled,
    Stage.SETTLE: _timer,
    Stage.INTERVAL: _timer,
    Stage.MARKERS: _check_markers,
    Stage.VERIFY: _verify,
    Stage.DRAIN: drain_stage,
    Stage.LOCK: _take_lock,
    Stage.LOCKED_HEAD: _read_head,
    Stage.LOCKED_MARKERS: _check_markers,
    Stage.LOCKED_DRAIN: _locked_drain,
    Stage.LOCKED_VERIFY: _verify,
    Stage.FINAL_HEAD: _final_head,
    Stage.CONFIRM: confirm,
}
"""How each stage moves on without an input: ``(run, its attempt, due)``."""
