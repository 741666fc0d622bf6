"""The WebUI's link to the daemon: ``accelerate(module, daemon=True)``.

With a stalewatch daemon whose restart policy watches the Agent checkout (``stalewatch
hermes setup`` writes one), an accelerated WebUI process

- registers the revision it loaded, on every WebUI version: one client thread,
  started when the WebUI binds the Agent (its capture of the loaded revision), so the
  daemon confirms a restart only once the new WebUI runs the new code;
- leaves restarts to the daemon: a WebUI that restarts itself after an Agent update
  (its ``_schedule_automatic_restart``, pull request 7160) asks the daemon instead,
  and never re-executes itself (no double restart; see :func:`daemon_restarts`);
- says in its stale payload, where the WebUI has one (``agent_runtime_stale_payload``),
  whether the daemon's restart is coming: ``restart_scheduled``, ``retry_after``
  and ``restart_phase`` while it is, ``restart_reason`` when the daemon refused or
  failed. A field the WebUI set itself is never contradicted;
- tells the daemon its work in flight, its active chat streams and agent runs
  (:meth:`RestartView.work_in_flight`, read through a handle to the WebUI's own
  ``api.config``), so the daemon's restart waits for running chat turns.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from .. import Daemon, Guard, Refusal, RestartPhase, RestartState

__all__ = ["RestartView", "daemon_restarts", "restart_aware", "stop_all"]

logger = logging.getLogger(__name__)

_GAVE_UP = (RestartPhase.REFUSED, RestartPhase.FAILED)


# Every view of the process, so a test suite or a shutdown can stop their client threads.
# No lock (list.append and list.pop are atomic): nothing a fork could leave held.
_VIEWS: list[RestartView] = []


class RestartView:
    """What a daemon says about restarts of one WebUI process's Agent checkout.

    Args:
        socket: the daemon's socket.
        module: the WebUI's accelerated module (``api.agent_runtime``), kept so the
            WebUI's own state (its active streams, in ``api.config``) can be read.
    """

    def __init__(self, socket: str | os.PathLike[str], module: ModuleType | None = None) -> None:
        self.socket = Path(socket)
        self.module = module
        self._lock = threading.Lock()
        self._guard: Guard | None = None
        self._bound: tuple[Path, str] | None = None  # (checkout, loaded revision)
        self._pid = os.getpid()
        _VIEWS.append(self)

    def bound(self, checkout: Path, revision: str) -> None:
        """The WebUI bound the Agent at ``checkout``, loaded at ``revision``: follow it."""
        with self._lock:
            if self._bound is not None and self._pid == os.getpid():
                return  # bound once per process: the loaded revision does not change
            self._bound, self._pid = (checkout, revision), os.getpid()
            self._start(checkout, revision)

    def _start(self, checkout: Path, revision: str) -> None:
        # Under _lock. A guard fed by the daemon: its client thread registers the
        # revision and receives the restart phases; the flag itself is not used here.
        try:
            self._guard = Guard.for_checkout(checkout, loaded_revision=revision, source=Daemon(self.socket))
            # The WebUI's chat turns are its work in flight: the daemon's restart waits
            # for them (R8). Added before start: the registration carries the count.
            self._guard.count_work(self.work_in_flight)
            self._guard.start()
        except Exception:  # never into the WebUI: its payload simply stays upstream's
            logger.warning("stalewatch.hermes: cannot follow the daemon at %s", self.socket, exc_info=True)
            self._guard = None

    def state(self) -> RestartState | None:
        """The daemon's latest restart phase for the Agent checkout.

        ``None`` while the daemon is not connected, does not watch the checkout, or
        has no restart policy for it (its snapshot's ``restart`` is null). While no
        restart is coming, HEAD is read first: a commit the daemon has not announced
        yet is a restart pending (``scheduled``).
        """
        with self._lock:
            if self._bound is not None and self._pid != os.getpid():
                self._pid = os.getpid()
                self._start(*self._bound)  # a forked worker: the parent's client thread is not ours
            guard = self._guard
        if guard is None:
            return None
        state = guard.snapshot().restart
        if state is not None and not state.scheduled:
            # The WebUI may have seen a commit the daemon has not announced yet (a polling
            # daemon): read HEAD, so a pending restart is told as one (R7).
            state = guard.refresh().restart
        return state

    def restart_coming(self) -> bool:
        """Whether the daemon will restart the WebUI onto the checkout's new revision.

        True while the daemon, connected and with a restart policy, has not refused
        nor given up (a move it has not heard of yet included: its policy will see it);
        False otherwise: then nothing restarts the WebUI by itself.
        """
        state = self.state()
        return state is not None and state.phase not in _GAVE_UP

    def webui_config(self) -> ModuleType | None:
        """The WebUI's ``api.config`` (its ``STREAMS`` and ``ACTIVE_RUNS``), once imported."""
        package = getattr(self.module, "__name__", "").rpartition(".")[0]
        return sys.modules.get(f"{package}.config") if package else None

    def work_in_flight(self) -> int | None:
        """The WebUI's chat work running now: its active streams and agent runs.

        Both registries are keyed by stream id (a run outlives its stream while it
        unwinds), so the count is the union of their keys, each read under its own
        lock, one after the other (never both held: the WebUI takes them apart).
        ``None`` when the WebUI has no such registries (not imported yet, or another
        version).
        """
        config = self.webui_config()
        ids: set[object] = set()
        for table, lock in (("STREAMS", "STREAMS_LOCK"), ("ACTIVE_RUNS", "ACTIVE_RUNS_LOCK")):
            registry, guard = getattr(config, table, None), getattr(config, lock, None)
            if not isinstance(registry, dict) or guard is None:
                return None
            with guard:
                ids.update(registry)
        return len(ids)

    def stop(self) -> None:
        """Stop following the daemon (joins the client thread). Harmless twice."""
        with self._lock:
            guard, self._guard = self._guard, None
        if guard is not None:
            guard.stop()


def restart_aware(original: Callable[..., Any], view: RestartView) -> Callable[..., Any]:
    """``original`` (the WebUI's stale payload builder) plus what the daemon says of restarts."""

    @functools.wraps(original)
    def agent_runtime_stale_payload(exc: Any, *args: Any, **kwargs: Any) -> Any:
        payload = original(exc, *args, **kwargs)
        try:
            state = view.state()
            if isinstance(payload, dict) and state is not None:
                _annotate(payload, Refusal.of(exc, state))
        except Exception:  # the payload is upstream's whatever happens here
            logger.debug("stalewatch.hermes: restart state unavailable", exc_info=True)
        return payload

    agent_runtime_stale_payload.__stalewatch_view__ = view  # type: ignore[attr-defined]
    return agent_runtime_stale_payload


def _annotate(payload: dict[str, Any], refusal: Refusal) -> None:
    # The WebUI's own payload stands unless a restart is coming or was refused/failed.
    state = refusal.restart
    if state is None or not (state.scheduled or state.phase in _GAVE_UP):
        return
    fields = refusal.restart_fields()
    said = payload.get("restart_scheduled")
    if isinstance(said, bool) and said != fields["restart_scheduled"]:
        # The WebUI's message was chosen with its own `restart_scheduled` (pull request
        # 7160: from daemon_restarts, a moment ago); the daemon moved on since. Add
        # nothing that would contradict its text: the next request says the new phase.
        return
    payload.update(fields, retryable=refusal.retryable)  # retrying helps only while a restart comes


def daemon_restarts(original: Callable[..., Any], view: RestartView) -> Callable[[], bool]:
    """Stands in for the WebUI's ``_schedule_automatic_restart()`` (pull request 7160).

    That function schedules the WebUI's own restart (``os.execv`` of itself, same pid,
    unseen by its supervisor) and says whether one is coming. With a daemon the daemon
    owns restarts (through the supervisor, after the update, verified, drained,
    confirmed): this one schedules nothing and answers whether the daemon's restart is
    coming, which picks the WebUI's message ("will restart after the Agent update
    finishes" or "could not be scheduled") and its ``restart_scheduled``. A daemon
    that does not answer restarts nothing, and the WebUI says so (fail closed).
    """

    @functools.wraps(original)
    def _schedule_automatic_restart() -> bool:
        try:
            return view.restart_coming()
        except Exception:  # never into the WebUI's check: "could not be scheduled"
            logger.debug("stalewatch.hermes: restart state unavailable", exc_info=True)
            return False

    _schedule_automatic_restart.__stalewatch_view__ = view  # type: ignore[attr-defined]
    return _schedule_automatic_restart


def stop_all() -> None:
    """Stop every view's client thread (for test suites and shutdown)."""
    while True:
        try:
            view = _VIEWS.pop()
        except IndexError:
            return
        view.stop()
