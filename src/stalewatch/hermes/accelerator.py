"""The two-line accelerator for Hermes WebUI's own ``api/agent_runtime.py``.

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
and its payloads, stays upstream's (``daemon=`` aside: :mod:`.restart_view`).

What it costs is :mod:`.agent_head`'s: once per (``agent_dir``, ``module_path``),
finding the checkout and one ``git ls-files`` to confirm the file is tracked literally,
cached, bounded and shared by every accelerated module and the drop-in; a call
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

from ..core.errors import SocketPathError
from ..protocol.socket_path import default_socket_path
from .agent_head import DEFER, Defer, read
from .restart_view import RestartView, daemon_restarts, restart_aware

__all__ = ["accelerate"]

logger = logging.getLogger(__name__)

ATTRIBUTE: Final = "_read_agent_revision"
"""The module attribute :func:`accelerate` replaces."""
PAYLOAD: Final = "agent_runtime_stale_payload"
"""The one it also wraps when given a daemon (restart-aware 409s), where the WebUI has it."""
SELF_RESTART: Final = "_schedule_automatic_restart"
"""The WebUI's own restart after an Agent update (pull request 7160): the daemon's, given one."""
SOCKET_VARIABLE: Final = "STALEWATCH_SOCKET"
"""Where ``daemon=True`` finds the daemon's socket (``stalewatch hermes setup`` sets it)."""
_ORIGINAL: Final = "__stalewatch_original__"  # set on our function: the one it replaced
Read = Callable[..., "str | None"]


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
            its restarts, restart-aware payloads): :mod:`.restart_view`.

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
        accelerated_read = _accelerate_read(module, name, view)
        if accelerated_read and view is not None:
            _hand_to_daemon(module, name, view)
    except Exception:  # never into the WebUI's import: it keeps its own read
        logger.warning(
            "stalewatch.hermes: could not accelerate %s; it keeps its own read", name, exc_info=True
        )
        return False
    return accelerated_read


def _socket(daemon: str | os.PathLike[str] | bool | None, name: str) -> Path | None:
    """The daemon's socket ``daemon`` names (see :func:`accelerate`), or ``None``."""
    if daemon is None or daemon is False or daemon == "":
        return None
    if daemon is not True:
        return Path(daemon)
    explicit = os.environ.get(SOCKET_VARIABLE, "").strip()
    if explicit:
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
    for attribute, stand_in in ((PAYLOAD, restart_aware), (SELF_RESTART, daemon_restarts)):
        own = getattr(module, attribute, None)
        if callable(own) and getattr(own, "__stalewatch_view__", None) is None:
            setattr(module, attribute, stand_in(own, view))
    if getattr(module, PAYLOAD, None) is None:
        logger.info(
            "stalewatch.hermes: %s builds its stale payloads elsewhere (no %s): they stay upstream's; "
            "the WebUI registers with the daemon all the same",
            name,
            PAYLOAD,
        )


def _accelerate_read(module: ModuleType, name: str, view: RestartView | None) -> bool:
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
    setattr(module, ATTRIBUTE, accelerated(original, module, view))
    return True


def _compatible(function: object) -> bool:
    if not callable(function):
        return False
    try:
        inspect.signature(function).bind(None, module_path=None)  # its callers' one convention
    except (TypeError, ValueError):
        return False
    return True


def accelerated(original: Read, module: ModuleType | None = None, view: RestartView | None = None) -> Read:
    """The in-process read standing in for ``original`` (same signature and meaning).

    ``module`` and ``view``: the accelerated module and its link to a daemon; the read
    that binds the Agent (while the module's ``_AGENT_REVISION`` is still unset)
    starts following the daemon for that checkout and revision, which registers it.
    """

    @functools.wraps(original)
    def _read_agent_revision(agent_dir: Any, *, module_path: Any = None) -> str | None:
        try:
            found = read(agent_dir, module_path)
        except Exception:  # whatever it is, upstream decides (and fails closed)
            found = DEFER
        revision = original(agent_dir, module_path=module_path) if isinstance(found, Defer) else found
        binding = getattr(module, "_AGENT_REVISION", None) is None  # the WebUI binds the Agent
        if view is not None and isinstance(revision, str) and binding:
            with contextlib.suppress(Exception):  # never into the WebUI's read
                view.bound(Path(agent_dir), revision)
        return revision

    setattr(_read_agent_revision, _ORIGINAL, original)
    _read_agent_revision.__stalewatch_view__ = view  # type: ignore[attr-defined]
    return _read_agent_revision
