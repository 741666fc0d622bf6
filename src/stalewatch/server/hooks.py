"""Hook commands the daemon runs when a checkout's status changes.

One :class:`HookRunner` per checkout runs at most one hook at a time, on a thread that
exists only while a hook is pending, held or running (a daemon may watch a thousand
checkouts). Events that arrive while a hook runs (or is held) are coalesced: only the
latest is kept, so the hook for the final status always runs and a burst (a rebase)
runs it once. Commands are argv lists, never a shell; each gets the event in
``STALEWATCH_*`` environment variables, a timeout, no stdin, and its own process
group so a timeout kills everything it started. A hook is done when its process
exits (waited on with a pidfd where Linux has one), even if a background process it
started still holds its output; that output is kept within a fixed number of bytes
(:mod:`.drain`) and logged with the exit status.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..core.escaping import printable
from ..core.status import Event, Status
from . import commands
from .config import HookConfig
from .drain import OutputDrain

logger = logging.getLogger(__name__)

_HOLD_POLL = 0.1  # seconds between checks of the hold_while marker
_HOLD_REMIND = 60.0  # repeat the "held" log line this often
_HOOKS = {Status.STALE: "on_stale", Status.CURRENT: "on_current", Status.UNREADABLE: "on_unreadable"}


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
    """Runs one checkout's hooks, one at a time, latest event wins.

    Its thread (``stalewatch-hooks:<checkout>``) is started by :meth:`submit` and ends
    when nothing is pending: an idle runner holds no thread. ``state`` is ``idle``,
    ``held`` (waiting for the ``hold_while`` marker to go) or ``running``.

    Args:
        checkout: the checkout (for thread names and logs).
        config: which commands to run; a reload replaces it (read at each run).
        drain: where the pipes of hooks that left a background writer go (the
            daemon shares one).
        on_outcome: called with ``(hook, outcome)`` after each run, on the runner's
            thread; ``outcome`` is ``success``, ``failure``, ``killed``, ``timeout``
            or ``not_started`` (the daemon's metrics count them).
    """

    def __init__(
        self,
        checkout: Path,
        config: HookConfig,
        drain: OutputDrain,
        *,
        on_outcome: Callable[[str, str], None] | None = None,
    ) -> None:
        self.checkout = checkout
        self.config = config
        self._drain = drain
        self._on_outcome = on_outcome
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._pending: tuple[Event, int] | None = None
        self.state = "idle"
        self.thread: threading.Thread | None = None  # while it has work

    def submit(self, event: Event, generation: int) -> None:
        """Queue ``event``, replacing any event still waiting (coalescing). Any thread."""
        with self._cond:
            self._pending = (event, generation)
            # The thread clears self.thread under _cond as it decides to end, so an
            # event submitted meanwhile either is seen by it or starts a new one.
            if self.thread is None and not self._stop.is_set():
                self.thread = threading.Thread(
                    target=self._run, name=f"stalewatch-hooks:{self.checkout}", daemon=True
                )
                self.thread.start()

    def request_stop(self) -> None:
        """Begin stopping without waiting: a running hook's group gets SIGTERM now and
        SIGKILL after a grace period, on the runner's own thread.

        The daemon calls this on every runner before joining any, so the grace
        periods of several hooks that ignore SIGTERM run side by side.
        """
        self._stop.set()

    def stop(self) -> None:
        """Stop: end a running hook's process group, join the thread. Harmless twice."""
        self._stop.set()
        thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2 * commands.KILL_GRACE + 1.0)

    # -- the thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                self.state = "idle"
                self._cond.notify_all()
                if self._stop.is_set() or self._pending is None:
                    self.thread = None  # decided under the lock that submit() takes
                    return
            if not self._hold():
                continue  # stopped: ends on the next pass
            with self._cond:
                pending, self._pending = self._pending, None
                self.state = "running"
            try:  # a broken hook, or a broken count of it, must never stop later ones
                if pending is not None:  # always: only this thread takes it
                    self._execute(*pending)
            except Exception:
                logger.exception("stalewatch: hook for %s failed", self.checkout)

    def _hold(self) -> bool:
        """Wait while the hold_while marker exists; False when stopped meanwhile."""
        marker = self.config.hold_while
        # lexists: a marker that is a dangling symlink is still there (an updater may
        # link it to a lock file of its own, gone or not).
        if marker is None or not os.path.lexists(marker):
            return True
        with self._cond:
            self.state = "held"
            self._cond.notify_all()
        logger.info("stalewatch: hooks for %s held while %s exists", self.checkout, marker)
        remind = time.monotonic() + _HOLD_REMIND
        # A poll, because the marker may live anywhere (even where inotify cannot
        # reach); _stop.wait keeps stop() prompt. Re-read the config each time:
        # a reload may move or drop the marker.
        while marker is not None and os.path.lexists(marker):
            if self._stop.wait(_HOLD_POLL):
                return False
            if time.monotonic() >= remind:
                remind += _HOLD_REMIND
                logger.warning("stalewatch: hooks for %s still held: %s exists", self.checkout, marker)
            marker = self.config.hold_while
        logger.info("stalewatch: hold released; running hooks for %s", self.checkout)
        return True

    def _execute(self, event: Event, generation: int) -> None:
        config = self.config
        name = _HOOKS.get(event.status)
        argv: tuple[str, ...] | None = getattr(config, name) if name else None
        if not argv or name is None or self._stop.is_set():
            return
        label = f"{name} hook for {self.checkout}"
        started = time.monotonic()
        env = hook_environment(event, generation, name)
        outcome = commands.run(
            argv, timeout=config.timeout, env=env, stop=self._stop, drain=self._drain, label=label
        )
        for line in outcome.output.splitlines():
            logger.info("stalewatch: %s: %s", label, line)
        if outcome.ok:
            logger.info("stalewatch: %s exited 0 in %.3f s", label, time.monotonic() - started)
        else:
            level = logging.ERROR if outcome.result == "timeout" else logging.WARNING
            logger.log(level, "stalewatch: %s %s: %s", label, printable(repr(list(argv))), outcome.detail)
        if self._on_outcome is not None:
            self._on_outcome(name, "killed" if outcome.result == "stopped" else outcome.result)
