"""Is a restart done? Confirmation (R5): the new servers run the new code.

- With a ``confirm`` probe: the probe passes and no registered server runs other code.
  A server that loads its code lazily registers only once it has (Hermes WebUI imports
  the Agent on its first chat), so the probe speaks for it meanwhile; one still
  registered on old code keeps the restart unconfirmed.
- Without one, once servers ever registered: every registered server runs the target
  (or a newer HEAD: a commit that landed during the restart is what the new servers
  load) and at least one registered since the action.
- With neither, the action's exit status is all there is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from ...guard.guard import Guard
from .. import commands as process
from ..registry import Process, Registry
from .policy import RestartPolicy

__all__ = ["Confirmation"]

_PROBE_POLL = (0.2, 2.0)  # first and longest wait between runs of the confirm probe
_HEAD_POLL = 0.25  # seconds between re-reads of HEAD while servers register


class Confirmation:
    """Waits for one restart of checkout ``key`` to be confirmed, or says why not.

    Args:
        key: the checkout as the daemon names it.
        registry: the registered server processes.
        guard: the daemon's guard (its current revision is HEAD).
        stop: set when the daemon stops: give up at once.
        env: variables for the confirm probe.
    """

    def __init__(
        self, key: str, registry: Registry, guard: Guard, stop: threading.Event, env: Mapping[str, str]
    ) -> None:
        self._key = key
        self._registry = registry
        self._guard = guard
        self._stop = stop
        self._env = env

    def wait(
        self, target: str, policy: RestartPolicy, action_at: float, *, registered: bool
    ) -> tuple[str, str | None]:
        """``(what the servers run, None)`` once confirmed; else ``(target, why not)``.

        Args:
            target: the revision restarted onto.
            policy: the checkout's restart policy (probe and timeout).
            action_at: ``time.time()`` when the action ran.
            registered: whether any server ever registered for the checkout.
        """
        if policy.confirm is not None:
            return self._by_probe(target, policy.confirm, policy.confirm_timeout)
        if not registered:
            return target, None
        return self._by_registrations(target, action_at, policy.confirm_timeout)

    def _heads(self, target: str) -> tuple[str, str | None]:
        return target, self._guard.snapshot().current_revision

    def _by_registrations(self, target: str, action_at: float, timeout: float) -> tuple[str, str | None]:
        confirmed: list[str] = []
        heads = self._heads(target)

        def done(processes: list[Process]) -> bool:
            revisions = {p.revision for p in processes}
            if len(revisions) != 1 or not any(p.since >= action_at for p in processes):
                return False
            (revision,) = revisions
            if revision not in heads:
                return False
            confirmed.append(revision)
            return True

        deadline = time.monotonic() + timeout
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if self._registry.wait(self._key, done, min(_HEAD_POLL, max(0.0, left)), self._stop):
                return confirmed[-1], None
            if left <= _HEAD_POLL:
                break
            # New servers may have loaded a commit the watcher has yet to report (it
            # polls, or its event is on the way): read HEAD now rather than refuse them.
            heads = (target, self._guard.refresh().current_revision)
        return target, f"after {timeout:g} s the registered servers run {self.runs()}"

    def _by_probe(self, target: str, probe: tuple[str, ...], timeout: float) -> tuple[str, str | None]:
        deadline = time.monotonic() + timeout
        delay, longest = _PROBE_POLL
        last = "the probe never ran"
        while (left := deadline - time.monotonic()) > 0 and not self._stop.is_set():
            outcome = process.run(probe, timeout=left, env=self._env, stop=self._stop)
            old = [p for p in self._registry.processes(self._key) if p.revision not in self._heads(target)]
            if outcome.ok and not old:
                return target, None
            last = (
                f"the probe {outcome.detail}"
                if not outcome.ok
                else f"the registered servers run {self.runs()}"
            )
            self._stop.wait(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, longest)
        return target, f"within {timeout:g} s: {last}"

    def runs(self) -> str:
        """Who runs what: ``1a2b3c4: pids [10, 11]; ...``."""
        table = self._registry.by_revision(self._key) or {"(none)": []}
        return "; ".join(f"{rev[:7]}: pids {pids}" for rev, pids in table.items())
