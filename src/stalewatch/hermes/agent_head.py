"""The Hermes Agent checkout's HEAD, read in-process: the one read the drop-in and the accelerator share.

It means what the WebUI's ``_read_agent_revision(agent_dir, *, module_path=None)``
means: the full HEAD of the checkout whose repository tracks ``module_path``
literally, ``None`` when untracked or outside a checkout. The WebUI ran three
``git`` processes per call for it; here, once per (``agent_dir``, ``module_path``)
pair, the checkout is found and one ``git ls-files`` confirms the file is tracked (an
:class:`AgentFile`, cached and bounded, shared by every caller of the process); every
call after that is one in-process read of HEAD (~20 µs). No thread is started.

Where :func:`read` cannot decide (an unborn HEAD, odd input) it raises: the
accelerator then asks the WebUI's own function, the drop-in answers ``None``
(unknown, which fails closed).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path, PurePath
from typing import Any, Final, NamedTuple

from ..core.cache import BoundedCache
from ..git import command, refs
from .discovery import AGENT_MODULE

MAX_BINDINGS: Final = 64
"""At most this many (agent_dir, module_path) bindings are kept; the oldest goes first."""


class Defer(Exception):
    """The in-process read cannot decide: the caller's fallback must (fail closed as upstream)."""


class AgentFile(NamedTuple):
    """What a (``agent_dir``, ``module_path``) pair identifies.

    Attributes:
        dirs: the git directories of ``agent_dir``'s checkout.
        tracked: whether that checkout's repository tracks ``module_path`` literally.
        index_stamp: for an untracked file, the index's (inode, size, mtime, ctime) when that
            was decided: a later ``git add`` rewrites the index, and the file is asked
            about again. A tracked file is not: a call then runs no process at all, and
            a commit that untracks it moves HEAD anyway.
    """

    dirs: refs.GitDirs
    tracked: bool
    index_stamp: tuple[int, int, int, int] | None


BINDINGS: BoundedCache[tuple[Any, PurePath], AgentFile] = BoundedCache(MAX_BINDINGS)
"""The process's bindings, shared by every accelerated module and the drop-in."""


def read(agent_dir: Any, module_path: Any) -> str | None:
    """One in-process read of HEAD for the checkout tracking ``module_path``.

    Raises:
        Defer: it cannot decide (no ``agent_dir``, odd input, an unborn branch).
        Exception: anything unexpected (a git failure at binding: an untrusted owner,
            a corrupt index); the caller decides as for :class:`Defer`.
    """
    if agent_dir is None:
        raise Defer  # upstream answers None at once, without a process
    module_path = loaded_module_path() if module_path is None else module_path  # upstream's default
    if module_path is None:
        return None  # no run_agent loaded
    if not isinstance(module_path, PurePath):
        raise Defer  # upstream's own behaviour for odd input, whatever it is
    key = (agent_dir, module_path)
    binding = BINDINGS.get(key)
    if binding is None or (not binding.tracked and binding.index_stamp != _index_signature(binding.dirs)):
        binding = _bind(agent_dir, module_path)
        if binding is None:
            return None
        BINDINGS.put(key, binding)
    if not binding.tracked:
        return None
    revision = binding.dirs.store.resolve_head(binding.dirs)  # exactly one read of HEAD
    if revision is None:
        raise Defer  # an unborn branch: upstream's to answer
    return revision


def read_agent_revision(agent_dir: Path | None, *, module_path: Path | None = None) -> str | None:
    """HEAD's commit for the checkout tracking the Agent module, else ``None`` (the drop-in's read).

    :func:`read`, where everything it cannot decide is ``None``: untracked or unknown.
    Never raises for a bad checkout.

    Args:
        agent_dir: the Agent source directory (``None``: nothing to read).
        module_path: the Agent module file; default: the loaded ``run_agent``'s.
    """
    try:
        if module_path is not None and not isinstance(module_path, PurePath):
            module_path = Path(module_path)
        return read(agent_dir, module_path)
    except Exception:  # an unknown reading: the caller fails closed (C4)
        return None


def loaded_module_path() -> Path | None:
    """The resolved file of the loaded ``run_agent``, if any."""
    module_file = getattr(sys.modules.get(AGENT_MODULE), "__file__", None)
    with contextlib.suppress(OSError, RuntimeError, TypeError, ValueError):
        return Path(module_file).resolve() if module_file else None
    return None


def _bind(agent_dir: Any, module_path: PurePath) -> AgentFile | None:
    """Which checkout ``agent_dir`` is in, and whether it tracks ``module_path``.

    ``None`` (not cached) when ``agent_dir`` is in no checkout or the file lies outside
    it; a git failure (an untrusted owner, a corrupt index) raises.
    """
    dirs = refs.find_git_dirs(Path(agent_dir).resolve(strict=True))
    if dirs is None or not module_path.is_relative_to(dirs.worktree):
        return None
    index = _index_signature(dirs)  # before asking: a write meanwhile means asking again
    tracked = command.is_tracked(dirs.worktree, dirs.worktree / module_path.relative_to(dirs.worktree))
    return AgentFile(dirs, tracked, None if tracked else index)


def _index_signature(dirs: refs.GitDirs) -> tuple[int, int, int, int] | None:
    with contextlib.suppress(OSError):
        info = (dirs.git_dir / "index").stat()
        return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    return None
