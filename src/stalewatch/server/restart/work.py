"""The restart machine's slow requests, carried out: probes, the lock, the action,
and what servers that do not register run (:mod:`.loaded`).

:class:`Work` runs on the executor's one worker thread (:mod:`.executor`) and turns each
request of :mod:`.effects` into the answer of :mod:`.inputs` that carries its ticket.
Commands are configured argv lists run with :mod:`..commands` (own session, timeout,
bounded output, done when the process exits, a background child's output drained as a
hook's) and the variables that say which revision they are about.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ...core.procs import read_proc
from ...git.refs import GitDirs
from ...protocol.messages import MAX_INFLIGHT
from .. import commands
from ..commands import Outcome
from ..drain import OutputDrain
from . import loaded
from .actions import Action, Started, action_of
from .effects import Act, CheckMarkers, ProbeConfirm, ProbeDrain, TakeLock, Verify
from .inputs import Acted, ConfirmProbed, Drain, Loaded, Lock, Markers, Verdict, Verified
from .markers import assess
from .policy import RestartPolicy

logger = logging.getLogger(__name__)


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
        self.policy = policy  # a reload sets it, and so the action
        self._loaded = loaded
        self._drain = drain
        self._stop = stop
        self._lock: tuple[Path, int] | None = None  # the handoff lock's path and descriptor
        self._releasing = threading.Lock()  # the worker and stop() may both release
        # What the last action started beside the old servers, with the ticket of its
        # Act: Retire and Abort act on it only when they name that very action (R9).
        self.started: tuple[int, Started] | None = None
        self._pending: tuple[str, float] | None = None  # an action under way, first seen at
        self._learnt = ""  # what runs, as last learnt (logged when it changes)

    @property
    def action(self) -> Action:
        """The policy's action (:mod:`.actions`)."""
        return action_of(self.policy)

    def _run(
        self, argv: tuple[str, ...], what: str, revision: str, timeout: float, level: int = logging.WARNING
    ) -> Outcome:
        """Run a configured argv with the ``STALEWATCH_*`` variables: the checkout, the revision
        restarted onto (``STALEWATCH_REVISION``, also ``..._CURRENT_...``) and the loaded one."""
        env = {"STALEWATCH_CHECKOUT": self.key, "STALEWATCH_LOADED_REVISION": self._loaded() or ""}
        env |= dict.fromkeys(("STALEWATCH_REVISION", "STALEWATCH_CURRENT_REVISION"), revision)
        outcome = commands.run(
            argv,
            cwd=self.worktree,
            timeout=timeout,
            env=env,
            stop=self._stop,
            drain=self._drain,
            label=f"{what} for {self.key}",
        )
        if not outcome.ok and outcome.output:
            logger.log(level, "stalewatch: %s for %s printed:\n%s", what, self.key, outcome.output)
        return outcome

    def markers(self, request: CheckMarkers) -> Markers:
        verdict, now = assess(self.policy), time.monotonic()
        if verdict.go and (held := self._under_way(now)) is not None:
            return Markers(request.ticket, now, *held)
        return Markers(request.ticket, now, Verdict(verdict.action), verdict.reason)

    def _under_way(self, now: float) -> tuple[Verdict, str] | None:
        """A previous action still under way: a handoff's old master finishes its requests.

        Until it has exited, gunicorn keeps ``<pidfile>.2`` and ignores a ``USR2`` to the
        new master: the next action waits (told as a wait), ``drain_timeout`` at most,
        then refuses until it is over (it lifts by itself). Never a failure, never a signal.
        """
        what = self.action.under_way()
        if what is None:
            self._pending = None
            return None
        if self._pending is None or self._pending[0] != what:
            self._pending = (what, now)
        waited = now - self._pending[1]
        if waited >= self.policy.drain_timeout:
            return Verdict.REFUSE, f"handoff: {what}: still after {waited:.0f} s"
        return Verdict.WAIT, f"handoff: {what}"

    def verify(self, request: Verify) -> Verified:
        probe = self.policy.verify or ()
        outcome = self._run(probe, "the verify probe", request.revision, self.policy.verify_timeout)
        return Verified(request.ticket, time.monotonic(), outcome.ok, outcome.detail)

    def drain_probe(self, request: ProbeDrain, target: str) -> Drain:
        """A look at the drain: the probe's count, and which departed servers are gone."""
        # Their pids came from the kernel (SO_PEERCRED): while the process runs, the work
        # it had in flight may still run.
        gone = frozenset(pid for pid in request.pids if read_proc(pid) is None)
        probe = self.policy.drain_probe
        if probe is None:
            return Drain(request.ticket, time.monotonic(), 0, gone=gone)
        outcome = self._run(probe, "the drain probe", target, self.policy.drain_probe_timeout)
        count = parse_count(outcome.output) if outcome.ok else None
        detail = outcome.detail if not outcome.ok else "printed no whole number"
        return Drain(request.ticket, time.monotonic(), count, "" if count is not None else detail, gone)

    def take_lock(self, request: TakeLock) -> Lock:
        """The handoff lock, as ``flock(1)`` takes it (an exclusive ``flock`` on the file,
        created, never through a symlink), without blocking; held until released."""
        path, now = self.policy.lock, time.monotonic
        if path is None or (self._lock is not None and self._lock[0] == path):
            return Lock(request.ticket, now(), acquired=True)
        import fcntl  # noqa: PLC0415 - Unix only, and the CLI imports this module everywhere

        what = "open the lock"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o660)
            what = "lock"
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise
        except BlockingIOError:
            return Lock(request.ticket, now(), False, f"{path} is held")
        except OSError as exc:
            error = f"[Errno {exc.errno}] cannot {what} {path}: {exc.strerror}"
            return Lock(request.ticket, now(), False, error=error)
        self._lock = (path, fd)
        return Lock(request.ticket, now(), acquired=True)

    def release_lock(self) -> None:
        """Release the handoff lock (harmless when not held)."""
        with self._releasing:
            held, self._lock = self._lock, None
            if held is not None:
                import fcntl  # noqa: PLC0415 - Unix only (see take_lock)

                with contextlib.suppress(OSError):
                    fcntl.flock(held[1], fcntl.LOCK_UN)
                os.close(held[1])

    def act(self, request: Act) -> Acted:
        """Restart through the supervisor: the policy's action (:mod:`.actions`)."""
        self.started = None  # whatever happens now, an earlier action's is never aborted
        done = self.action.act(request.revision, self._run, self._stop)
        if done.started is not None:
            self.started = (request.ticket, done.started)
        log = logger.warning if done.refused else logger.info
        log("stalewatch: restart of %s: %s", self.key, done.detail)
        return Acted(request.ticket, time.monotonic(), done.ok, done.detail, refused=done.refused)

    def confirm_probe(self, request: ProbeConfirm) -> ConfirmProbed:
        probe = self.policy.confirm or ()
        # A probe refused while the new server still starts is expected: the machine asks
        # again until confirm_timeout, and only then warns once (the `failed` phase, with
        # the probe's last line). Its output meanwhile is for DEBUG.
        outcome = self._run(
            probe, "the confirm probe", request.revision, self.policy.confirm_timeout, logging.DEBUG
        )
        return ConfirmProbed(request.ticket, time.monotonic(), outcome.ok, outcome.detail)

    def _of(self, ticket: int) -> Started | None:
        """What the action with ``ticket`` started beside the old servers, if anything."""
        return self.started[1] if self.started is not None and self.started[0] == ticket else None

    def learn(self, dirs: GitDirs | None, head: str | None) -> Loaded:
        """What the servers run, when they do not register, as the machine is told it;
        logged when it changes."""
        told = loaded.learn(self.policy, dirs, head, self._stop, self._drain)
        line = loaded.describe(told)
        if line != self._learnt:
            self._learnt = line
            logger.info("stalewatch: restart of %s: %s", self.key, line)
        return Loaded(time.monotonic(), told.revision, told.not_revision, told.stopped, line)

    def retire(self, ticket: int) -> None:
        started = self._of(ticket)
        if started is not None:
            logger.info("stalewatch: restart of %s: %s", self.key, started.retire())

    def abort(self, ticket: int) -> None:
        """Stop the new servers the action ``ticket`` started, if any, never others."""
        started = self._of(ticket)
        if started is None:
            logger.info("stalewatch: restart of %s: that action started no new servers to stop", self.key)
            return
        logger.warning("stalewatch: restart of %s: %s", self.key, started.abort())
