"""Restart-aware 409s for the accelerated WebUI: ``accelerate(module, daemon=SOCKET)`` (R7).

With a stalewatch daemon whose restart policy watches the Agent checkout (``stalewatch
hermes setup`` writes one), the WebUI's stale payload says whether a restart is coming:
``restart_scheduled: true`` with ``retry_after`` (seconds) and ``restart_phase`` while
it is; ``false`` with ``restart_reason`` when the daemon refused or failed. Anything
else leaves upstream's payload as it was.

A :class:`RestartView` follows the daemon for the Agent checkout through a guard fed by
:class:`~stalewatch.Daemon`: one client thread, started when the WebUI binds the Agent
(its capture of the loaded revision), which also registers that revision with the
daemon, so an automatic restart is confirmed only once the new WebUI runs the new code.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..client import Daemon
from ..core import forking
from ..core.phases import RestartPhase, RestartState
from ..guard.guard import Guard

__all__ = ["RestartView", "restart_aware", "stop_all"]

logger = logging.getLogger(__name__)


class _Views:
    """Every view of the process, so a test suite or a shutdown can stop their client threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._views: list[RestartView] = []
        forking.in_child(self._after_fork_in_child)

    def add(self, view: RestartView) -> None:
        with self._lock:
            self._views.append(view)

    def take_all(self) -> list[RestartView]:
        with self._lock:
            views, self._views = self._views, []
        return views

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()  # the views stay: each restarts its own client in the child


_VIEWS = _Views()


class RestartView:
    """What a daemon says about restarts of one WebUI process's Agent checkout.

    Args:
        socket: the daemon's socket.
    """

    def __init__(self, socket: str | os.PathLike[str]) -> None:
        self.socket = Path(socket)
        self._lock = threading.Lock()
        self._guard: Guard | None = None
        self._bound: tuple[Path, str] | None = None  # (checkout, loaded revision)
        self._pid = os.getpid()
        _VIEWS.add(self)

    def bound(self, checkout: Path, revision: str) -> None:
        """The WebUI bound the Agent at ``checkout``, loaded at ``revision``: follow it."""
        with self._lock:
            if self._bound is not None and self._pid == os.getpid():
                return  # bound once per process: the loaded revision does not change
            self._bound, self._pid = (checkout, revision), os.getpid()
            self._start()

    def _start(self) -> None:
        # Under _lock. A guard fed by the daemon: its client thread registers the
        # revision and receives the restart phases; the flag itself is not used here.
        if self._bound is None:
            return
        checkout, revision = self._bound
        try:
            self._guard = Guard.for_checkout(checkout, loaded_revision=revision, source=Daemon(self.socket))
            self._guard.start()
        except Exception:  # never into the WebUI: its payload simply stays upstream's
            logger.warning("stalewatch.hermes: cannot follow the daemon at %s", self.socket, exc_info=True)
            self._guard = None

    def state(self) -> RestartState | None:
        """The daemon's latest restart phase for the Agent checkout, if any."""
        with self._lock:
            if self._bound is not None and self._pid != os.getpid():
                self._pid = os.getpid()
                self._start()  # a forked worker: the parent's client thread is not ours
            guard = self._guard
        return guard.snapshot().restart if guard is not None else None

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
                _annotate(payload, state)
        except Exception:  # the payload is upstream's whatever happens here
            logger.debug("stalewatch.hermes: restart state unavailable", exc_info=True)
        return payload

    agent_runtime_stale_payload.__stalewatch_view__ = view  # type: ignore[attr-defined]
    return agent_runtime_stale_payload


def _annotate(payload: dict[str, Any], state: RestartState) -> None:
    # The WebUI's own payload stands unless a restart is coming or was refused/failed.
    if state.scheduled or state.phase in (RestartPhase.REFUSED, RestartPhase.FAILED):
        payload.update(state.payload_fields())


def stop_all() -> None:
    """Stop every view's client thread (for test suites and shutdown)."""
    for view in _VIEWS.take_all():
        view.stop()
