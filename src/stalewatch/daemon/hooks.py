"""Hook commands the daemon runs when a checkout's status changes.

One :class:`HookRunner` per checkout owns one thread, so at most one hook runs per
checkout. Events that arrive while a hook runs (or is held) are coalesced: only the
latest is kept, so the hook for the final status always runs and a burst (a rebase)
runs it once. Commands are argv lists, never a shell; each gets the event in
``STALEWATCH_*`` environment variables, a timeout, no stdin, and its own process
group so a timeout kills everything it started. Output and exit status are logged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from ..core.status import Event, Status
from .config import HookConfig
from .sdnotify import SD_ENV

__all__ = ["HookRunner", "hook_environment"]

logger = logging.getLogger(__name__)

_HOLD_POLL = 0.1  # seconds between checks of the hold_while marker
_HOLD_REMIND = 60.0  # repeat the "held" log line this often
_MAX_LOGGED_LINES = 200
_KILL_GRACE = 0.5  # seconds between SIGTERM and SIGKILL


def hook_environment(event: Event, generation: int, hook: str) -> dict[str, str]:
    """The ``STALEWATCH_*`` variables a hook receives (empty string for "none").

    ``STALEWATCH_CAUSE_*`` say what moved HEAD (from the reflog; all empty when unknown).
    """
    cause = event.cause.to_dict() if event.cause is not None else {}
    causes = {
        f"STALEWATCH_CAUSE_{key.upper()}": "" if cause.get(key) is None else str(cause[key])
        for key in ("action", "detail", "message", "name", "email", "relation", "ahead", "behind", "summary")
    }
    causes["STALEWATCH_CAUSE_AT"] = f"{event.cause.at:.0f}" if event.cause is not None else ""
    return causes | {
        "STALEWATCH_HOOK": hook,
        "STALEWATCH_CHECKOUT": str(event.checkout),
        "STALEWATCH_STATUS": event.status.value,
        "STALEWATCH_PREVIOUS_STATUS": event.previous_status.value,
        "STALEWATCH_LOADED_REVISION": event.loaded_revision or "",
        "STALEWATCH_CURRENT_REVISION": event.current_revision or "",
        "STALEWATCH_GENERATION": str(generation),
        "STALEWATCH_AT": f"{event.at:.6f}",
        "STALEWATCH_ERROR": event.error or "",
    }


class HookRunner:
    """Runs one checkout's hooks on its own thread, one at a time, latest event wins.

    Args:
        checkout: the checkout (for thread names and logs).
        config: which commands to run; replace with :meth:`update` on reload.
    """

    def __init__(self, checkout: Path, config: HookConfig) -> None:
        self.checkout = checkout
        self._config = config
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._pending: tuple[Event, int] | None = None
        self._state = "idle"
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._run, name=f"stalewatch-hooks:{checkout}", daemon=True)

    @property
    def state(self) -> str:
        """``idle``, ``held`` (waiting for the marker to go) or ``running``."""
        return self._state

    def start(self) -> HookRunner:
        """Start the runner's thread."""
        self._thread.start()
        return self

    def update(self, config: HookConfig) -> None:
        """Use new commands from the next run on (a reload)."""
        self._config = config

    def submit(self, event: Event, generation: int) -> None:
        """Queue ``event``, replacing any event still waiting (coalescing). Any thread."""
        with self._cond:
            self._pending = (event, generation)
            self._cond.notify_all()

    def wait_until_idle(self, timeout: float) -> bool:
        """Wait until nothing is pending or running; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and self._state == "idle", timeout)

    def wait_for_state(self, state: str, timeout: float) -> bool:
        """Wait until the runner is in ``state``; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._state == state, timeout)

    def stop(self) -> None:
        """Stop the thread, terminating a running hook's process group. Harmless twice."""
        with self._cond:
            self._stop.set()
            proc = self._proc
            self._cond.notify_all()
        if proc is not None:
            _signal_group(proc, signal.SIGTERM)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=_KILL_GRACE)
            if self._thread.is_alive() and proc is not None:
                _signal_group(proc, signal.SIGKILL)
            self._thread.join(timeout=1.0)

    # -- the thread -----------------------------------------------------------------

    def _set_state(self, state: str) -> None:
        with self._cond:
            self._state = state
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._stop.is_set())
                if self._stop.is_set():
                    return
            if not self._hold():
                return
            with self._cond:
                pending, self._pending = self._pending, None
                if pending is None:
                    self._state = "idle"
                    continue
                self._state = "running"
            try:
                self._execute(*pending)
            except Exception:  # a broken hook must never stop later ones
                logger.exception("stalewatch: hook for %s failed", self.checkout)
            finally:
                self._set_state("idle")

    def _hold(self) -> bool:
        """Wait while the hold_while marker exists; False when stopped meanwhile."""
        marker = self._config.hold_while
        if marker is None or not marker.exists():
            return True
        self._set_state("held")
        logger.info("stalewatch: hooks for %s held while %s exists", self.checkout, marker)
        remind = time.monotonic() + _HOLD_REMIND
        # A poll, because the marker may live anywhere (even where inotify cannot
        # reach); stop_event.wait keeps stop() prompt. Re-read the config each time:
        # a reload may move or drop the marker.
        while marker is not None and marker.exists():
            if self._stop.wait(_HOLD_POLL):
                return False
            if time.monotonic() >= remind:
                remind += _HOLD_REMIND
                logger.warning("stalewatch: hooks for %s still held: %s exists", self.checkout, marker)
            marker = self._config.hold_while
        logger.info("stalewatch: hold released; running hooks for %s", self.checkout)
        return True

    def _execute(self, event: Event, generation: int) -> None:
        config = self._config
        name = {
            Status.STALE: "on_stale",
            Status.CURRENT: "on_current",
            Status.UNREADABLE: "on_unreadable",
        }.get(event.status)
        argv = getattr(config, name) if name else None
        if not argv or name is None:
            return
        env = {key: value for key, value in os.environ.items() if key not in SD_ENV}
        env.update(hook_environment(event, generation, name))
        started = time.monotonic()
        with self._cond:
            if self._stop.is_set():
                return
            try:
                # A new session: the timeout kills the hook's whole process group.
                proc = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            except OSError as exc:
                logger.warning("stalewatch: cannot run %s hook %s for %s: %s", name, argv, self.checkout, exc)
                return
            self._proc = proc
        timed_out = False
        try:
            try:
                output, _ = proc.communicate(timeout=config.timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                output = _end(proc)
        finally:
            with self._cond:
                self._proc = None
        elapsed = time.monotonic() - started
        self._log(
            name,
            argv,
            proc.returncode,
            output,
            elapsed=elapsed,
            timeout=config.timeout if timed_out else None,
        )

    def _log(
        self,
        name: str,
        argv: tuple[str, ...],
        code: int,
        output: bytes,
        *,
        elapsed: float,
        timeout: float | None,
    ) -> None:
        lines = output.decode("utf-8", "replace").splitlines()
        for line in lines[:_MAX_LOGGED_LINES]:
            logger.info("stalewatch: %s hook for %s: %s", name, self.checkout, line)
        if len(lines) > _MAX_LOGGED_LINES:
            logger.info("stalewatch: %s hook: %d more lines not logged", name, len(lines) - _MAX_LOGGED_LINES)
        if timeout is not None:
            logger.error(
                "stalewatch: %s hook %s for %s timed out after %.1f s; killed",
                name,
                list(argv),
                self.checkout,
                timeout,
            )
        elif code == 0:
            logger.info("stalewatch: %s hook for %s exited 0 in %.3f s", name, self.checkout, elapsed)
        else:
            what = f"was killed by signal {-code}" if code < 0 else f"exited {code}"
            logger.warning("stalewatch: %s hook %s for %s %s", name, list(argv), self.checkout, what)


def _end(proc: subprocess.Popen[bytes]) -> bytes:
    """End a timed-out hook's process group; return its output, if it can be had."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        _signal_group(proc, signum)
        try:
            return proc.communicate(timeout=_KILL_GRACE)[0]
        except subprocess.TimeoutExpired:
            continue
    # Something that left the group (setsid) still holds the output pipe: stop
    # reading instead of waiting for it forever, and reap the hook itself.
    logger.warning("stalewatch: a process the hook started still holds its output; not reading it")
    if proc.stdout is not None:
        proc.stdout.close()
    proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=_KILL_GRACE)
    return b""


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(proc.pid, signum)
