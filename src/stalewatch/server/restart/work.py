"""The restart machine's slow jobs, carried out: probes, the lock, the action, HEAD,
and what servers that do not register run (:mod:`.loaded`).

:class:`Work` runs on the executor's one worker thread (:mod:`.executor`) and turns each
request of :mod:`.effects` into the answer of :mod:`.inputs` that carries its ticket;
each job's doing and its answer when that raises are paired in :meth:`Work._pair`.
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
from typing import Literal

from ...core.procs import read_proc
from ...guard.guard import Guard
from ...protocol.messages import MAX_INFLIGHT
from .. import commands
from ..commands import Outcome
from ..drain import OutputDrain
from . import effects, loaded
from .actions import Begun, action_of
from .inputs import Acted, Drain, Head, Input, Loaded, Lock, Markers, Verdict, Verified
from .markers import assess
from .policy import RestartPolicy

logger = logging.getLogger(__name__)

Job = effects.Effect | Literal["learn"]  # "learn": the worker's own job, ask what the servers run


def parse_count(output: str) -> int | None:
    """The drain probe's answer: its last line, a whole number up to ``MAX_INFLIGHT``."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines or not lines[-1].isascii() or not lines[-1].isdigit() or len(lines[-1]) > 10:
        return None
    count = int(lines[-1])
    return count if count <= MAX_INFLIGHT else None


class Work:
    """Carries out one checkout's slow jobs (one at a time, on the worker thread).

    Args:
        key: the checkout as the daemon names it.
        worktree: where probes run.
        policy: the restart policy (replaced on reload through :attr:`policy`).
        guard: the daemon's guard (HEAD read, the loaded revision, re-bound once confirmed).
        drain: where a command's output goes while its background child holds it.
        stop: set when the daemon stops: a running command is killed.
    """

    def __init__(
        self,
        key: str,
        worktree: Path,
        policy: RestartPolicy,
        *,
        guard: Guard,
        drain: OutputDrain | None,
        stop: threading.Event,
    ) -> None:
        self.key = key
        self.worktree = worktree
        self.policy = policy  # a reload sets it, and so the action
        self._guard = guard
        self._drain = drain
        self._stop = stop
        self._lock: tuple[Path, int] | None = None  # the handoff lock's path and descriptor
        self._releasing = threading.Lock()  # the worker and stop() may both release
        # What the last action started beside the old servers, with the ticket of its
        # Act: Retire and Abort act on it only when they name that very action (R9).
        self._started: tuple[int, Begun] | None = None
        self._pending: tuple[str, float] | None = None  # an action under way, first seen at
        self._learnt = ""  # what runs, as last learnt (logged when it changes)

    def carry(self, job: Job) -> Input | None:
        """Carry out one job: its answer (``None``: not a request). A request is answered
        whatever raises (a lost answer would leave the machine waiting, the lock held)."""
        do, failed = self._pair(job)
        try:
            return do()
        except Exception as exc:
            logger.exception("stalewatch: restart of %s: carrying out %s failed", self.key, job)
            return None if failed is None else failed(f"failed: {type(exc).__name__}: {exc}")

    def _pair(self, job: Job) -> tuple[Callable[[], Input | None], Callable[[str], Input] | None]:
        """What carrying out ``job`` does, and its answer when that raises (``None``: not a request)."""
        now, guard = time.monotonic, self._guard
        match job:
            case effects.CheckMarkers(ticket=t):  # refused when it cannot be judged: looked at again
                return lambda: self._markers(t), lambda e: Markers(t, now(), Verdict.REFUSE, f"markers: {e}")
            case effects.Verify(ticket=t):
                return lambda: self._verify(job), lambda e: Verified(t, now(), False, e)
            case effects.ProbeDrain(ticket=t):
                return lambda: self._drain_probe(job), lambda e: Drain(t, now(), None, e)
            case effects.TakeLock(ticket=t):  # not taken: tried again, backing off
                return lambda: self._take_lock(t), lambda e: Lock(t, now(), acquired=False, detail=e)
            case effects.ReadHead(ticket=t):  # reading it now failed: HEAD as last read
                return lambda: Head(now(), guard.refresh().current_revision, t), lambda e: self._last_head(t)
            case effects.Act(ticket=t):
                return lambda: self._act(job), lambda e: self._act_failed(t, e)
            case effects.ProbeConfirm(ticket=t):
                return lambda: self._confirm_probe(job), lambda e: Verified(t, now(), False, e)
            case effects.ReleaseLock():
                return self.release_lock, None
            case effects.Retire(ticket=t):
                return lambda: self._retire(t), None
            case effects.Abort(ticket=t):
                return lambda: self._abort(t), None
            case effects.Rebind(revision=revision):  # its event comes back through the executor's notice()
                return lambda: self._rebind(revision), None
            case _:  # "learn" (Publish and Wake are carried out by the executor)
                return lambda: self._learn(guard.snapshot().current_revision), None

    def _run(
        self, argv: tuple[str, ...], what: str, revision: str, timeout: float, level: int = logging.WARNING
    ) -> Outcome:
        """Run a configured argv with the ``STALEWATCH_*`` variables: the checkout, the revision
        restarted onto (``STALEWATCH_REVISION``, also ``..._CURRENT_...``) and the loaded one."""
        env = dict.fromkeys(("STALEWATCH_REVISION", "STALEWATCH_CURRENT_REVISION"), revision)
        env["STALEWATCH_CHECKOUT"] = self.key
        env["STALEWATCH_LOADED_REVISION"] = self._guard.loaded_revision or ""
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

    def _markers(self, ticket: int) -> Markers:
        verdict, now = assess(self.policy), time.monotonic()
        if verdict.go and (held := self._under_way(now)) is not None:
            return Markers(ticket, now, *held)
        return Markers(ticket, now, Verdict(verdict.action), verdict.reason)

    def _under_way(self, now: float) -> tuple[Verdict, str] | None:
        """A previous action still under way: a handoff's old master finishes its requests.

        Until it has exited, gunicorn keeps ``<pidfile>.2`` and ignores a ``USR2`` to the
        new master: the next action waits (told as a wait), ``drain_timeout`` at most,
        then refuses until it is over (it lifts by itself). Never a failure, never a signal.
        """
        what = action_of(self.policy).under_way()
        if what is None:
            self._pending = None
            return None
        if self._pending is None or self._pending[0] != what:
            self._pending = (what, now)
        waited = now - self._pending[1]
        if waited >= self.policy.drain_timeout:
            return Verdict.REFUSE, f"handoff: {what}: still after {waited:.0f} s"
        return Verdict.WAIT, f"handoff: {what}"

    def _verify(self, request: effects.Verify) -> Verified:
        probe = self.policy.verify or ()
        outcome = self._run(probe, "the verify probe", request.revision, self.policy.verify_timeout)
        return Verified(request.ticket, time.monotonic(), outcome.ok, outcome.detail)

    def _drain_probe(self, request: effects.ProbeDrain) -> Drain:
        """A look at the drain: the probe's count, and which departed servers are gone."""
        # Their pids came from the kernel (SO_PEERCRED): while the process runs, the work
        # it had in flight may still run.
        gone = frozenset(pid for pid in request.pids if read_proc(pid) is None)
        probe = self.policy.drain_probe
        if probe is None:
            return Drain(request.ticket, time.monotonic(), 0, gone=gone)
        outcome = self._run(probe, "the drain probe", request.revision, self.policy.drain_probe_timeout)
        count = parse_count(outcome.output) if outcome.ok else None
        detail = outcome.detail if not outcome.ok else "printed no whole number"
        return Drain(request.ticket, time.monotonic(), count, "" if count is not None else detail, gone)

    def _take_lock(self, ticket: int) -> Lock:
        """The handoff lock, as ``flock(1)`` takes it (an exclusive ``flock`` on the file,
        created, never through a symlink), without blocking; held until released."""
        path, now = self.policy.lock, time.monotonic
        if path is None or (self._lock is not None and self._lock[0] == path):
            return Lock(ticket, now(), acquired=True)
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
            return Lock(ticket, now(), False, f"{path} is held")
        except OSError as exc:
            error = f"[Errno {exc.errno}] cannot {what} {path}: {exc.strerror}"
            return Lock(ticket, now(), False, error=error)
        self._lock = (path, fd)
        return Lock(ticket, now(), acquired=True)

    def release_lock(self) -> None:
        """Release the handoff lock (harmless when not held)."""
        with self._releasing:
            held, self._lock = self._lock, None
            if held is not None:
                import fcntl  # noqa: PLC0415 - Unix only (see _take_lock)

                with contextlib.suppress(OSError):
                    fcntl.flock(held[1], fcntl.LOCK_UN)
                os.close(held[1])

    def _act(self, request: effects.Act) -> Acted:
        """Restart through the supervisor: the policy's action (:mod:`.actions`)."""
        self._started = None  # whatever happens now, an earlier action's is never aborted
        done = action_of(self.policy).act(request.revision, self._run, self._stop)
        if done.started is not None:
            self._started = (request.ticket, done.started)
        log = logger.warning if done.refused else logger.info
        log("stalewatch: restart of %s: %s", self.key, done.detail)
        return Acted(request.ticket, time.monotonic(), done.ok, done.detail, refused=done.refused)

    def _act_failed(self, ticket: int, error: str) -> Acted:
        # It may have signalled before it failed: stop a new master it started, if any.
        with contextlib.suppress(Exception):
            self._abort(ticket)
        return Acted(ticket, time.monotonic(), False, error)

    def _confirm_probe(self, request: effects.ProbeConfirm) -> Verified:
        # A probe refused while the new server still starts is expected: the machine asks
        # again until confirm_timeout, and only then warns once (the `failed` phase, with
        # the probe's last line). Its output meanwhile is for DEBUG.
        probe, timeout = self.policy.confirm or (), self.policy.confirm_timeout
        outcome = self._run(probe, "the confirm probe", request.revision, timeout, logging.DEBUG)
        return Verified(request.ticket, time.monotonic(), outcome.ok, outcome.detail)

    def _last_head(self, ticket: int) -> Head:
        try:
            revision = self._guard.snapshot().current_revision
        except Exception:
            revision = None
        return Head(time.monotonic(), revision, ticket)

    def _rebind(self, revision: str) -> None:
        self._guard.adopt(revision)

    def _learn(self, head: str | None) -> Loaded:
        """What the servers run, when they do not register, as the machine is told it;
        logged when it changes."""
        told = loaded.learn(self.policy, self._guard.binding.dirs, head, self._stop, self._drain)
        if told.why != self._learnt:
            self._learnt = told.why
            logger.info("stalewatch: restart of %s: %s", self.key, told.why)
        return told

    def _of(self, ticket: int) -> Begun | None:
        """What the action with ``ticket`` started beside the old servers, if anything."""
        return self._started[1] if self._started is not None and self._started[0] == ticket else None

    def _retire(self, ticket: int) -> None:
        started = self._of(ticket)
        if started is not None:
            logger.info("stalewatch: restart of %s: %s", self.key, started.retire())

    def _abort(self, ticket: int) -> None:
        """Stop the new servers the action ``ticket`` started, if any, never others."""
        started = self._of(ticket)
        if started is None:
            logger.info("stalewatch: restart of %s: that action started no new servers to stop", self.key)
            return
        logger.warning("stalewatch: restart of %s: %s", self.key, started.abort())
