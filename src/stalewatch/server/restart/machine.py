"""The restart sequence as a pure state machine: ``step(state, input) -> (state, effects)``.

No I/O, no clock, no thread: time arrives in the inputs (``now``, monotonic seconds),
and an executor carries out the effects (:mod:`.effects`), feeding their results back
as inputs (:mod:`.inputs`). For one target (HEAD's revision, when the servers run
another, :mod:`.running`) a run of the sequence goes, in this order (:class:`Stage`):

1. ``scheduled``; ``waiting: settle`` until ``settle`` s passed without HEAD moving;
2. the bounds: at most ``max_attempts`` actions per HEAD revision, confirmed ones
   included; ``waiting: min-interval`` until ``min_interval`` s after the last
   action;
3. the markers: ``waiting`` while an update runs or a hold exists, ``refused``
   while an update did not end cleanly (lifts when the marker goes);
4. ``verifying``: the probe, to fail fast on a broken commit;
5. ``waiting: drain: N in flight`` until no work is in flight, ``drain_timeout`` at
   most, then ``on_drain_timeout``: ``refuse`` gives up, ``restart`` goes on and says
   ``drain-timeout: N still in flight``;
6. ``waiting: lock`` until the handoff lock is taken; under it, HEAD, the markers
   and the work in flight once more (any of them not right: release, start over);
7. ``verifying`` under the lock, then HEAD read again: it must still be the target;
8. ``restarting``: the action, then confirmation (for a handoff: the old servers
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

Reading it: :func:`step` takes the input (what the world says, by its type; an answer,
by the handler of its stage and type, matched in ``_answer``), then moves the run on
(:func:`advance`, one handler per stage in :data:`MOVES`) and asks for the
next wake-up; :class:`~.run.Run` holds the step's bookkeeping and the outcomes.

Moving on: each stage's handler (:data:`MOVES`) moves the run under way as far as it can without
an answer, a time or another input: it passes on at once, asks for something (one
request at a time), or waits for its timer. :func:`advance` moves on until the
machine waits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from ...core.phases import RestartPhase
from .effects import Act, CheckMarkers, Effect, ProbeConfirm, ReadHead, Stage, TakeLock, Verify
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
    Servers,
    Tick,
    Verdict,
    Verified,
)
from .run import Run
from .state import (
    CONFIRM_POLL,
    LOCK_POLL,
    MARKER_POLL,
    REFUSED_POLL,
    Attempt,
    Confirm,
    Confirming,
    Departed,
    Draining,
    Locking,
    Next,
    State,
    Taken,
    decide,
    describe,
    grace,
    held,
    interval_left,
    old_code,
    registered_on,
    runs,
    wanted,
)

Answer = Head | Markers | Verified | Drain | Lock | Acted | ConfirmProbed


def step(state: State, event: Input) -> tuple[State, tuple[Effect, ...]]:
    """One input in: the new state and the effects to carry out, in order. Never raises."""
    r = Run(state, event.now)
    match event:
        case Head():
            _head(r, event)
        case Servers():
            _servers(r, event)
        case Loaded():
            r.s = replace(r.s, belief=r.s.belief.told(event), why=event.why or r.s.why)
        case Reload():
            _reload(r, event)
        case Tick():
            r.s = replace(r.s, timer=None)  # that timer is spent; advance() looks
        case _:
            _answer(r, event)
    advance(r)
    r.wake()
    return r.s, tuple(r.effects)


# -- what the world says -----------------------------------------------------------------


def _head(r: Run, event: Head) -> None:
    """A reading of HEAD: an event (a move before the action starts over: advance), or an answer."""
    r.s = replace(r.s, head=event.revision, belief=r.s.belief.heard(event.revision))
    _answer(r, event)


def _servers(r: Run, event: Servers) -> None:
    s, servers = r.s, event.servers
    pids = {x.pid for x in servers}
    a = s.attempt
    # Work in flight that left with its registration, outside our action: it may still
    # run (R8). Counted until it registers again, its process is gone, or the bound.
    departed = [d for d in held(s.departed, r.now, s.rules) if d.pid not in pids]
    if a is None or a.stage < Stage.ACT:
        left: dict[int, int] = {}
        for x in s.servers:
            if x.pid not in pids and x.pid not in s.retiring and x.inflight > 0:
                left[x.pid] = left.get(x.pid, 0) + x.inflight
        departed = [d for d in departed if d.pid not in left]
        departed += [Departed(pid, count, r.now) for pid, count in left.items()]
    belief = s.belief
    if s.servers and not servers and (a is None or a.stage < Stage.ACT):
        # Every registered server went away, and not in a restart of ours: they were
        # stopped. Restarting now would start them (the Hermes WebUI bug): wait.
        belief = belief.gone()
    r.s = replace(
        s,
        servers=servers,
        registered=s.registered or bool(servers),
        belief=belief,
        retiring=s.retiring & pids,
        departed=tuple(departed),
    )
    if a is not None and a.action is not None and a.stage is Stage.CONFIRM:
        heads = (a.target, r.s.head)
        if any(x.revision not in heads for x in servers if x.since >= a.action.at):
            # A new server loaded a commit the watcher has yet to report (polling):
            # read HEAD now rather than refuse it (R5).
            r.effects.append(ReadHead(r.ticket()))


def _reload(r: Run, event: Reload) -> None:
    r.s = replace(r.s, rules=event.rules, gave_up=None, actions=0, drain_since=None)
    a = r.s.attempt
    if a is not None and a.action is not None:
        r.put(replace(a, action=replace(a.action, reloaded=True)))
    elif a is not None:
        r.drop()  # judged again under the new rules, from the start


def _answer(r: Run, event: Answer) -> None:
    """The answer to the request awaited, to the handler of its stage and type (an answer
    of another type than its stage asked for is dropped, and asked for again)."""
    a = r.s.attempt
    if a is None or a.ask is None or event.ticket != a.ask:
        return  # an event, or the answer to a request of a run that is over: stale
    a = replace(a, ask=None)
    r.put(a)
    match event:
        case Markers() if a.stage in (Stage.MARKERS, Stage.LOCKED_MARKERS):
            _markers(r, a, event)
        case Verified() if a.stage in (Stage.VERIFY, Stage.LOCKED_VERIFY):
            _verified(r, a, event)
        case Verified() if a.stage is Stage.CONFIRM_VERIFY and a.action and a.confirm and a.confirm.running:
            _verified_loaded(r, a, a.action, a.confirm.running, event)
        case Drain() if a.stage in (Stage.DRAIN, Stage.LOCKED_DRAIN, Stage.FINAL_HEAD):
            _probed(r, a, event)
        case Lock() if a.stage is Stage.LOCK:
            _locked(r, a, event)
        case Head() if a.stage is Stage.LOCKED_HEAD and event.revision == a.target:
            r.next()  # else HEAD moved: advance() starts over for the new target
        case Head() if a.stage is Stage.FINAL_HEAD and event.revision == a.target:
            final(r, a)
        case Acted() if a.stage is Stage.ACT and a.action is not None:
            _acted(r, a, a.action, event)
        case ConfirmProbed() if a.stage is Stage.CONFIRM and a.confirm is not None:
            _probed_confirm(r, a, a.confirm, event)


# -- the answers: a handler per type ------------------------------------------------------


def _markers(r: Run, a: Attempt, event: Markers) -> None:
    reason = event.reason or f"markers: {event.verdict.value}"
    if event.verdict is Verdict.GO:
        r.next()
    elif a.stage is Stage.LOCKED_MARKERS:
        r.again()  # an update began before the lock: wait for it, verify again
    elif event.verdict is Verdict.WAIT:
        r.publish(RestartPhase.WAITING, reason, Stage.MARKERS)
        r.wait_until(r.now + MARKER_POLL)
    else:
        r.publish(RestartPhase.REFUSED, reason, Stage.MARKERS)
        r.wait_until(r.now + REFUSED_POLL)  # lifts when the marker goes


def _verified(r: Run, a: Attempt, event: Verified) -> None:
    if event.ok:
        r.s = replace(r.s, verify_seconds=r.now - a.asked_at)
        r.next()
    else:
        r.give_up(RestartPhase.REFUSED, f"verify-failed: {event.detail}")


def _verified_loaded(r: Run, a: Attempt, act: Taken, running: str, event: Verified) -> None:
    """The only probe of what the restarted servers loaded (a commit that landed meanwhile)."""
    if event.ok:
        r.confirmed(a, act, running)
    elif act.traits.aborts:
        # The new servers loaded a commit that landed meanwhile and fails the probe:
        # they go, the old serve on.
        why = f"the new servers loaded {running[:12]}; the probe {event.detail}"
        r.restart_failed(a, act, f"not-confirmed: {why}")
    else:
        # They run it already (nothing to restart onto): not confirmed, and the
        # verdict stands while they do (R2).
        why = f"verify-failed: the servers loaded {running[:12]}; the probe {event.detail}"
        r.give_up(RestartPhase.FAILED, why, running, loaded=True)


def _probed(r: Run, a: Attempt, event: Drain) -> None:
    probed = None if event.inflight is None else max(0, event.inflight)
    departed = tuple(d for d in r.held() if d.pid not in event.gone)
    r.s = replace(r.s, probed=probed, probe_detail=event.detail, departed=departed)
    if a.stage is Stage.DRAIN:
        r.wait_until(r.now + r.s.rules.drain_poll)
    elif a.stage is Stage.LOCKED_DRAIN:
        drain_under_lock(r, a)
    elif r.in_flight() != 0 and a.note is None:
        r.again()  # the final look: work came in while verifying under the lock (R8)
    # else advance reads HEAD, the last look before the action


def _locked(r: Run, a: Attempt, event: Lock) -> None:
    lock = a.lock or Locking()
    if event.error is not None:
        r.give_up(RestartPhase.FAILED, f"lock: {event.error}")
    elif event.acquired:
        r.next(replace(a, lock=replace(lock, held=True)))
    else:
        r.publish(RestartPhase.WAITING, f"lock: {event.detail or 'held'}", Stage.LOCK)
        later = replace(lock, delay=min(lock.delay * 2, LOCK_POLL[1]))
        r.put(replace(a, deadline=r.now + lock.delay, lock=later))


def _acted(r: Run, a: Attempt, act: Taken, event: Acted) -> None:
    if event.refused and not event.ok:
        r.give_up(RestartPhase.REFUSED, f"signal: {event.detail}")  # nothing was done
    elif not event.ok:
        # An action that failed started nothing: nothing to abort (R9).
        r.restart_failed(a, act, f"action {event.detail}", signalled=False)
    else:
        # Decided now, for this restart: a reload meanwhile does not change how.
        rules = r.s.rules
        by = Confirm.PROBE if rules.confirm_probe else Confirm.STATUS
        if act.traits.beside or (r.s.registered and not rules.confirm_probe):
            by = Confirm.REGISTRATIONS
        r.next(replace(a, confirm=Confirming(by, r.now + rules.confirm_timeout)))


def _probed_confirm(r: Run, a: Attempt, c: Confirming, event: ConfirmProbed) -> None:
    until = min(r.now + c.probe_delay, c.until)
    delay = min(c.probe_delay * 2, CONFIRM_POLL[1])
    c = replace(c, probe_ok=event.ok, last=f"the probe {event.detail}", probe_delay=delay)
    r.put(replace(a, deadline=until, confirm=c))


# -- moving on: a handler per stage ------------------------------------------------------


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
