"""Hermes WebUI: :func:`accelerate` for the WebUI's own file, and a drop-in replacing it.

The recommended way is :func:`~stalewatch.hermes.accelerator.accelerate`: the WebUI
keeps its ``api/agent_runtime.py`` (any version) and appends two lines::

    from stalewatch.hermes import accelerate
    accelerate(sys.modules[__name__])

The rest of this module is the older drop-in, which mirrors the WebUI's file as it was
when the guard was introduced. Hermes WebUI imports ``run_agent.AIAgent`` from a
Hermes Agent checkout into its long-lived server and must refuse to run once that
checkout has moved. Adopting the drop-in takes a three-line ``api/agent_runtime.py``::

    import sys
    from stalewatch import hermes
    sys.modules[__name__] = hermes

Everything the WebUI, its streaming module and its tests use keeps its name and
meaning: :class:`AgentRuntimeChangedError`, :func:`ensure_agent_runtime_current`,
:func:`require_ai_agent_class`, :func:`get_ai_agent_class`,
:func:`_capture_loaded_agent_revision`, :func:`agent_runtime_stale_payload`, and the
module attributes ``_AGENT_DIR``, ``_AGENT_SOURCE_DIR``, ``_AGENT_MODULE_PATH``,
``_AGENT_REVISION`` and ``_read_agent_revision`` (read and replaced by callers and
tests; every function here looks them up at call time).

What changes is the cost. Binding starts a guard on the checkout that supplied the
loaded ``run_agent`` (C1). While that guard is healthy and bound to exactly the
directory, file and revision held in the module attributes, it decides each check
with its strict in-process read (~20 µs, no subprocess, and a commit completed before
the call is seen by it). Otherwise — not bound yet, stopped, not yet healthy, or the
attributes were replaced — :func:`_read_agent_revision` decides, as before.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.cause import Cause
from ..core.errors import StaleError, StalewatchError
from ..core.revisions import short
from ..core.status import Status
from ..guard.guard import Guard
from .accelerator import accelerate
from .discovery import AGENT_MODULE, discover_agent_dir
from .read import loaded_agent_identity, read_agent_revision

__all__ = [
    "AgentRuntimeChangedError",
    "accelerate",
    "agent_runtime_stale_payload",
    "current_guard",
    "ensure_agent_runtime_current",
    "get_ai_agent_class",
    "require_ai_agent_class",
    "stop",
    "wait_until_watching",
]

logger = logging.getLogger(__name__)

_MODULE = AGENT_MODULE
_CLASS = "AIAgent"


# The WebUI's names; the functions below look them up here at call time, so callers
# and tests that replace them (``hermes._read_agent_revision = fake``) are obeyed.
_discover_agent_dir = discover_agent_dir
_loaded_agent_identity = loaded_agent_identity
_read_agent_revision = read_agent_revision

_AGENT_DIR: Path | None = _discover_agent_dir()
_AGENT_SOURCE_DIR: Path | None = None
_AGENT_MODULE_PATH: Path | None = None
_AGENT_REVISION: str | None = None
_AIAgent: type[Any] | None = None
_RUNTIME_LOCK = threading.Lock()
# Serialises binding and unbinding the guard; re-entrant because binding re-checks.
_BIND_LOCK = threading.RLock()


class AgentRuntimeChangedError(StaleError):
    """The loaded Hermes Agent no longer matches its checkout (C3, C4): restart WebUI.

    A :class:`RuntimeError` and a :class:`~stalewatch.StaleError`, so generic
    stalewatch barriers (:mod:`stalewatch.web`) answer it with a 409 too. Like the
    WebUI's own class it is built from one message; the revisions are optional.

    Args:
        message: the whole text of the error.
        checkout: the Agent source directory; default: the one bound, else
            ``_AGENT_DIR``, else ``Path()``.
        loaded_revision: the commit the WebUI loaded.
        current_revision: the commit HEAD resolves to now (``None``: unknown).
        status: ``Status.STALE`` or ``Status.UNREADABLE``.
        cause: what moved HEAD, from the reflog (also in the message), if known.

    Example::

        try:
            hermes.ensure_agent_runtime_current()
        except hermes.AgentRuntimeChangedError as exc:
            return json_response(hermes.agent_runtime_stale_payload(exc), status=409)
    """

    def __init__(
        self,
        message: str,
        *,
        checkout: Path | None = None,
        loaded_revision: str | None = None,
        current_revision: str | None = None,
        status: Status = Status.STALE,
        cause: Cause | None = None,
    ) -> None:
        # StaleError composes its own message from the revisions; this class keeps the
        # caller's message verbatim, so it initialises RuntimeError directly.
        RuntimeError.__init__(self, message)
        self.checkout = checkout if checkout is not None else (_AGENT_SOURCE_DIR or _AGENT_DIR or Path())
        self.loaded_revision = loaded_revision
        self.current_revision = current_revision
        self.status = status
        self.cause = cause


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


_BOUND: _Bound | None = None


def _same_path(value: object, path: Path) -> bool:
    if not isinstance(value, str | os.PathLike):
        return False
    try:
        return Path(value) == path
    except TypeError:
        return False


def _bind_guard(source_dir: Path, module_path: Path, revision: str) -> None:
    global _BOUND  # noqa: PLW0603 - the module's state is its public surface
    old, _BOUND = _BOUND, None
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
    _BOUND = _Bound(guard, source_dir, module_path, revision)
    guard.start()


def _restart_in_child(bound: _Bound) -> None:
    # Threads do not survive fork(): a pre-forking server's workers inherit a guard
    # without a watcher. Restart it once per child, unless stop() unbound it meanwhile.
    global _BOUND  # noqa: PLW0603
    with _BIND_LOCK:
        if _BOUND is bound:
            _BOUND = replace(bound, pid=os.getpid())
            bound.guard.start()


def current_guard() -> Guard | None:
    """The guard bound to the loaded Agent, or ``None`` (not bound, untracked, stopped).

    Example: feed a browser with ``EventStream(hermes.current_guard())`` from
    :mod:`stalewatch.sse`.
    """
    bound = _BOUND
    return bound.guard if bound is not None else None


def wait_until_watching(timeout: float = 5.0) -> bool:
    """Block until the bound guard's watcher is healthy; False on timeout or unbound.

    For readiness probes and tests: from then on checks never spawn a process.
    Example: ``assert hermes.wait_until_watching(5)``.
    """
    bound = _BOUND
    return bound is not None and bound.guard.wait_ready(timeout)


def stop() -> None:
    """Stop the guard's watcher and join its thread; checks fall back to the read.

    Safe to call twice or when nothing is bound. The known revision is kept, so the
    barrier stays closed over a moved checkout. Example: ``atexit.register(hermes.stop)``.
    """
    global _BOUND
    with _BIND_LOCK:
        bound, _BOUND = _BOUND, None
    if bound is not None:
        bound.guard.stop()


def _reset_for_tests() -> None:
    """Stop the guard and forget everything bound; re-discover ``_AGENT_DIR``.

    For test suites: call it in teardown so no watcher thread outlives a test.
    """
    global _AGENT_DIR, _AGENT_SOURCE_DIR, _AGENT_MODULE_PATH, _AGENT_REVISION, _AIAgent  # noqa: PLW0603
    stop()
    with _RUNTIME_LOCK, _BIND_LOCK:  # the order get_ai_agent_class takes them in
        _AGENT_DIR = _discover_agent_dir()
        _AGENT_SOURCE_DIR = _AGENT_MODULE_PATH = _AGENT_REVISION = None
        _AIAgent = None


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
    revision = _AGENT_REVISION
    if revision is None:
        return
    source_dir = _AGENT_SOURCE_DIR
    module_path = _AGENT_MODULE_PATH
    bound = _BOUND
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
        fresh = _read_agent_revision(source_dir, module_path=module_path)
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
    global _AGENT_SOURCE_DIR, _AGENT_MODULE_PATH, _AGENT_REVISION
    with _BIND_LOCK:
        if _AGENT_REVISION is not None:
            ensure_agent_runtime_current()
            return
        loaded = _loaded_agent_identity()
        if loaded is None:
            return
        source_dir, module_path = loaded
        revision = _read_agent_revision(source_dir, module_path=module_path)
        _AGENT_SOURCE_DIR, _AGENT_MODULE_PATH, _AGENT_REVISION = source_dir, module_path, revision
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
    module = importlib.import_module(_MODULE)
    try:
        agent_class: type[Any] = getattr(module, _CLASS)
    except AttributeError:
        raise ImportError(f"cannot import name {_CLASS!r} from {_MODULE!r}", name=_MODULE) from None
    _capture_loaded_agent_revision()
    return agent_class


def get_ai_agent_class() -> type[Any] | None:
    """:func:`require_ai_agent_class` under a lock, cached; ``None`` when the import fails.

    A failed import is retried on the next call. Every call checks first.

    Raises:
        AgentRuntimeChangedError: the checkout moved since the Agent was loaded.

    Example: ``AIAgent = hermes.get_ai_agent_class()``.
    """
    global _AIAgent  # noqa: PLW0603
    with _RUNTIME_LOCK:
        ensure_agent_runtime_current()
        if _AIAgent is None:
            try:
                _AIAgent = require_ai_agent_class()
            except ImportError:
                return None
        return _AIAgent
