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

What it costs once per (``agent_dir``, ``module_path``): finding the checkout and one
``git ls-files`` to confirm the file is tracked literally (C2). That binding is cached,
bounded, and shared by every accelerated module; a call afterwards is one in-process
read of HEAD (~20 µs). No thread is started; nothing needs restarting after ``fork()``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path, PurePath
from types import ModuleType
from typing import Any, Final

from ..git import command, refs
from ..git.head import head_commit
from ..git.refs import GitDirs
from .discovery import AGENT_MODULE
from .restarts import RestartView, restart_aware

__all__ = ["accelerate"]

logger = logging.getLogger(__name__)

ATTRIBUTE: Final = "_read_agent_revision"
"""The module attribute :func:`accelerate` replaces."""
PAYLOAD: Final = "agent_runtime_stale_payload"
"""The one it also wraps when given a daemon (restart-aware 409s)."""
_ORIGINAL: Final = "__stalewatch_original__"  # set on our function: the one it replaced
MAX_BINDINGS: Final = 64
"""At most this many (agent_dir, module_path) bindings are kept; the oldest goes first."""

Read = Callable[..., "str | None"]


class _Defer:
    """The accelerated read cannot decide: the original function must (fail closed as upstream)."""


DEFER: Final = _Defer()


@dataclass(frozen=True)
class Binding:
    """What a (``agent_dir``, ``module_path``) pair identifies.

    Attributes:
        dirs: the git directories of ``agent_dir``'s checkout.
        tracked: whether that checkout's repository tracks ``module_path`` literally.
        index: for an untracked file, the index's (inode, size, mtime, ctime) when that
            was decided: a later ``git add`` rewrites the index, and the file is asked
            about again. A tracked file is not: a call then runs no process at all, and
            a commit that untracks it moves HEAD anyway.
    """

    dirs: GitDirs
    tracked: bool
    index: tuple[int, int, int, int] | None = None


class Bindings:
    """A bounded map of bindings: reads take no lock, writes and the bound take one.

    Args:
        limit: the most bindings kept; inserting past it drops the oldest.
    """

    def __init__(self, limit: int = MAX_BINDINGS) -> None:
        self.limit = limit
        self._items: dict[Hashable, Binding] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Binding | None:
        return self._items.get(key)  # one dict read: atomic under the GIL

    def put(self, key: Hashable, binding: Binding) -> None:
        with self._lock:
            self._items.pop(key, None)
            while len(self._items) >= self.limit:
                del self._items[next(iter(self._items))]
            self._items[key] = binding

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def after_fork_in_child(self) -> None:
        # Another thread may have held the lock at fork(): the child's copy would never
        # be released. The bindings themselves stay valid in the child.
        self._lock = threading.Lock()


BINDINGS = Bindings()
os.register_at_fork(after_in_child=BINDINGS.after_fork_in_child)


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
            revision = read(agent_dir, module_path)
        except Exception:  # whatever it is, upstream decides (and fails closed)
            revision = DEFER
        if isinstance(revision, _Defer):
            revision = original(agent_dir, module_path=module_path)
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


def read(agent_dir: Any, module_path: Any) -> str | _Defer | None:
    """One in-process read of HEAD for the checkout tracking ``module_path``, or :data:`DEFER`.

    Raises:
        Exception: anything unexpected; the caller defers to the original function.
    """
    if agent_dir is None:
        return DEFER  # upstream answers None at once, without a process
    if module_path is None:
        module_path = _loaded_module_path()  # as upstream: the loaded run_agent's file
        if module_path is None:
            return None
    if not isinstance(module_path, PurePath):
        return DEFER  # upstream's own behaviour for odd input, whatever it is
    key = (agent_dir, module_path)
    binding = BINDINGS.get(key)
    if binding is None or (not binding.tracked and binding.index != _index_signature(binding.dirs)):
        found = _bind(agent_dir, module_path)
        if not isinstance(found, Binding):
            return found
        BINDINGS.put(key, found)
        binding = found
    if not binding.tracked:
        return None
    return _head(binding.dirs)


def _loaded_module_path() -> Path | None:
    module = sys.modules.get(AGENT_MODULE)
    module_file = getattr(module, "__file__", None)
    if not module_file:
        return None
    try:
        return Path(module_file).resolve()
    except (OSError, RuntimeError, TypeError):
        return None


def _bind(agent_dir: Any, module_path: PurePath) -> Binding | _Defer | None:
    """Which checkout ``agent_dir`` is in, and whether it tracks ``module_path`` (C2).

    ``None`` (not cached) when ``agent_dir`` is in no checkout or the file lies outside
    it; a git failure (an untrusted owner, a corrupt index) raises, so upstream decides.
    """
    dirs = refs.find_git_dirs(Path(agent_dir).resolve(strict=True))
    if dirs is None:
        return None
    try:
        relative = module_path.relative_to(dirs.worktree)
    except ValueError:
        return None
    index = _index_signature(dirs)  # before asking: a write meanwhile means asking again
    tracked = command.is_tracked(dirs.worktree, dirs.worktree / relative)
    return Binding(dirs, tracked, None if tracked else index)


def _index_signature(dirs: GitDirs) -> tuple[int, int, int, int] | None:
    try:
        info = (dirs.git_dir / "index").stat()
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _head(dirs: GitDirs) -> str | _Defer:
    """Exactly one read of HEAD; an unborn branch (no commit) is upstream's to answer."""
    revision = head_commit(dirs)
    return revision if revision is not None else DEFER
