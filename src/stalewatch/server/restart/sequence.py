"""One checkout's restart sequence (R1-R7), on a thread that exists only while it runs.

A stale event (or a registered server that runs another revision than HEAD) starts
the sequence for HEAD's revision, the *target*:

1. ``scheduled``, then ``waiting: settle`` until HEAD has not moved for ``settle`` s;
2. the attempt and interval bounds (R6);
3. the markers (R1): wait while an update runs or a hold file exists, refuse after an
   update that did not end cleanly (a refusal by a marker lifts when it is removed);
4. ``verifying``: the probe against the new code (R2); a failure refuses until another
   revision is wanted or a reload (a reload during the probe discards its verdict);
5. the lock (R3), then under it HEAD and the markers once more;
6. ``restarting``: the action through the supervisor (R4), then confirmation (R5):
   every registered server of the checkout runs the target and one registered after
   the action; else the confirm probe; else the action's exit status;
7. ``confirmed`` (the daemon's guard is re-bound to what the servers run: the target,
   or a commit that landed meanwhile and passes the probe too), or ``failed`` (retried
   after ``min_interval``, the lock released, while attempts remain).

A newer target at any point starts over (one restart for a burst of commits). Every
phase is published (R7) through ``publish``; nothing here touches the socket.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from ...core.errors import LockError
from ...core.phases import RestartPhase, RestartState
from ...core.status import Event, Status
from ...guard.guard import Guard
from ..commands import Outcome
from ..registry import Registry
from .action import environment, run_action, run_probe
from .announce import Announcer
from .confirm import Confirmation
from .lock import HandoffLock
from .markers import assess
from .policy import RestartPolicy

__all__ = ["Restarter"]

logger = logging.getLogger(__name__)

_MARKER_POLL = 0.5  # seconds between looks at markers while waiting on them
_REFUSED_POLL = 2.0  # seconds between looks at a refusing marker
_LOCK_POLL = (0.05, 1.0)  # first and longest wait between tries of a held lock


class _Changed(Exception):
    """The target moved (or the sequence was stopped): start over."""


class Restarter:
    """Drives the restart sequence of one checkout. See the module doc.

    Args:
        key: the checkout as the daemon names it.
        worktree: where probes run.
        policy: the checkout's restart policy (replace with :meth:`update`).
        guard: the daemon's guard for the checkout (read, never owned).
        registry: the registered server processes.
        publish: called with each new :class:`RestartState` (any thread).
        rebind: called with the target once confirmed: the servers now run it.
    """

    def __init__(
        self,
        key: str,
        worktree: Path,
        policy: RestartPolicy,
        *,
        guard: Guard,
        registry: Registry,
        publish: Callable[[RestartState], None],
        rebind: Callable[[str], None],
    ) -> None:
        self.key = key
        self._worktree = worktree
        self._policy = policy
        self._guard = guard
        self._registry = registry
        self._announcer = Announcer(key, publish)
        self._rebind = rebind
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pending = False
        # Per target, reset when another revision is wanted (not when none is for a
        # moment): memory stays bounded, and a give-up stands for its revision (R6).
        self._target: str | None = None
        self._attempts = 0
        self._gave_up: RestartState | None = None  # the phase that gave up, until reset
        # The servers already run the revision given up on (they loaded a commit that
        # landed during the restart, and it failed the probe): the give-up stands even
        # though no restart is wanted.
        self._gave_up_loaded = False
        # Reloads so far, and at the start of the running step: a verdict reached under
        # an older policy (a probe that ran while the operator fixed it) is not recorded.
        self._reloads = 0
        self._epoch = 0
        # What the servers run since a confirmed restart, until the daemon's guard is
        # re-bound to it (that happens on the socket loop, a moment later).
        self._running: str | None = None
        self._last_action: float | None = None
        self._registered_ever = False

    # -- control (any thread) ------------------------------------------------------------

    def adopted(self) -> None:
        """The daemon's guard adopted what the servers run: its loaded revision says it now."""
        self._running = None
        self.submit()

    def update(self, policy: RestartPolicy) -> None:
        """A reload: the new policy from the next step on; give-ups are forgotten.

        A reload is how an operator says "try again" after fixing what a probe or an
        action tripped on (R6: the bounds hold between reloads).
        """
        with self._cond:
            self._policy = policy
            self._reloads += 1
            self._gave_up, self._gave_up_loaded = None, False
            self._attempts = 0
        self.submit()

    def notice(self, event: Event) -> None:
        """A status change (the watcher's thread): say at once that a restart is coming.

        Published before the event reaches clients, so the first 409 a stale server
        answers already says ``restart_scheduled`` (R7); the sequence's thread
        decides the rest.
        """
        gave_up = self._gave_up
        if gave_up is not None and gave_up.revision == event.current_revision:
            pass  # a give-up stands for its revision (R6): no restart is coming
        elif event.status is Status.STALE and event.current_revision is not None:
            state = self.state
            if not (state.phase.coming and state.revision == event.current_revision):
                self._publish(RestartPhase.SCHEDULED, None, event.current_revision)
        self.submit()

    def submit(self) -> None:
        """Something changed (an event, a registration): look again, starting if needed."""
        with self._cond:
            if self._stop.is_set():
                return
            self._pending = True
            self._cond.notify_all()
            if self._thread is None:
                thread = threading.Thread(
                    target=self._run, name=f"stalewatch-restart:{self.key}", daemon=True
                )
                thread.start()  # may raise (no threads left): then the next submit tries again
                self._thread = thread

    def request_stop(self) -> None:
        """Begin stopping: a running command is killed; :meth:`stop` waits for it."""
        with self._cond:
            self._stop.set()
            self._cond.notify_all()
        self._registry.wake()

    def stop(self) -> None:
        """Stop the sequence (a running command is killed) and join the thread."""
        self.request_stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)

    # -- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._cond:
                    self._pending = False
                target = self._wanted()
                if target is not None and target != self._target:
                    self._target, self._attempts = target, 0
                    self._gave_up, self._gave_up_loaded = None, False
                gave_up = self._gave_up
                if gave_up is not None and (
                    gave_up.revision == target
                    or (
                        target is None
                        and self._gave_up_loaded
                        and gave_up.revision == self._guard.snapshot().current_revision
                    )
                ):
                    # R6: a give-up stands until another revision is wanted or a reload;
                    # say it again over whatever was published meanwhile.
                    self._publish(gave_up.phase, gave_up.reason, gave_up.revision, gave_up.attempt)
                elif target is not None:
                    try:
                        self._sequence(target)
                    except _Changed:
                        continue
                elif self.state.phase not in (RestartPhase.IDLE, RestartPhase.CONFIRMED):
                    self._publish(RestartPhase.IDLE)
                with self._cond:
                    if not self._pending:
                        self._thread = None
                        return
            with self._cond:
                self._thread = None
        except Exception:
            logger.exception("stalewatch: the restart sequence for %s failed", self.key)
            self._publish(RestartPhase.FAILED, "internal error (logged)", self.state.revision)
            with self._cond:
                self._thread = None
                again = self._pending  # a submit that came meanwhile found this thread
            if again:
                self.submit()

    def _wanted(self) -> str | None:
        """The revision the servers should run, when some do not: else ``None``."""
        snap = self._guard.snapshot()
        if snap.status is not Status.STALE and snap.status is not Status.CURRENT:
            return None
        current = snap.current_revision
        if current is None:
            return None
        processes = self._registry.processes(self.key)
        if processes:
            self._registered_ever = True
            return current if any(p.revision != current for p in processes) else None
        # No server tells what it runs: the daemon's loaded revision stands for them.
        running = self._running or snap.loaded_revision
        return current if current != running else None

    def _check(self, target: str) -> None:
        if self._stop.is_set() or self._wanted() != target:
            raise _Changed

    def _wait(self, seconds: float, target: str) -> None:
        """Wait up to ``seconds``; raise :class:`_Changed` if the target moved meanwhile."""
        with self._cond:
            if not self._pending and not self._stop.is_set():
                self._cond.wait(max(0.0, seconds))
            self._pending = False
        self._check(target)

    def _sequence(self, target: str) -> None:
        with self._cond:
            policy, self._epoch = self._policy, self._reloads
        self._publish(RestartPhase.SCHEDULED, None, target)
        self._settle(target, policy)
        if self._attempts >= policy.max_attempts:
            reason = f"max-attempts: {self._attempts} restarts of this revision failed"
            self._give_up(target, RestartPhase.FAILED, reason)
            return
        if self._last_action is not None:
            left = policy.min_interval - (time.monotonic() - self._last_action)
            while left > 0:
                self._publish(RestartPhase.WAITING, f"min-interval: {left:.0f} s left", target)
                self._wait(left, target)
                left = policy.min_interval - (time.monotonic() - self._last_action)
        verified: str | None = None
        while True:
            self._markers(target, policy)
            if policy.verify is not None and verified != target:
                if not self._verify(target, policy, policy.verify):
                    return
                verified = target
            lock = HandoffLock(policy.lock) if policy.lock is not None else None
            try:
                if lock is not None and not self._take(lock, target):
                    return
                # Under the lock no cooperating updater runs: look once more (R3).
                if self._guard.refresh().current_revision != target:
                    raise _Changed
                if not assess(policy).go:
                    verified = None  # an update began before the lock: wait, then verify again
                    continue
                self._restart(target, policy)
                return
            finally:
                if lock is not None:
                    lock.release()

    def _settle(self, target: str, policy: RestartPolicy) -> None:
        generation = self._guard.snapshot().generation
        deadline = time.monotonic() + policy.settle
        while (left := deadline - time.monotonic()) > 0:
            self._publish(RestartPhase.WAITING, "settle", target, retry_after=self._estimate(policy, left))
            self._wait(left, target)
            if self._guard.snapshot().generation != generation:
                raise _Changed  # HEAD moved, even if back: settle from scratch

    def _markers(self, target: str, policy: RestartPolicy) -> None:
        while not (verdict := assess(policy)).go:
            if verdict.action == "wait":
                self._publish(
                    RestartPhase.WAITING, verdict.reason, target, retry_after=self._estimate(policy)
                )
                self._wait(_MARKER_POLL, target)
            else:
                self._publish(RestartPhase.REFUSED, verdict.reason, target)
                self._wait(_REFUSED_POLL, target)  # lifts when the marker goes

    def _verify(self, target: str, policy: RestartPolicy, probe: tuple[str, ...]) -> bool:
        self._publish(RestartPhase.VERIFYING, None, target, retry_after=self._estimate(policy))
        started = time.monotonic()
        outcome = self._probe(probe, target, policy)
        self._check(target)
        if not outcome.ok:
            self._give_up(target, RestartPhase.REFUSED, f"verify-failed: {outcome.detail}")
            return False
        self._announcer.verify_seconds = time.monotonic() - started
        return True

    def _take(self, lock: HandoffLock, target: str) -> bool:
        delay, longest = _LOCK_POLL
        while True:
            try:
                if lock.try_acquire():
                    return True
            except LockError as exc:
                self._give_up(target, RestartPhase.FAILED, f"lock: {exc.strerror}")
                return False
            self._publish(RestartPhase.WAITING, f"lock: {lock.path} is held", target, retry_after=None)
            self._wait(delay, target)
            delay = min(delay * 2, longest)

    def _restart(self, target: str, policy: RestartPolicy) -> None:
        self._attempts += 1
        attempt = self._attempts
        self._last_action = time.monotonic()
        started_wall = time.time()
        self._publish(RestartPhase.RESTARTING, None, target, attempt, self._announcer.restart_seconds)
        outcome = run_action(policy, self._env(target), self._stop)
        if self._stop.is_set():
            raise _Changed  # the daemon stops: the action was cut short, not failed
        if not outcome.ok:
            self._failed(target, policy, f"action {outcome.detail}")
        self._registered_ever |= bool(self._registry.processes(self.key))
        confirmation = Confirmation(self.key, self._registry, self._guard, self._stop, self._env(target))
        running, problem = confirmation.wait(target, policy, started_wall, registered=self._registered_ever)
        if self._stop.is_set():
            raise _Changed
        if problem is not None:
            self._failed(target, policy, f"not-confirmed: {problem}")
        if running != target and policy.verify is not None:
            # A commit landed during the restart and the new servers loaded it (R5):
            # the probe passed for the target only, so it must pass for this one too.
            # If not, they run it already (nothing to restart onto): not confirmed, and
            # the daemon's guard keeps calling them stale.
            outcome = self._probe(policy.verify, running, policy)
            if self._stop.is_set():
                raise _Changed
            if not outcome.ok:
                reason = f"verify-failed: the servers loaded {running[:12]}; the probe {outcome.detail}"
                self._give_up(running, RestartPhase.FAILED, reason, loaded=True)
                return
        self._announcer.restart_seconds = max(0.5, time.monotonic() - self._last_action)
        self._running = running
        # Done: the bounds count failures of one revision; a later need (a server on
        # old code registering) starts afresh.
        self._target, self._attempts = None, 0
        self._publish(RestartPhase.CONFIRMED, None, running, attempt)
        self._rebind(running)

    def _probe(self, probe: tuple[str, ...], revision: str, policy: RestartPolicy) -> Outcome:
        """Run the verify probe against ``revision``'s code, in the worktree."""
        outcome = run_probe(probe, self._worktree, policy, self._env(revision), self._stop)
        if not outcome.ok and outcome.output:
            logger.warning("stalewatch: verify probe for %s printed:\n%s", self.key, outcome.output)
        return outcome

    def _failed(self, target: str, policy: RestartPolicy, reason: str) -> NoReturn:
        """Publish a failed attempt, give up after the last; raise :class:`_Changed` to retry."""
        if self._reloads != self._epoch:
            raise _Changed  # reloaded meanwhile: judge again under the new policy
        attempts = self._attempts
        if attempts >= policy.max_attempts:
            self._give_up(
                target, RestartPhase.FAILED, f"{reason} (attempt {attempts} of {policy.max_attempts})"
            )
        else:
            self._publish(RestartPhase.FAILED, reason, target, attempts)
        # Never a tight loop (R6): the next attempt waits out ``min_interval`` from the
        # last action in _sequence, after the lock is released, not while holding it.
        raise _Changed

    def _give_up(self, target: str, phase: RestartPhase, reason: str, *, loaded: bool = False) -> None:
        # Stands until another revision is wanted or a reload (see _run).
        with self._cond:
            if self._reloads != self._epoch:
                raise _Changed  # the verdict of an older policy: judge again
            self._gave_up = RestartState(phase, reason, target, self._attempts, None, time.time())
            self._gave_up_loaded, self._target = loaded, target
        self._publish(phase, reason, target, self._attempts)

    # -- publishing ----------------------------------------------------------------------

    @property
    def state(self) -> RestartState:
        """The last phase published."""
        return self._announcer.state

    def _estimate(self, policy: RestartPolicy, settle_left: float | None = None) -> float:
        return self._announcer.estimate(policy, settle_left)

    def _publish(
        self,
        phase: RestartPhase,
        reason: str | None = None,
        revision: str | None = None,
        attempt: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        if attempt is None:
            attempt = self._attempts if revision else 0
        self._announcer.tell(
            phase, reason, revision, attempt=attempt, retry_after=retry_after, policy=self._policy
        )

    def _env(self, target: str) -> dict[str, str]:
        return environment(self.key, target, self._guard.snapshot().loaded_revision)
