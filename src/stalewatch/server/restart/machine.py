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
(:func:`.stages.advance`, one handler per stage in ``stages.MOVES``) and asks for the
next wake-up; :class:`~.run.Run` holds the step's bookkeeping and the outcomes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from ...core.phases import RestartPhase
from . import inputs
from .effects import Effect, ReadHead, Stage
from .run import Run, held
from .stages import advance, drain_under_lock, final
from .state import (
    CONFIRM_POLL,
    LOCK_POLL,
    MARKER_POLL,
    REFUSED_POLL,
    Attempt,
    Confirm,
    Confirming,
    Departed,
    Locking,
    State,
    Taken,
)

Answer = inputs.Head | inputs.Markers | inputs.Verified | inputs.Drain | inputs.Lock | inputs.Acted


def step(state: State, event: inputs.Input) -> tuple[State, tuple[Effect, ...]]:
    """One input in: the new state and the effects to carry out, in order. Never raises."""
    r = Run(state, event.now)
    match event:
        case inputs.Head():
            _head(r, event)
        case inputs.Servers():
            _servers(r, event)
        case inputs.Loaded():
            r.s = replace(r.s, belief=r.s.belief.told(event), why=event.why or r.s.why)
        case inputs.Reload():
            _reload(r, event)
        case inputs.Tick():
            r.s = replace(r.s, timer=None)  # that timer is spent; advance() looks
        case _:
            _answer(r, event)
    advance(r)
    r.wake()
    return r.s, tuple(r.effects)


# -- what the world says -----------------------------------------------------------------


def _head(r: Run, event: inputs.Head) -> None:
    """A reading of HEAD: an event (a move before the action starts over: advance), or an answer."""
    r.s = replace(r.s, head=event.revision, belief=r.s.belief.heard(event.revision))
    _answer(r, event)


def _servers(r: Run, event: inputs.Servers) -> None:
    s, servers = r.s, event.servers
    pids = {x.pid for x in servers}
    a = s.attempt
    ours = a is not None and a.stage >= Stage.ACT  # a restart of ours under way
    # Work in flight that left with its registration, outside our action: it may still
    # run (R8). Counted until it registers again, its process is gone, or the bound.
    left: Counter[int] = Counter()
    for x in s.servers:
        if not ours and x.pid not in pids and x.pid not in s.retiring and x.inflight > 0:
            left[x.pid] += x.inflight
    departed = [d for d in held(s.departed, r.now, s.rules) if d.pid not in pids and d.pid not in left]
    departed += [Departed(pid, count, r.now) for pid, count in left.items()]
    # Every registered server went away, and not in a restart of ours: they were
    # stopped. Restarting now would start them (the Hermes WebUI bug): wait.
    belief = s.belief.gone() if s.servers and not servers and not ours else s.belief
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


def _reload(r: Run, event: inputs.Reload) -> None:
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
        case inputs.Markers() if a.stage in (Stage.MARKERS, Stage.LOCKED_MARKERS):
            _markers(r, a, event)
        case inputs.Verified() if a.stage in (Stage.VERIFY, Stage.LOCKED_VERIFY):
            _verified(r, a, event)
        case inputs.Verified() if (
            a.stage is Stage.CONFIRM_VERIFY and a.action and a.confirm and a.confirm.running
        ):
            _verified_loaded(r, a, a.action, a.confirm.running, event)
        case inputs.Drain() if a.stage in (Stage.DRAIN, Stage.LOCKED_DRAIN, Stage.FINAL_HEAD):
            _probed(r, a, event)
        case inputs.Lock() if a.stage is Stage.LOCK:
            _locked(r, a, event)
        case inputs.Head() if a.stage is Stage.LOCKED_HEAD and event.revision == a.target:
            r.next()  # else HEAD moved: advance() starts over for the new target
        case inputs.Head() if a.stage is Stage.FINAL_HEAD and event.revision == a.target:
            final(r, a)
        case inputs.Acted() if a.stage is Stage.ACT and a.action is not None:
            _acted(r, a, a.action, event)
        case inputs.Verified() if a.stage is Stage.CONFIRM and a.confirm is not None:
            _probed_confirm(r, a, a.confirm, event)


# -- the answers: a handler per type ------------------------------------------------------


def _markers(r: Run, a: Attempt, event: inputs.Markers) -> None:
    reason = event.reason or f"markers: {event.verdict.value}"
    if event.verdict is inputs.Verdict.GO:
        r.next()
    elif a.stage is Stage.LOCKED_MARKERS:
        r.again()  # an update began before the lock: wait for it, verify again
    elif event.verdict is inputs.Verdict.WAIT:
        r.publish(RestartPhase.WAITING, reason, Stage.MARKERS)
        r.wait_until(r.now + MARKER_POLL)
    else:
        r.publish(RestartPhase.REFUSED, reason, Stage.MARKERS)
        r.wait_until(r.now + REFUSED_POLL)  # lifts when the marker goes


def _verified(r: Run, a: Attempt, event: inputs.Verified) -> None:
    if event.ok:
        r.s = replace(r.s, verify_seconds=r.now - a.asked_at)
        r.next()
    else:
        r.give_up(RestartPhase.REFUSED, f"verify-failed: {event.detail}")


def _verified_loaded(r: Run, a: Attempt, act: Taken, running: str, event: inputs.Verified) -> None:
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


def _probed(r: Run, a: Attempt, event: inputs.Drain) -> None:
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


def _locked(r: Run, a: Attempt, event: inputs.Lock) -> None:
    lock = a.lock or Locking()
    if event.error is not None:
        r.give_up(RestartPhase.FAILED, f"lock: {event.error}")
    elif event.acquired:
        r.next(replace(a, lock=replace(lock, held=True)))
    else:
        r.publish(RestartPhase.WAITING, f"lock: {event.detail or 'held'}", Stage.LOCK)
        later = replace(lock, delay=min(lock.delay * 2, LOCK_POLL[1]))
        r.put(replace(a, deadline=r.now + lock.delay, lock=later))


def _acted(r: Run, a: Attempt, act: Taken, event: inputs.Acted) -> None:
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


def _probed_confirm(r: Run, a: Attempt, c: Confirming, event: inputs.Verified) -> None:
    until = min(r.now + c.probe_delay, c.until)
    delay = min(c.probe_delay * 2, CONFIRM_POLL[1])
    c = replace(c, probe_ok=event.ok, last=f"the probe {event.detail}", probe_delay=delay)
    r.put(replace(a, deadline=until, confirm=c))
