"""The two-line accelerator for Hermes WebUI's own ``api/agent_runtime.py``, and its link to a daemon.

The WebUI keeps its file, whatever its version, and appends::

    from stalewatch.hermes import accelerate
    accelerate(sys.modules[__name__])

(``sys`` is the one name both lines need: every version of the file imports it.)

:func:`accelerate` replaces one attribute, ``_read_agent_revision(agent_dir, *,
module_path=None) -> str | None``: the one seam unchanged in every version since the
WebUI's guard was introduced, and the only place its three ``git`` processes run. The
replacement means the same (the full HEAD of the checkout whose repository tracks
``module_path`` literally; ``None`` when untracked, outside a checkout, or unknowable)
and reads HEAD in-process on every call: no process (reftable aside), and a ref written
before the call is seen by it. Everything else in the module, its error, its messages
and its payloads, stays upstream's (``daemon=`` aside, below).

What it costs is :mod:`.agent_head`'s: once per (``agent_dir``, ``module_path``),
finding the checkout and one ``git ls-files`` to confirm the file is tracked literally,
cached, bounded and shared by every accelerated module and the drop-in; a call
afterwards is one in-process read of HEAD (~20 µs). No thread is started; nothing
needs restarting after ``fork()``.

With ``daemon=True`` and a stalewatch daemon whose restart policy watches the Agent
checkout (``stalewatch hermes setup`` writes one), an accelerated WebUI process

- registers the revision it loaded, on every WebUI version: one client thread
  (:class:`RestartView`), started when the WebUI binds the Agent (its capture of the
  loaded revision), so the daemon confirms a restart only once the new WebUI runs the
  new code;
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

import contextlib
import functools
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Final, TypeVar

from .. import Daemon, Guard, Refusal, RestartPhase, RestartState
from ..core.errors import SocketPathError
from ..protocol.socket_path import default_socket_path
from .agent_head import read

logger = logging.getLogger(__name__)

ATTRIBUTE: Final = "_read_agent_revision"
"""The module attribute :func:`accelerate` replaces."""
SOCKET_VARIABLE: Final = "STALEWATCH_SOCKET"
"""Where ``daemon=True`` finds the daemon's socket (``stalewatch hermes setup`` sets it)."""
_GAVE_UP = (RestartPhase.REFUSED, RestartPhase.FAILED)
Read = Callable[..., "str | None"]
F = TypeVar("F", bound=Callable[..., Any])


def accelerate(module: ModuleType, *, daemon: str | os.PathLike[str] | bool | None = None) -> bool:
    """Replace ``module._read_agent_revision`` with an in-process read of the same meaning.

    Call it at the end of the WebUI's ``api/agent_runtime.py``. Returns True when the
    module's read is (now, or already) accelerated. Never raises: a module without a
    compatible ``_read_agent_revision(agent_dir, *, module_path=None)`` is left as it
    was, with one warning logged. Calling it again changes nothing. When the
    accelerated read cannot decide (any error, an unreadable or unborn HEAD), it calls
    the original function, so upstream's fail-closed answer is kept.

    Args:
        module: the WebUI's ``api.agent_runtime``.
        daemon: a stalewatch daemon's socket; ``True``: ``$STALEWATCH_SOCKET``, else
            the daemon's default socket (``$XDG_RUNTIME_DIR/stalewatch.sock``);
            ``None``, ``False`` or ``""``: no daemon. What a daemon adds (registration,
            its restarts, restart-aware payloads): this module's docstring.

    Example (the last two lines of ``api/agent_runtime.py``)::

        from stalewatch.hermes import accelerate
        accelerate(sys.modules[__name__])
        # or, with the daemon `stalewatch hermes setup` installs:
        accelerate(sys.modules[__name__], daemon=True)
    """
    name = getattr(module, "__name__", repr(module))
    try:
        socket = _socket(daemon, name)
        view = RestartView(socket, module) if socket is not None else None
        original: Any = getattr(module, ATTRIBUTE, None)
        if getattr(original, "__stalewatch_original__", None) is None:  # else ours already: idempotent
            try:  # its callers' one convention (a non-callable has no signature: TypeError)
                inspect.signature(original).bind(None, module_path=None)
            except (TypeError, ValueError):
                logger.warning(
                    "stalewatch.hermes: %s has no %s(agent_dir, *, module_path=None); left untouched",
                    name,
                    ATTRIBUTE,
                )
                return False
            setattr(module, ATTRIBUTE, accelerated(original, module, view))
        if view is not None:
            _hand_to_daemon(module, name, view)
    except Exception:  # never into the WebUI's import: it keeps its own read
        logger.warning(
            "stalewatch.hermes: could not accelerate %s; it keeps its own read", name, exc_info=True
        )
        return False
    return True


def _socket(daemon: str | os.PathLike[str] | bool | None, name: str) -> Path | None:
    """The daemon's socket ``daemon`` names (see :func:`accelerate`), or ``None``."""
    if daemon is not True:
        return Path(daemon) if daemon else None  # None, False or "": no daemon
    if explicit := os.environ.get(SOCKET_VARIABLE, "").strip():
        return Path(explicit)
    try:
        return default_socket_path()
    except SocketPathError:
        logger.warning(
            "stalewatch.hermes: %s: daemon=True but neither $%s nor $XDG_RUNTIME_DIR is set; no daemon",
            name,
            SOCKET_VARIABLE,
        )
        return None


def _hand_to_daemon(module: ModuleType, name: str, view: RestartView) -> None:
    """Restart-aware payload and the daemon's restarts, where the WebUI has the seams."""
    for attribute, stand_in in (
        ("agent_runtime_stale_payload", restart_aware),
        ("_schedule_automatic_restart", daemon_restarts),  # the WebUI's own restart (PR 7160)
    ):
        own = getattr(module, attribute, None)
        if callable(own) and getattr(own, "__stalewatch_view__", None) is None:
            setattr(module, attribute, stand_in(own, view))
    if getattr(module, "agent_runtime_stale_payload", None) is None:
        logger.info(
            "stalewatch.hermes: %s builds its stale payloads elsewhere (no agent_runtime_stale_payload): "
            "they stay upstream's; the WebUI registers with the daemon all the same",
            name,
        )


def _marked(function: F, original: Callable[..., Any], view: RestartView | None) -> F:
    """``function`` standing in for ``original``, with its link to the daemon (``__stalewatch_view__``)."""
    functools.update_wrapper(function, original)
    function.__stalewatch_view__ = view  # type: ignore[attr-defined]
    return function


def accelerated(original: Read, module: ModuleType | None = None, view: RestartView | None = None) -> Read:
    """The in-process read standing in for ``original`` (same signature and meaning).

    ``module`` and ``view``: the accelerated module and its link to a daemon; the read
    that binds the Agent (while the module's ``_AGENT_REVISION`` is still unset)
    starts following the daemon for that checkout and revision, which registers it.
    """

    def _read_agent_revision(agent_dir: Any, *, module_path: Any = None) -> str | None:
        try:
            revision = read(agent_dir, module_path)
        except Exception:  # whatever it is, upstream decides (and fails closed)
            revision = original(agent_dir, module_path=module_path)
        binding = getattr(module, "_AGENT_REVISION", None) is None  # the WebUI binds the Agent
        if view is not None and isinstance(revision, str) and binding:
            with contextlib.suppress(Exception):  # never into the WebUI's read
                view.bound(Path(agent_dir), revision)
        return revision

    _read_agent_revision.__stalewatch_original__ = original  # type: ignore[attr-defined]
    return _marked(_read_agent_revision, original, view)


class RestartView:
    """What a daemon says about restarts of one WebUI process's Agent checkout.

    Args:
        socket: the daemon's socket.
        module: the WebUI's accelerated module (``api.agent_runtime``), kept so the
            WebUI's own state (its active streams, in ``api.config``) can be read.
    """

    def __init__(self, socket: str | os.PathLike[str], module: ModuleType | None = None) -> None:
        self.socket, self.module, self._lock = Path(socket), module, threading.Lock()
        self._guard: Guard | None = None
        self._bound: tuple[Path, str] | None = None  # (checkout, loaded revision)
        self._pid = os.getpid()

    def bound(self, checkout: Path, revision: str) -> None:
        """The WebUI bound the Agent at ``checkout``, loaded at ``revision``: follow it."""
        with self._lock:  # bound once per process: the loaded revision does not change
            if self._bound is None or self._pid != os.getpid():
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
        if (bound := self._bound) is not None:
            self.bound(*bound)  # a no-op but in a forked worker: the parent's client thread is not ours
        if (guard := self._guard) is None:
            return None
        state = guard.snapshot().restart
        if state is not None and not state.scheduled:
            # The WebUI may have seen a commit the daemon has not announced yet (a polling
            # daemon): read HEAD, so a pending restart is told as one (R7).
            state = guard.refresh().restart
        return state

    def work_in_flight(self) -> int | None:
        """The WebUI's chat work running now: its active streams and agent runs.

        Read from the WebUI's ``api.config`` (its ``STREAMS`` and ``ACTIVE_RUNS``), once
        imported. Both registries are keyed by stream id (a run outlives its stream while
        it unwinds), so the count is the union of their keys, each read under its own
        lock, one after the other (never both held: the WebUI takes them apart).
        ``None`` when the WebUI has no such registries (not imported yet, or another
        version).
        """
        package = getattr(self.module, "__name__", "").rpartition(".")[0]
        config = sys.modules.get(f"{package}.config") if package else None
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
    """``original`` (the WebUI's stale payload builder) plus what the daemon says of restarts.

    The WebUI's own payload stands unless a restart is coming or was refused or failed,
    and a ``restart_scheduled`` the WebUI set itself is never contradicted.
    """

    def agent_runtime_stale_payload(exc: Any, *args: Any, **kwargs: Any) -> Any:
        payload = original(exc, *args, **kwargs)
        try:
            state = view.state()
            told = state is not None and (state.scheduled or state.phase in _GAVE_UP)
            if isinstance(payload, dict) and told:
                refusal = Refusal.of(exc, state)
                fields = refusal.restart_fields()
                said = payload.get("restart_scheduled")
                # The WebUI's message was chosen with its own `restart_scheduled` (pull request
                # 7160: from daemon_restarts, a moment ago); the daemon moved on since. Add
                # nothing that would contradict its text: the next request says the new phase.
                if not isinstance(said, bool) or said == fields["restart_scheduled"]:
                    payload.update(fields, retryable=refusal.retryable)  # retrying helps while one comes
        except Exception:  # the payload is upstream's whatever happens here
            logger.debug("stalewatch.hermes: restart state unavailable", exc_info=True)
        return payload

    return _marked(agent_runtime_stale_payload, original, view)


def daemon_restarts(original: Callable[..., Any], view: RestartView) -> Callable[[], bool]:
    """Stands in for the WebUI's ``_schedule_automatic_restart()`` (pull request 7160).

    That function schedules the WebUI's own restart (``os.execv`` of itself, same pid,
    unseen by its supervisor) and says whether one is coming. With a daemon the daemon
    owns restarts (through the supervisor, after the update, verified, drained,
    confirmed): this one schedules nothing and answers whether the daemon's restart is
    coming (connected, with a restart policy, and neither refused nor given up), which
    picks the WebUI's message ("will restart after the Agent update finishes" or
    "could not be scheduled") and its ``restart_scheduled``. A daemon that does not
    answer restarts nothing, and the WebUI says so (fail closed).
    """

    def _schedule_automatic_restart() -> bool:
        try:
            state = view.state()
        except Exception:  # never into the WebUI's check: "could not be scheduled"
            logger.debug("stalewatch.hermes: restart state unavailable", exc_info=True)
            return False
        return state is not None and state.phase not in _GAVE_UP

    return _marked(_schedule_automatic_restart, original, view)
