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
tests, they are this module's globals, and every function here looks them up at call
time, as the WebUI's own file does. ``_AGENT_DIR`` is discovered on first use, not at
import.

What changes is the cost: binding starts a guard on the checkout that supplied the
loaded ``run_agent``, whose strict in-process read (~20 µs, no subprocess)
decides each check (see :func:`ensure_agent_runtime_current`).
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import Guard, Refusal, StaleError, StalewatchError, Status
from ..core import forking
from ..core.errors import AgentRuntimeChangedError
from ..core.revisions import short
from .agent_head import loaded_module_path, read_agent_revision
from .discovery import AGENT_MODULE, discover_agent_dir

logger = logging.getLogger(__name__)

_CLASS = "AIAgent"


# The drop-in's state: the WebUI's own module attributes, read at call time, so callers
# and tests replace them on this module (``monkeypatch.setattr(agent_runtime, ...)``).
_AGENT_SOURCE_DIR: Path | None = None  # what was bound
_AGENT_MODULE_PATH: Path | None = None
_AGENT_REVISION: str | None = None
_AIAgent: type[Any] | None = None  # the class, once imported
_read_agent_revision: Callable[..., str | None] = read_agent_revision
_discover_agent_dir: Callable[[], Path | None] = discover_agent_dir
# _AGENT_DIR: absent until discovered on first use (by __getattr__ below).

_bound: tuple[Guard, tuple[Path, Path, str]] | None = None  # the running guard, and its (dir, file, revision)
_runtime_lock = threading.Lock()
_bind_lock = threading.RLock()  # binding and unbinding; re-entrant because binding re-checks


def __getattr__(name: str) -> Any:
    # PEP 562: only ``_AGENT_DIR`` is missing, until its first use discovers it.
    if name != "_AGENT_DIR":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = found = _discover_agent_dir()
    return found


def _after_fork_in_child() -> None:
    # A parent's thread may have held either lock at fork(). The bound guard is
    # restarted by the first check in the child (ensure_agent_runtime_current).
    global _runtime_lock, _bind_lock  # noqa: PLW0603 - the WebUI file's globals
    _runtime_lock = threading.Lock()
    _bind_lock = threading.RLock()


forking.in_child(_after_fork_in_child)
AgentRuntimeChangedError.default_checkout = staticmethod(
    lambda: _AGENT_SOURCE_DIR or sys.modules[__name__]._AGENT_DIR  # discovered on first use
)


def agent_runtime_stale_payload(exc: BaseException) -> dict[str, Any]:
    """The JSON body every stale-runtime entry point answers with.

    Example: ``agent_runtime_stale_payload(exc)`` ->
    ``{"error": str(exc), "type": "agent_runtime_stale", "retryable": True}``.
    """
    # The mirrored version's payload, byte for byte: its clients always retried.
    return {**Refusal.of(exc).body("agent_runtime_stale"), "retryable": True}


def _changed_error(
    loaded: str, current: str | None, checkout: Path | None, seen: StaleError | None = None
) -> AgentRuntimeChangedError:
    cause = None if seen is None else seen.cause  # what moved HEAD, as the guard saw it
    where = f" in {checkout}" if checkout is not None else ""
    if current is None:
        what = f"loaded {short(loaded)}, now unknown: the checkout{where} can no longer be read"
    else:
        moved = f": {cause.describe()}" if cause is not None else ""
        what = f"loaded {short(loaded)}, now {short(current)}{where}{moved}"
    return AgentRuntimeChangedError(
        f"Hermes Agent was updated while Hermes WebUI was running ({what}). "
        "Restart Hermes WebUI to load the new Agent, then retry.",
        checkout=checkout,
        loaded_revision=loaded,
        current_revision=current,
        status=Status.UNREADABLE if current is None else Status.STALE,
        cause=cause,
    )


# -- the guard ----------------------------------------------------------------------


def _bind_guard(source_dir: Path, module_path: Path, revision: str) -> None:
    global _bound  # noqa: PLW0603 - the WebUI file's globals
    stop()  # under _bind_lock (re-entrant), as every caller is
    try:
        guard = Guard.for_file(module_path, loaded_revision=revision)
    except StalewatchError as exc:
        logger.warning("stalewatch.hermes: no watcher for %s (%s); checks read git instead", module_path, exc)
        return
    if guard.status is not Status.CURRENT:
        # The guard's own read disagrees with the one that bound (the checkout moved
        # in between, or _read_agent_revision was replaced): let the read decide.
        return
    _bound = guard, (source_dir, module_path, revision)
    guard.start()


def current_guard() -> Guard | None:
    """The guard bound to the loaded Agent, or ``None`` (not bound, untracked, stopped).

    Example: feed a browser with ``EventStream(hermes.current_guard())`` from
    :mod:`stalewatch.sse`.
    """
    bound = _bound
    return bound[0] if bound is not None else None


def wait_until_watching(timeout: float = 5.0) -> bool:
    """Block until the bound guard's watcher is healthy; False on timeout or unbound.

    For readiness probes and tests: from then on checks never spawn a process.
    Example: ``assert hermes.wait_until_watching(5)``.
    """
    bound = _bound
    return bound is not None and bound[0].wait_ready(timeout)


def stop() -> None:
    """Stop the guard's watcher and join its thread; checks fall back to the read.

    Safe to call twice or when nothing is bound. The known revision is kept, so the
    barrier stays closed over a moved checkout. Example: ``atexit.register(hermes.stop)``.
    """
    global _bound
    with _bind_lock:
        bound, _bound = _bound, None
    if bound is not None:
        bound[0].stop()


def _reset_for_tests() -> None:
    """Stop the guard and forget everything bound; ``_AGENT_DIR`` is discovered again on use.

    For test suites: call it in teardown so no watcher thread outlives a test.
    """
    global _AGENT_SOURCE_DIR, _AGENT_MODULE_PATH, _AGENT_REVISION, _AIAgent  # noqa: PLW0603 - the WebUI file's globals
    stop()
    with _runtime_lock, _bind_lock:  # the order get_ai_agent_class takes them in
        globals().pop("_AGENT_DIR", None)
        _AGENT_SOURCE_DIR = _AGENT_MODULE_PATH = _AGENT_REVISION = _AIAgent = None


# -- the WebUI's surface ------------------------------------------------------------


def ensure_agent_runtime_current() -> None:
    """Return while the loaded Agent is current; raise once its checkout moved.

    A no-op until a revision is known (not bound yet, or untracked). Decided by the
    bound guard's strict in-process check while it is healthy and bound to the
    current ``_AGENT_SOURCE_DIR``/``_AGENT_MODULE_PATH``/``_AGENT_REVISION``;
    otherwise by ``_read_agent_revision``. An unknown reading fails closed.

    Raises:
        AgentRuntimeChangedError: HEAD moved to another commit, or can no longer be
            resolved.

    Example::

        hermes.ensure_agent_runtime_current()   # before starting a chat
    """
    revision = _AGENT_REVISION
    if revision is None:
        return
    source_dir, module_path, bound = _AGENT_SOURCE_DIR, _AGENT_MODULE_PATH, _bound
    # Callers and tests replace the module attributes: the guard decides only for the
    # very directory, file and revision it watches, never for another one.
    if bound is not None and bound[1] == (source_dir, module_path, revision):
        if bound[0].snapshot().trusted:
            try:
                bound[0].check(strict=True)
            except StaleError as exc:
                raise _changed_error(revision, exc.current_revision, source_dir, exc) from None
            return
        # Threads do not survive fork(): a pre-forking server's workers inherit a guard
        # without a watcher. Started again (a no-op while it runs), unless stop() unbound it.
        with _bind_lock:
            if _bound is bound:
                bound[0].start()
    try:
        fresh = _read_agent_revision(source_dir, module_path=module_path)
    except Exception:  # an unknown reading is indistinguishable from a change (C4)
        fresh = None
    if fresh != revision:
        raise _changed_error(revision, fresh, source_dir)


def _capture_loaded_agent_revision() -> None:
    """Bind to the checkout that supplied the loaded ``run_agent``, and watch it.

    When a revision is already known this only re-checks (a re-bind never
    replaces a known revision, and an unreadable checkout raises). Swapping the
    module in ``sys.modules`` changes nothing: only the checkout decides. The first binding to a tracked
    checkout starts the guard.

    Raises:
        AgentRuntimeChangedError: a revision is known and the checkout moved.
    """
    global _AGENT_SOURCE_DIR, _AGENT_MODULE_PATH, _AGENT_REVISION
    with _bind_lock:
        if _AGENT_REVISION is not None:
            ensure_agent_runtime_current()
            return
        if (module_path := loaded_module_path()) is None:
            return
        source_dir = module_path.parent
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
    global _AIAgent  # noqa: PLW0603 - the WebUI file's globals
    with _runtime_lock:
        ensure_agent_runtime_current()
        if _AIAgent is None:
            try:
                _AIAgent = require_ai_agent_class()
            except ImportError:
                return None
        return _AIAgent
