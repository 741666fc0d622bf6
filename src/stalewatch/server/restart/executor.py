"""The executor of one checkout's restart machine: inputs fed under one lock, effects carried out.

The machine (:mod:`.machine`) decides; :class:`Restarter` only carries out:

- every input (the watcher's events as ``Head``, registry changes as ``Servers``, a
  reload as ``Reload``, what the process tells as ``Loaded``, the answers of requests,
  the timer's ``Tick``) is fed under one lock, whichever thread has it, stamped with
  ``time.monotonic()``;
- ``Publish`` is carried out at once, under that lock: stamped with ``at`` (and
  ``earliest`` turned into a Unix time) and handed to ``publish`` (the daemon's inbox),
  so phases reach clients in the order decided, and a phase before the event that
  caused it (:meth:`notice` runs before the checkout posts the event);
- ``Wake`` sets the single timer; everything slow (probes, the lock, the action,
  signals, re-binding the daemon's guard) goes to one worker thread
  (``stalewatch-restart:<checkout>``), which exists only while there is work or a
  timer, and feeds each answer back with its ticket (:mod:`.work`).

``Rebind`` runs on the worker, outside the lock: the guard's ``adopt`` delivers its
event through :meth:`notice`, which feeds again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from ...core.phases import RestartPhase, RestartState
from ...core.status import Event
from ...guard.guard import Guard
from ..drain import OutputDrain
from ..registry import Process
from .effects import Publish, ReleaseLock, Wake
from .inputs import Head, Input, Reload, Server, Servers, Tick
from .machine import step
from .policy import RestartPolicy, Rules
from .run import estimate
from .state import Belief, State
from .work import Job, Work

logger = logging.getLogger(__name__)


class Restarter:
    """Carries out the restart machine of one checkout. See the module doc.

    Args:
        key: the checkout as the daemon names it.
        worktree: where probes run.
        policy: the checkout's restart policy (replace with :meth:`update`).
        guard: the daemon's guard for the checkout (read; re-bound once confirmed).
        publish: called with each new :class:`RestartState`, under the feed lock (it
            must not block: the daemon posts it to its loop's inbox).
        drain: where an action's output goes while its background child holds it.
        known: what a restarter this one replaces knew the servers run; by
            default, the guard's loaded revision until something tells.
    """

    def __init__(
        self,
        key: str,
        worktree: Path,
        policy: RestartPolicy,
        *,
        guard: Guard,
        publish: Callable[[RestartState], None],
        drain: OutputDrain | None = None,
        known: Belief | None = None,
    ) -> None:
        self.key = key
        self._guard = guard
        self._publish = publish
        self._stop = threading.Event()
        self._cond = threading.Condition()
        belief = known or Belief(presumed=guard.loaded_revision)
        self._state = State(Rules.of(policy), started=time.monotonic(), belief=belief)  # reconnects: R8
        s = self._state
        guess = estimate(s.rules.settle, s.rules.verify, s.verify_seconds, s.restart_seconds)
        self._told = RestartState(RestartPhase.IDLE, estimate=guess, at=time.time())
        self._jobs: deque[Job] = deque()
        self._timer: float | None = None
        self._thread: threading.Thread | None = None
        self._busy = False  # the thread carries out a job or a tick now (outside _cond)
        self._head: str | None = None  # HEAD as last noticed (to learn again when it moves)
        self._work = Work(key, worktree, policy, guard=guard, drain=drain, stop=self._stop)

    # -- inputs (any thread) ---------------------------------------------------------------

    def start(self) -> None:
        """Begin: HEAD now, then ask what the servers run."""
        self._head = self._guard.snapshot().current_revision
        self.feed(Head(time.monotonic(), self._head))
        self._learn_later()

    def _learn_later(self, *, quiet: bool = False) -> None:
        """Ask what the servers run, when a pidfile or pid_command tells; else say (unless
        ``quiet``) that only registrations will."""
        policy = self._work.policy
        if policy.pidfile is not None or policy.pid_command is not None:
            with self._cond:
                if not self._stop.is_set():
                    self._jobs.append("learn")
                    self._spawn()
                    self._cond.notify_all()
        elif not quiet:
            logger.info(
                "stalewatch: restart of %s: until servers register, %s: no pidfile nor pid_command tells",
                self.key,
                self.belief.describe(),
            )

    def notice(self, event: Event) -> None:
        """A status change (the watcher's thread), fed before the event is posted."""
        revision = event.current_revision
        self.feed(Head(time.monotonic(), revision))
        if revision != self._head:
            self._head = revision
            self._learn_later(quiet=True)  # a server may have been restarted meanwhile

    def servers(self, processes: Sequence[Process]) -> None:
        """The registrations of the checkout now (after any change, work in flight included)."""
        found = tuple(Server(p.pid, p.revision, p.inflight, p.registered_at) for p in processes)
        self.feed(Servers(time.monotonic(), found))

    def update(self, policy: RestartPolicy) -> None:
        """A reload: the new policy; give-ups and counts forgotten (the operator's "try again")."""
        with self._cond:
            self._work.policy = policy
        self.feed(Reload(time.monotonic(), Rules.of(policy)))
        self._learn_later()

    def feed(self, event: Input) -> None:
        """One input in; its effects carried out (publishes at once, the rest queued)."""
        with self._cond:
            if self._stop.is_set():
                return  # stopping: a cut-off command's failure is not a verdict
            try:
                self._state, effects = step(self._state, event)
            except Exception:  # the machine never raises (property-tested): a bug
                logger.exception("stalewatch: the restart machine of %s failed on %s", self.key, event)
                return
            told = []
            for effect in effects:
                if isinstance(effect, Publish):
                    told.append(effect)  # in order, once this step's lock is released
                elif isinstance(effect, Wake):
                    self._timer = effect.at
                elif isinstance(effect, ReleaseLock) and self._next_in_order():
                    # At once (a non-blocking flock(LOCK_UN)), before the step's phases
                    # are told: an updater that reacts to `failed` or `waiting` finds the
                    # lock free (R3). Queued, it came after them: a race lost under load.
                    self._work.release_lock()
                else:
                    self._jobs.append(effect)
            for effect in told:
                self._tell(effect)
            self._spawn()
            self._cond.notify_all()

    def _next_in_order(self) -> bool:
        """Under _cond: a job carried out now is carried out in order: none is queued, and
        none is under way but on this very thread (which feeds its answer)."""
        return not self._jobs and (not self._busy or threading.current_thread() is self._thread)

    # -- publishing --------------------------------------------------------------------------

    @property
    def belief(self) -> Belief:
        """What the machine knows the servers that do not register run."""
        with self._cond:
            return self._state.belief

    @property
    def state(self) -> RestartState:
        """The last phase told."""
        return self._told

    def _tell(self, effect: Publish) -> None:
        """Stamp and publish a phase (under the lock: in the order decided)."""
        now, mono = time.time(), time.monotonic()
        earliest = None if effect.earliest is None else now + (effect.earliest - mono)
        state = replace(effect.state, at=now, earliest=earliest)
        self._told = state
        try:
            self._publish(state)
        except Exception:
            logger.exception("stalewatch: publishing a restart phase of %s failed", self.key)
        logger.log(
            logging.WARNING if state.phase in (RestartPhase.REFUSED, RestartPhase.FAILED) else logging.INFO,
            "stalewatch: restart of %s onto %s: %s%s",
            self.key,
            (state.revision or "")[:7] or "-",
            state.phase.value,
            f" ({state.reason})" if state.reason else "",
        )

    # -- the worker thread ------------------------------------------------------------------------

    def _spawn(self) -> None:
        # Under _cond: the thread clears self._thread under _cond before it ends, so work
        # queued meanwhile is either seen by it or starts a new one.
        if self._thread is not None or self._stop.is_set() or not (self._jobs or self._timer is not None):
            return
        thread = threading.Thread(target=self._run, name=f"stalewatch-restart:{self.key}", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no thread left: the next input tries again
            logger.exception("stalewatch: cannot start the restart thread of %s", self.key)
            return
        self._thread = thread

    def _next(self) -> Job | Tick | None:
        """Under _cond: the next job, the timer's tick, or ``None`` (nothing left: end)."""
        while not self._stop.is_set():
            if self._jobs:
                return self._jobs.popleft()
            if self._timer is None:
                return None
            left = self._timer - time.monotonic()
            if left <= 0:
                self._timer = None
                return Tick(time.monotonic())
            self._cond.wait(left)
        return None

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    job = self._next()
                    if job is None:
                        self._thread = None
                        return
                    self._busy = True
                try:
                    answer = job if isinstance(job, Tick) else self._work.carry(job)
                    if answer is not None:
                        self.feed(answer)
                finally:
                    with self._cond:
                        self._busy = False
        except Exception:
            logger.exception("stalewatch: the restart thread of %s failed", self.key)
            with self._cond:
                self._thread = None
                self._spawn()  # what is left is carried out by a new thread
        finally:
            if self._stop.is_set():
                self._work.release_lock()

    # -- stopping ------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Begin stopping: a running command is killed; :meth:`stop` waits for it."""
        with self._cond:
            self._stop.set()
            self._cond.notify_all()

    def stop(self) -> None:
        """Stop (a running command is killed), join the thread, release the lock. Harmless twice."""
        self.request_stop()
        with self._cond:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        if thread is None or not thread.is_alive():
            self._work.release_lock()
