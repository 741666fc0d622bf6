"""The Hermes Agent checkout's HEAD, read in-process: the one read the drop-in and the accelerator share.

It means what the WebUI's ``_read_agent_revision(agent_dir, *, module_path=None)``
means: the full HEAD of the checkout whose repository tracks ``module_path``
literally, ``None`` when untracked or outside a checkout. The WebUI ran three
``git`` processes per call for it; here, once per (``agent_dir``, ``module_path``)
pair, the checkout is found and one ``git ls-files`` confirms the file is tracked (an
:class:`AgentFile`, cached and bounded, shared by every caller of the process); every
call after that is one in-process read of HEAD (~20 µs). No thread is started.

:func:`read` says :data:`DEFER` where it cannot decide (an unborn HEAD, odd input):
the accelerator then asks the WebUI's own function, the drop-in answers ``None``
(unknown, which fails closed).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Final

from ..core.cache import BoundedCache
from ..git import command, refs
from ..git.refs import GitDirs
from .discovery import AGENT_MODULE

__all__ = [
    "BINDINGS",
    "DEFER",
    "MAX_BINDINGS",
    "AgentFile",
    "Defer",
    "loaded_agent_identity",
    "loaded_module_path",
    "read",
    "read_agent_revision",
]

MAX_BINDINGS: Final = 64
"""At most this many (agent_dir, module_path) bindings are kept; the oldest goes first."""


class Defer:
    """The in-process read cannot decide: the caller's fallback must (fail closed as upstream)."""


DEFER: Final = Defer()


@dataclass(frozen=True)
class AgentFile:
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


BINDINGS: BoundedCache[tuple[Any, PurePath], AgentFile] = BoundedCache(MAX_BINDINGS)
"""The process's bindings, shared by every accelerated module and the drop-in."""


def read(agent_dir: Any, module_path: Any) -> str | Defer | None:
    """One in-process read of HEAD for the checkout tracking ``module_path``, or :data:`DEFER`.

    Raises:
        Exception: anything unexpected (a git failure at binding: an untrusted owner,
            a corrupt index); the caller decides as for :data:`DEFER`.
    """
    if agent_dir is None:
        return DEFER  # upstream answers None at once, without a process
    if module_path is None:
        module_path = loaded_module_path()  # as upstream: the loaded run_agent's file
        if module_path is None:
            return None
    if not isinstance(module_path, PurePath):
        return DEFER  # upstream's own behaviour for odd input, whatever it is
    key = (agent_dir, module_path)
    binding = BINDINGS.get(key)
    if binding is None or (not binding.tracked and binding.index != _index_signature(binding.dirs)):
        found = _bind(agent_dir, module_path)
        if found is None:
            return None
        BINDINGS.put(key, found)
        binding = found
    if not binding.tracked:
        return None
    revision = binding.dirs.store.resolve_head(binding.dirs)  # exactly one read of HEAD
    return revision if revision is not None else DEFER  # an unborn branch: upstream's to answer


def read_agent_revision(agent_dir: Path | None, *, module_path: Path | None = None) -> str | None:
    """HEAD's commit for the checkout tracking the Agent module, else ``None`` (the drop-in's read).

    :func:`read`, where everything it cannot decide is ``None``: untracked or unknown.
    Never raises for a bad checkout.

    Args:
        agent_dir: the Agent source directory (``None``: nothing to read).
        module_path: the Agent module file; default: the loaded ``run_agent``'s.
    """
    if module_path is not None and not isinstance(module_path, PurePath):
        try:
            module_path = Path(module_path)
        except TypeError:
            return None
    try:
        revision = read(agent_dir, module_path)
    except Exception:  # an unknown reading: the caller fails closed (C4)
        return None
    return revision if isinstance(revision, str) else None


def loaded_module_path() -> Path | None:
    """The resolved file of the loaded ``run_agent``, if any."""
    module = sys.modules.get(AGENT_MODULE)
    module_file = getattr(module, "__file__", None)
    if not module_file:
        return None
    try:
        return Path(module_file).resolve()
    except (OSError, RuntimeError, TypeError, ValueError):
        return None


def loaded_agent_identity() -> tuple[Path, Path] | None:
    """The (source directory, file) that supplied ``sys.modules['run_agent']``."""
    module_path = loaded_module_path()
    return None if module_path is None else (module_path.parent, module_path)


def _bind(agent_dir: Any, module_path: PurePath) -> AgentFile | None:
    """Which checkout ``agent_dir`` is in, and whether it tracks ``module_path``.

    ``None`` (not cached) when ``agent_dir`` is in no checkout or the file lies outside
    it; a git failure (an untrusted owner, a corrupt index) raises.
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
    return AgentFile(dirs, tracked, None if tracked else index)


def _index_signature(dirs: GitDirs) -> tuple[int, int, int, int] | None:
    try:
        info = (dirs.git_dir / "index").stat()
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
