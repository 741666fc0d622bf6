"""Which checkout a guard watches: identity from the file that supplied the code.

Binding resolves symlinks, finds the enclosing working tree in-process and, for a
source file, asks git once whether that exact path is tracked. Everything after
binding is in-process.
"""

from __future__ import annotations

import errno
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ..core.errors import BindError, RefError
from ..git import command
from ..git.refs import GitDirs, find_git_dirs
from .head import HeadReader, RevisionReader
from .release import DeployLink, LinkArg, find_link


@dataclass(frozen=True)
class Binding:
    """What a guard is bound to.

    Attributes:
        checkout: top of the working tree; for an untracked file, its directory; behind
            a deploy link, the link (``/srv/app/current``: what every release shares).
        source: the source file that supplied the code, ``None`` for a whole checkout.
        dirs: the git directories, ``None`` when the source is untracked; behind
            a deploy link, with the link (:attr:`GitDirs.deploy_link`).
        link: the deploy link the code came through (``current -> releases/X``), if any.
        reason: for an untracked source, why a guard of it never blocks and what to
            do about it (the guard's one warning, its snapshot's ``error``).
    """

    checkout: Path
    source: Path | None
    dirs: GitDirs | None
    link: DeployLink | None = None
    reason: str | None = None

    @property
    def tracked(self) -> bool:
        return self.dirs is not None

    def reader(self) -> RevisionReader:
        """Where the revision comes from: the deploy link's release, else HEAD."""
        return self.link if self.link is not None else HeadReader(self)


def _linked(given: str | Path, binding: Binding, deploy_link: LinkArg) -> Binding:
    """``binding``, behind the deploy link ``given`` came through or that was named."""
    dirs = binding.dirs
    link = find_link(Path(given), dirs.worktree if dirs is not None else None, deploy_link=deploy_link)
    if link is None:
        return binding
    # The watcher watches the checkout (outside git, the release's directory) and the link's name.
    watched = (
        GitDirs.plain(link.loaded.path, link.link) if dirs is None else replace(dirs, deploy_link=link.link)
    )
    return Binding(watched.checkout, binding.source, watched, link)


def _resolve(path: str | Path) -> Path:
    try:
        return Path(path).expanduser().resolve(strict=True)
    except FileNotFoundError:
        raise BindError(path, "does not exist") from None
    except (RuntimeError, OSError) as exc:  # Python < 3.13 reports a symlink loop as a RuntimeError
        if isinstance(exc, RuntimeError) or exc.errno == errno.ELOOP:
            raise BindError(path, "symlink loop") from None
        raise BindError(path, f"cannot be resolved: {exc.strerror or exc}") from None


def _git_dirs(path: Path) -> GitDirs | None:
    try:
        return find_git_dirs(path)
    except (RefError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise BindError(path, f"cannot read its git repository: {reason}") from None


def bind_file(path: str | Path, deploy_link: LinkArg = None) -> Binding:
    """Bind to the checkout whose repository tracks exactly this file.

    A file in no repository, or untracked in the enclosing one, binds as untracked,
    unless it came through a deploy link (:func:`~.release.find_link`).

    Raises:
        BindError: the path does not exist, is not a regular file, or cannot be read;
            ``deploy_link`` is no symlink, or switches between releases without this file.
    """
    source = _resolve(path)
    if source.is_dir():
        raise BindError(path, "is a directory, not a source file (use Guard.for_checkout)")
    if not source.is_file():
        raise BindError(path, "is not a regular file")
    dirs = _git_dirs(source.parent)
    if dirs is not None and command.is_tracked(dirs.worktree, source):
        return _linked(path, Binding(dirs.worktree, source, dirs), deploy_link)
    reason = "is not in a git checkout: run the code from a git clone"
    if dirs is not None:
        reason = (
            f"is not committed to the git repository at {dirs.worktree}: commit it "
            f"(git add {os.path.relpath(source, dirs.worktree)} && git commit)"
        )
    return _linked(path, Binding(source.parent, source, None, reason=reason), deploy_link)


def bind_module(name: str, deploy_link: LinkArg = None) -> Binding:
    """Bind to the checkout that supplied ``sys.modules[name]``.

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
    return bind_file(file, deploy_link)


def bind_checkout(path: str | Path, deploy_link: LinkArg = None) -> Binding:
    """Bind to the whole working tree containing ``path`` (a file or directory in it).

    ``path`` may be a deploy link itself (``/srv/app/current``), whose release need not
    be a git checkout (:func:`~.release.find_link`).

    Raises:
        BindError: the path does not exist or is not inside a git working tree (nor
            behind a deploy link).
    """
    resolved = _resolve(path)
    dirs = _git_dirs(resolved)
    linked = _linked(path, Binding(resolved if dirs is None else dirs.worktree, None, dirs), deploy_link)
    if dirs is None and linked.link is None:
        raise BindError(path, "is not inside a git working tree")
    return linked
