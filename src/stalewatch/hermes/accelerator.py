"""The two-line accelerator for Hermes WebUI's own ``api/agent_runtime.py``.

The WebUI keeps its file, whatever its version, and appends::

    from stalewatch.hermes import accelerate
    accelerate(sys.modules[__name__])

:func:`accelerate` replaces one attribute, ``_read_agent_revision(agent_dir, *,
module_path=None) -> str | None``: the one seam unchanged in every version since the
WebUI's guard was introduced, and the only place its three ``git`` processes run. The
replacement means the same (the full HEAD of the checkout whose repository tracks
``module_path`` literally; ``None`` when untracked, outside a checkout, or unknowable)
and reads HEAD in-process on every call: no process (reftable aside), and a ref written
before the call is seen by it. Everything else in the module, its error, its messages
and its payloads, stays upstream's.

What it costs is :mod:`.agent_head`'s: once per (``agent_dir``, ``module_path``),
finding the checkout and one ``git ls-files`` to confirm the file is tracked literally
(C2), cached, bounded and shared by every accelerated module and the drop-in; a call
afterwards is one in-process read of HEAD (~20 µs). No thread is started; nothing
needs restarting after ``fork()``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from .agent_head import DEFER, Defer, read
from .restart_view import RestartView, restart_aware

__all__ = ["accelerate"]

logger = logging.getLogger(__name__)

ATTRIBUTE: Final = "_read_agent_revision"
"""The module attribute :func:`accelerate` replaces."""
PAYLOAD: Final = "agent_runtime_stale_payload"
"""The one it also wraps when given a daemon (restart-aware 409s)."""
_ORIGINAL: Final = "__stalewatch_original__"  # set on our function: the one it replaced
Read = Callable[..., "str | None"]


def accelerate(module: ModuleType, *, daemon: str | os.PathLike[str] | None = None) -> bool:
    """Replace ``module._read_agent_revision`` with an in-process read of the same meaning.

    Call it at the end of the WebUI's ``api/agent_runtime.py``. Returns True when the
    module's read is (now, or already) accelerated. Never raises: a module without a
    compatible ``_read_agent_revision(agent_dir, *, module_path=None)`` is left as it
    was, with one warning logged. Calling it again changes nothing. When the
    accelerated read cannot decide (any error, an unreadable or unborn HEAD), it calls
    the original function, so upstream's fail-closed answer is kept.

    Args:
        module: the WebUI's ``api.agent_runtime``.
        daemon: a stalewatch daemon's socket (``None``: no daemon). With one, the
            module's ``agent_runtime_stale_payload`` also says whether the daemon's
            automatic restart is coming (``restart_scheduled``, ``retry_after``,
            ``restart_phase``; see :mod:`.restarts`), and the WebUI registers the
            revision it loaded with the daemon (one client thread, from the Agent's
            binding on). Without one, the payload stays upstream's, byte for byte.

    Example (the last two lines of ``api/agent_runtime.py``)::

        from stalewatch.hermes import accelerate
        accelerate(sys.modules[__name__])
        # or, with the daemon `stalewatch hermes setup` installs:
        accelerate(sys.modules[__name__], daemon=os.environ.get("STALEWATCH_SOCKET"))
    """
    name = getattr(module, "__name__", repr(module))
    try:
        accelerated_read = _accelerate_read(module, name)
        if accelerated_read and daemon:
            _accelerate_payload(module, name, daemon)
    except Exception:  # never into the WebUI's import: it keeps its own read
        logger.warning(
            "stalewatch.hermes: could not accelerate %s; it keeps its own read", name, exc_info=True
        )
        return False
    return accelerated_read


def _accelerate_payload(module: ModuleType, name: str, daemon: str | os.PathLike[str]) -> None:
    original = getattr(module, PAYLOAD, None)
    if getattr(original, "__stalewatch_view__", None) is not None:
        return  # ours already
    if not callable(original):
        logger.warning("stalewatch.hermes: %s has no %s(exc); its payload stays upstream's", name, PAYLOAD)
        return
    setattr(module, PAYLOAD, restart_aware(original, RestartView(daemon)))


def _accelerate_read(module: ModuleType, name: str) -> bool:
    original = getattr(module, ATTRIBUTE, None)
    if getattr(original, _ORIGINAL, None) is not None:
        return True  # ours already: idempotent
    if original is None or not _compatible(original):
        logger.warning(
            "stalewatch.hermes: %s has no %s(agent_dir, *, module_path=None); left untouched",
            name,
            ATTRIBUTE,
        )
        return False
    setattr(module, ATTRIBUTE, accelerated(original, module))
    return True


def _compatible(function: object) -> bool:
    if not callable(function):
        return False
    try:
        signature = inspect.signature(function)
        signature.bind(None, module_path=None)  # its callers' one calling convention
    except (TypeError, ValueError):
        return False
    return True


def accelerated(original: Read, module: ModuleType | None = None) -> Read:
    """The in-process read standing in for ``original`` (same signature and meaning).

    ``module``: the accelerated module; when its payload is restart-aware, the read
    that binds the Agent (while ``_AGENT_REVISION`` is still unset) starts following
    the daemon for that checkout and revision.
    """

    @functools.wraps(original)
    def _read_agent_revision(agent_dir: Any, *, module_path: Any = None) -> str | None:
        try:
            found = read(agent_dir, module_path)
        except Exception:  # whatever it is, upstream decides (and fails closed)
            found = DEFER
        revision = original(agent_dir, module_path=module_path) if isinstance(found, Defer) else found
        if module is not None and isinstance(revision, str):
            _binding(module, agent_dir, revision)
        return revision

    setattr(_read_agent_revision, _ORIGINAL, original)
    return _read_agent_revision


def _binding(module: ModuleType, agent_dir: Any, revision: str) -> None:
    view = getattr(getattr(module, PAYLOAD, None), "__stalewatch_view__", None)
    if isinstance(view, RestartView) and getattr(module, "_AGENT_REVISION", None) is None:
        with contextlib.suppress(Exception):  # never into the WebUI's read
            view.bound(Path(agent_dir), revision)
