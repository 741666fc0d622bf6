"""The restart machine's slow requests, carried out: probes, the lock, the action (R1-R10).

:class:`Work` runs on the executor's one worker thread (:mod:`.executor`) and turns each
request of :mod:`.effects` into the answer of :mod:`.inputs` that carries its ticket.
Commands are configured argv lists run with :mod:`..commands` (own session, timeout,
bounded output, done when the process exits, a background child's output drained as a
hook's, R4) and the variables that say which revision they are about.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ...core.errors import LockError
from ...protocol.messages import MAX_INFLIGHT
from .. import commands
from ..commands import Outcome
from ..drain import OutputDrain
from .effects import Act, CheckMarkers, ProbeConfirm, ProbeDrain, TakeLock, Verify
from .handoff import Handoff, promoted
from .inputs import Acted, ConfirmProbed, Drain, Lock, Markers, Verdict, Verified
from .lock import HandoffLock
from .markers import assess
from .pidfile import signal_server
from .policy import RestartPolicy

__all__ = ["Work", "environment", "parse_count"]

logger = logging.getLogger(__name__)

Answer = Markers | Verified | Drain | Lock | Acted | ConfirmProbed


def environment(key: str, target: str, loaded: str | None) -> dict[str, str]:
    """The ``STALEWATCH_*`` variables of a restart's commands: the checkout, the revision
    restarted onto (``STALEWATCH_REVISION``, also ``..._CURRENT_...``) and the loaded one."""
    return {
        "STALEWATCH_CHECKOUT": key,
        "STALEWATCH_REVISION": target,
        "STALEWATCH_LOADED_REVISION": loaded or "",
        "STALEWATCH_CURRENT_REVISION": target,
    }


def parse_count(output: str) -> int | None:
    """The drain probe's answer: its last line, a whole number up to ``MAX_INFLIGHT``."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines or not lines[-1].isascii() or not lines[-1].isdigit() or len(lines[-1]) > 10:
        return None
    count = int(lines[-1])
    return count if count <= MAX_INFLIGHT else None


class Work:
    """Carries out one checkout's slow requests (one at a time, on the worker thread).

    Args:
        key: the checkout as the daemon names it.
        worktree: where probes run.
        policy: the restart policy (replaced on reload through :attr:`policy`).
        loaded: the daemon's loaded revision now (for the commands' variables).
        drain: where a command's output goes while its background child holds it.
        stop: set when the daemon stops: a running command is killed.
    """

    def __init__(
        self,
        key: str,
        worktree: Path,
        policy: RestartPolicy,
        *,
        loaded: Callable[[], str | None],
        drain: OutputDrain | None,
        stop: threading.Event,
    ) -> None:
        self.key = key
        self.worktree = worktree
        self.policy = policy
        self._loaded = loaded
        self._drain = drain
        self._stop = stop
        self._lock: HandoffLock | None = None
        self._releasing = threading.Lock()  # the worker and stop() may both release
        self.handoff: Handoff | None = None  # the last USR2 handoff begun

    def _run(self, argv: tuple[str, ...], what: str, revision: str, timeout: float) -> Outcome:
        outcome = commands.run(
            argv,
            cwd=self.worktree,
            timeout=timeout,
            env=environment(self.key, revision, self._loaded()),
            stop=self._stop,
            drain=self._drain,
            label=f"{what} for {self.key}",
        )
        if not outcome.ok and outcome.output:
            logger.warning("stalewatch: %s for %s printed:\n%s", what, self.key, outcome.output)
        return outcome

    def markers(self, request: CheckMarkers) -> Answer:
        verdict = assess(self.policy)
        return Markers(request.ticket, time.monotonic(), Verdict(verdict.action), verdict.reason)

    def verify(self, request: Verify) -> Answer:
        probe = self.policy.verify or ()
        outcome = self._run(probe, "the verify probe", request.revision, self.policy.verify_timeout)
        return Verified(request.ticket, time.monotonic(), outcome.ok, outcome.detail)

    def drain_probe(self, request: ProbeDrain, target: str) -> Answer:
        probe = self.policy.drain_probe or ()
        outcome = self._run(probe, "the drain probe", target, self.policy.drain_probe_timeout)
        count = parse_count(outcome.output) if outcome.ok else None
        detail = outcome.detail if not outcome.ok else "printed no whole number"
        return Drain(request.ticket, time.monotonic(), count, "" if count is not None else detail)

    def take_lock(self, request: TakeLock) -> Answer:
        path = self.policy.lock
        if path is None:
            return Lock(request.ticket, time.monotonic(), acquired=True)
        lock = self._lock if self._lock is not None and self._lock.path == path else HandoffLock(path)
        try:
            acquired = lock.try_acquire()
        except LockError as exc:
            return Lock(request.ticket, time.monotonic(), acquired=False, error=str(exc))
        if acquired:
            self._lock = lock
        return Lock(request.ticket, time.monotonic(), acquired, "" if acquired else f"{path} is held")

    def release_lock(self) -> None:
        with self._releasing:
            lock, self._lock = self._lock, None
            if lock is not None:
                lock.release()

    def act(self, request: Act) -> Answer:
        """Restart through the supervisor (R4): the action, or the checked signal (R10)."""
        policy = self.policy
        if policy.action is not None:
            outcome = self._run(policy.action, "the restart action", request.revision, policy.action_timeout)
            return Acted(request.ticket, time.monotonic(), outcome.ok, outcome.detail)
        path = policy.pidfile
        if path is None:  # the parser refuses such a policy
            return Acted(request.ticket, time.monotonic(), False, "no action nor pidfile")
        pending = promoted(path, self._stop)
        if pending is not None:
            return Acted(request.ticket, time.monotonic(), False, pending)
        if request.handoff:
            self.handoff, detail = Handoff.begin(path, policy.signal, time.time())
            ok = self.handoff is not None
        else:
            proc, detail = signal_server(path, policy.signal)
            ok = proc is not None
        logger.info("stalewatch: restart of %s: %s", self.key, detail)
        refused = detail.startswith("refused: ")
        return Acted(request.ticket, time.monotonic(), ok, detail.removeprefix("refused: "), refused=refused)

    def confirm_probe(self, request: ProbeConfirm) -> Answer:
        probe = self.policy.confirm or ()
        outcome = self._run(probe, "the confirm probe", request.revision, self.policy.confirm_timeout)
        return ConfirmProbed(request.ticket, time.monotonic(), outcome.ok, outcome.detail)

    def retire(self) -> None:
        if self.handoff is not None:
            logger.info("stalewatch: restart of %s: %s", self.key, self.handoff.retire())

    def abort(self) -> None:
        if self.handoff is not None:
            logger.warning("stalewatch: restart of %s: %s", self.key, self.handoff.abort())
