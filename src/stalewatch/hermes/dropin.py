"""The older drop-in for Hermes WebUI's ``api/agent_runtime.py``, with a guard behind it.

The recommended way is :func:`~stalewatch.hermes.accelerator.accelerate`: the WebUI
keeps its own file (any version) and appends two lines. This module instead mirrors
the WebUI's file as it was when the guard was introduced. Hermes WebUI imports
``run_agent.AIAgent`` from a Hermes Agent checkout into its long-lived server and must
refuse to run once that checkout has moved. Adopting the drop-in takes a three-line
``api/agent_runtime.py``::

    import sys
    from stalewatch.hermes import dropin
    sys.modules[__name__] = dropin

Everything the WebUI, its streaming module and its tests use keeps its name and
meaning: :class:`AgentRuntimeChangedError`, :func:`ensure_agent_runtime_current`,
:func:`require_ai_agent_class`, :func:`get_ai_agent_class`,
:func:`_capture_loaded_agent_revision`, :func:`agent_runtime_stale_payload`, and the
module attributes ``_AGENT_DIR``, ``_AGENT_SOURCE_DIR``, ``_AGENT_MODULE_PATH``,
``_AGENT_REVISION`` and ``_read_agent_revision``: read and replaced by callers and
tests, they are properties of this module forwarding to its one state object
(:class:`DropIn`), and every function here looks them up at call time.
``_AGENT_DIR`` is discovered on first use, not at import.

What changes is the cost. Binding starts a guard on the checkout that supplied the
loaded ``run_agent`` (C1). While that guard is healthy and bound to exactly the
directory, file and revision held in the module attributes, it decides each check
with its strict in-process read (~20 µs, no subprocess, and a commit completed before
the call is seen by it). Otherwise — not bound yet, stopped, not yet healthy, or the
attributes were replaced — ``_read_agent_revision`` decides, as before (by default
:func:`~.agent_head.read_agent_revision`, the read the accelerator uses too).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core import forking
from ..core.cause import Cause
from ..core.errors import AgentRuntimeChangedError, StaleError, StalewatchError
from ..core.revisions import short
from ..core.status import Status
from ..guard.guard import Guard
from .agent_head import loaded_agent_identity, read_agent_revision
from .discovery import AGENT_MODULE, discover_agent_dir

__all__ = [
    "AgentRuntimeChangedError",
    "DropIn",
    "agent_runtime_stale_payload",
    "current_guard",
    "ensure_agent_runtime_current",
    "get_ai_agent_class",
    "require_ai_agent_class",
    "stop",
    "wait_until_watching",
]

logger = logging.getLogger(__name__)

_CLASS = "AIAgent"
_UNKNOWN: Any = object()  # _AGENT_DIR not discovered yet


@dataclass(frozen=True)
class _Bound:
    """A running guard and exactly what it was bound for."""

    guard: Guard
    source_dir: Path
    module_path: Path
    revision: str
    pid: int = field(default_factory=os.getpid)

    def serves(self, source_dir: object, module_path: object, revision: str) -> bool:
        # Callers and tests replace the module attributes: the guard decides only for
        # the very directory, file and revision it watches, never for another one.
        return (
            revision == self.revision
            and _same_path(source_dir, self.source_dir)
            and _same_path(module_path, self.module_path)
        )


def _same_path(value: object, path: Path) -> bool:
    if not isinstance(value, str | os.PathLike):
        return False
    try:
        return Path(value) == path
    except TypeError:
        return False


class DropIn:
    """The drop-in's state, one per process: what was found, bound and loaded.

    Attributes:
        discover: finds the Agent checkout (``_discover_agent_dir``).
        loaded_identity: the loaded ``run_agent``'s (directory, file) (``_loaded_agent_identity``).
        read: HEAD's commit for (agent_dir, module_path) (``_read_agent_revision``).
        source_dir, module_path, revision: what was bound (``_AGENT_SOURCE_DIR``...).
        ai_agent: the class, once imported (``_AIAgent``).
        bound: the running guard and what it was bound for.
    """

    def __init__(self) -> None:
        self.discover: Callable[[], Path | None] = discover_agent_dir
        self.loaded_identity: Callable[[], tuple[Path, Path] | None] = loaded_agent_identity
        self.read: Callable[..., str | None] = read_agent_revision
        self._agent_dir: Path | None = _UNKNOWN
        self.source_dir: Path | None = None
        self.module_path: Path | None = None
        self.revision: str | None = None
        self.ai_agent: type[Any] | None = None
        self.bound: _Bound | None = None
        self.runtime_lock = threading.Lock()
        # Serialises binding and unbinding the guard; re-entrant because binding re-checks.
        self.bind_lock = threading.RLock()
        forking.in_child(self._after_fork_in_child)

    @property
    def agent_dir(self) -> Path | None:
        """Where the Agent checkout is (``_AGENT_DIR``), discovered on first use."""
        if self._agent_dir is _UNKNOWN:
            self._agent_dir = self.discover()
        return self._agent_dir

    @agent_dir.setter
    def agent_dir(self, value: Path | None) -> None:
        self._agent_dir = value

    def forget(self) -> None:
        """Forget everything bound, and what was discovered (``_reset_for_tests``)."""
        self._agent_dir = _UNKNOWN
        self.source_dir = self.module_path = self.revision = None
        self.ai_agent = None

    def _after_fork_in_child(self) -> None:
        # A parent's thread may have held either lock at fork(). The bound guard is
        # restarted by the first check in the child (_restart_in_child).
        self.runtime_lock = threading.Lock()
        self.bind_lock = threading.RLock()


_state = DropIn()
AgentRuntimeChangedError.default_checkout = staticmethod(lambda: _state.source_dir or _state.agent_dir)


def agent_runtime_stale_payload(exc: BaseException) -> dict[str, Any]:
    """The JSON body every stale-runtime entry point answers with.

    Example: ``agent_runtime_stale_payload(exc)`` ->
    ``{"error": str(exc), "type": "agent_runtime_stale", "retryable": True}``.
    """
    return {"error": str(exc), "type": "agent_runtime_stale", "retryable": True}


def _changed_error(
    loaded: str, current: str | None, checkout: Path | None, cause: Cause | None = None
) -> AgentRuntimeChangedError:
    where = f" in {checkout}" if checkout is not None else ""
    if current is None:
        what = f"loaded {short(loaded)}, now unknown: the checkout{where} can no longer be read"
        status = Status.UNREADABLE
    else:
        moved = f": {cause.describe()}" if cause is not None else ""
        what = f"loaded {short(loaded)}, now {short(current)}{where}{moved}"
        status = Status.STALE
    return AgentRuntimeChangedError(
        f"Hermes Agent was updated while Hermes WebUI was running ({what}). "
        "Restart Hermes WebUI to load the new Agent, then retry.",
        checkout=checkout,
        loaded_revision=loaded,
        current_revision=current,
        status=status,
        cause=cause,
    )


# -- the guard ----------------------------------------------------------------------


def _bind_guard(source_dir: Path, module_path: Path, revision: str) -> None:
    old, _state.bound = _state.bound, None
    if old is not None:
        old.guard.stop()
    try:
        guard = Guard.for_file(module_path, loaded_revision=revision)
    except StalewatchError as exc:
        logger.warning("stalewatch.hermes: no watcher for %s (%s); checks read git instead", module_path, exc)
        return
    if guard.status is not Status.CURRENT:
        # The guard's own read disagrees with the one that bound (the checkout moved
        # in between, or _read_agent_revision was replaced): let the read decide.
        return
    _state.bound = _Bound(guard, source_dir, module_path, revision)
    guard.start()


def _restart_in_child(bound: _Bound) -> None:
    # Threads do not survive fork(): a pre-forking server's workers inherit a guard
    # without a watcher. Restart it once per child, unless stop() unbound it meanwhile.
    with _state.bind_lock:
        if _state.bound is bound:
            _state.bound = replace(bound, pid=os.getpid())
            bound.guard.start()


def current_guard() -> Guard | None:
    """The guard bound to the loaded Agent, or ``None`` (not bound, untracked, stopped).

    Example: feed a browser with ``EventStream(hermes.current_guard())`` from
    :mod:`stalewatch.sse`.
    """
    bound = _state.bound
    return bound.guard if bound is not None else None


def wait_until_watching(timeout: float = 5.0) -> bool:
    """Block until the bound guard's watcher is healthy; False on timeout or unbound.

    For readiness probes and tests: from then on checks never spawn a process.
    Example: ``assert hermes.wait_until_watching(5)``.
    """
    bound = _state.bound
    return bound is not None and bound.guard.wait_ready(timeout)


def stop() -> None:
    """Stop the guard's watcher and join its thread; checks fall back to the read.

    Safe to call twice or when nothing is bound. The known revision is kept, so the
    barrier stays closed over a moved checkout. Example: ``atexit.register(hermes.stop)``.
    """
    with _state.bind_lock:
        bound, _state.bound = _state.bound, None
    if bound is not None:
        bound.guard.stop()


def _reset_for_tests() -> None:
    """Stop the guard and forget everything bound; ``_AGENT_DIR`` is discovered again on use.

    For test suites: call it in teardown so no watcher thread outlives a test.
    """
    stop()
    with _state.runtime_lock, _state.bind_lock:  # the order get_ai_agent_class takes them in
        _state.forget()


# -- the WebUI's surface ------------------------------------------------------------


def ensure_agent_runtime_current() -> None:
    """Return while the loaded Agent is current; raise once its checkout moved.

    A no-op until a revision is known (not bound yet, or untracked: C2). Decided by the
    bound guard's strict in-process check while it is healthy and bound to the
    current ``_AGENT_SOURCE_DIR``/``_AGENT_MODULE_PATH``/``_AGENT_REVISION``;
    otherwise by ``_read_agent_revision``. An unknown reading fails closed (C4).

    Raises:
        AgentRuntimeChangedError: HEAD moved to another commit, or can no longer be
            resolved.

    Example::

        hermes.ensure_agent_runtime_current()   # before starting a chat
    """
    revision = _state.revision
    if revision is None:
        return
    source_dir = _state.source_dir
    module_path = _state.module_path
    bound = _state.bound
    if bound is not None and bound.serves(source_dir, module_path, revision):
        if bound.guard.snapshot().trusted:
            try:
                bound.guard.check(strict=True)
            except StaleError as exc:
                raise _changed_error(revision, exc.current_revision, source_dir, exc.cause) from None
            return
        if bound.pid != os.getpid():
            _restart_in_child(bound)
    try:
        fresh = _state.read(source_dir, module_path=module_path)
    except Exception:  # an unknown reading is indistinguishable from a change (C4)
        fresh = None
    if fresh != revision:
        raise _changed_error(revision, fresh, source_dir)


def _capture_loaded_agent_revision() -> None:
    """Bind to the checkout that supplied the loaded ``run_agent`` (C1), and watch it.

    When a revision is already known this only re-checks (C5: a re-bind never
    replaces a known revision, and an unreadable checkout raises). Swapping the
    module in ``sys.modules`` changes nothing (C6). The first binding to a tracked
    checkout starts the guard.

    Raises:
        AgentRuntimeChangedError: a revision is known and the checkout moved.
    """
    with _state.bind_lock:
        if _state.revision is not None:
            ensure_agent_runtime_current()
            return
        loaded = _state.loaded_identity()
        if loaded is None:
            return
        source_dir, module_path = loaded
        revision = _state.read(source_dir, module_path=module_path)
        _state.source_dir, _state.module_path, _state.revision = source_dir, module_path, revision
        if revision is not None:
            _bind_guard(source_dir, module_path, revision)


def require_ai_agent_class() -> type[Any]:
    """Check, import ``run_agent.AIAgent``, bind to its checkout, return the class.

    Raises:
        AgentRuntimeChangedError: the checkout moved since the Agent was loaded.
        ImportError: ``run_agent`` or its ``AIAgent`` cannot be imported.

    Example: ``AIAgent = hermes.require_ai_agent_class()``.
    """
    ensure_agent_runtime_current()
    module = importlib.import_module(AGENT_MODULE)
    try:
        agent_class: type[Any] = getattr(module, _CLASS)
    except AttributeError:
        raise ImportError(f"cannot import name {_CLASS!r} from {AGENT_MODULE!r}", name=AGENT_MODULE) from None
    _capture_loaded_agent_revision()
    return agent_class


def get_ai_agent_class() -> type[Any] | None:
    """:func:`require_ai_agent_class` under a lock, cached; ``None`` when the import fails.

    A failed import is retried on the next call. Every call checks first.

    Raises:
        AgentRuntimeChangedError: the checkout moved since the Agent was loaded.

    Example: ``AIAgent = hermes.get_ai_agent_class()``.
    """
    with _state.runtime_lock:
        ensure_agent_runtime_current()
        if _state.ai_agent is None:
            try:
                _state.ai_agent = require_ai_agent_class()
            except ImportError:
                return None
        return _state.ai_agent


# -- the module's attributes: the WebUI's names, forwarded to the state ---------------

STATE_ATTRIBUTES = {
    "_AGENT_DIR": "agent_dir",
    "_AGENT_SOURCE_DIR": "source_dir",
    "_AGENT_MODULE_PATH": "module_path",
    "_AGENT_REVISION": "revision",
    "_AIAgent": "ai_agent",
    "_read_agent_revision": "read",
    "_discover_agent_dir": "discover",
    "_loaded_agent_identity": "loaded_identity",
}
"""The module attributes that are the drop-in's state: each reads and writes :class:`DropIn`."""


def _forward(name: str) -> property:
    return property(lambda module: getattr(_state, name), lambda module, value: setattr(_state, name, value))


# This module's class: its state attributes are properties forwarding to ``_state``.
_DropInModule = type(
    "_DropInModule",
    (types.ModuleType,),
    {attribute: _forward(name) for attribute, name in STATE_ATTRIBUTES.items()},
)
sys.modules[__name__].__class__ = _DropInModule
