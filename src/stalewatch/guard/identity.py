"""Which checkout a guard watches: identity from the file that supplied the code (C1, C2).

Binding resolves symlinks, finds the enclosing working tree in-process and, for a
source file, asks git once whether that exact path is tracked. Everything after
binding is in-process.
"""

from __future__ import annotations

import errno
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import BindError, RefError
from ..git import command
from ..git.refs import GitDirs, find_git_dirs

__all__ = ["Binding", "bind_checkout", "bind_file", "bind_module"]


@dataclass(frozen=True)
class Binding:
    """What a guard is bound to.

    Attributes:
        checkout: top of the working tree; for an untracked file, its directory.
        source: the source file that supplied the code, ``None`` for a whole checkout.
        dirs: the git directories, ``None`` when the source is untracked (C2).
        reason: for an untracked source, why a guard of it never blocks and what to
            do about it (the guard's one warning, its snapshot's ``error``).
    """

    checkout: Path
    source: Path | None
    dirs: GitDirs | None
    reason: str | None = None

    @property
    def tracked(self) -> bool:
        return self.dirs is not None


def _resolve(path: str | Path) -> Path:
    try:
        return Path(path).expanduser().resolve(strict=True)
    except FileNotFoundError:
        raise BindError(path, "does not exist") from None
    except RuntimeError:  # Python < 3.13 reports a symlink loop this way
        raise BindError(path, "symlink loop") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BindError(path, "symlink loop") from None
        raise BindError(path, f"cannot be resolved: {exc.strerror or exc}") from None


def _git_dirs(path: Path) -> GitDirs | None:
    try:
        return find_git_dirs(path)
    except RefError as exc:
        raise BindError(path, f"cannot read its git repository: {exc}") from None
    except OSError as exc:
        raise BindError(path, f"cannot read its git repository: {exc.strerror or exc}") from None


def bind_file(path: str | Path) -> Binding:
    """Bind to the checkout whose repository tracks exactly this file (C2).

    A file in no repository, or untracked in the enclosing one, binds as untracked.

    Raises:
        BindError: the path does not exist, is not a regular file, or cannot be read.
    """
    source = _resolve(path)
    if source.is_dir():
        raise BindError(path, "is a directory, not a source file (use Guard.for_checkout)")
    if not source.is_file():
        raise BindError(path, "is not a regular file")
    dirs = _git_dirs(source.parent)
    if dirs is None:
        reason = "is not in a git checkout: run the code from a git clone"
        return Binding(checkout=source.parent, source=source, dirs=None, reason=reason)
    if not command.is_tracked(dirs.worktree, source):
        reason = (
            f"is not committed to the git repository at {dirs.worktree}: commit it "
            f"(git add {os.path.relpath(source, dirs.worktree)} && git commit)"
        )
        return Binding(checkout=source.parent, source=source, dirs=None, reason=reason)
    return Binding(checkout=dirs.worktree, source=source, dirs=dirs)


def bind_module(name: str) -> Binding:
    """Bind to the checkout that supplied ``sys.modules[name]`` (C1).

    Raises:
        BindError: the module is not imported or has no ``__file__`` (built-in,
            frozen or namespace package), or its file cannot be bound.
    """
    module = sys.modules.get(name)
    if module is None:
        raise BindError(name, "module is not imported; import it before binding a guard")
    file = getattr(module, "__file__", None)
    if not file:
        raise BindError(name, "module has no __file__ (built-in, frozen or namespace package)")
    return bind_file(file)


def bind_checkout(path: str | Path) -> Binding:
    """Bind to the whole working tree containing ``path`` (a file or directory in it).

    Raises:
        BindError: the path does not exist or is not inside a git working tree.
    """
    resolved = _resolve(path)
    dirs = _git_dirs(resolved)
    if dirs is None:
        raise BindError(path, "is not inside a git working tree")
    return Binding(checkout=dirs.worktree, source=None, dirs=dirs)
