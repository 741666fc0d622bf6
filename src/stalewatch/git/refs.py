"""Where a checkout's git data lives, and which ref store keeps its refs: pure reads.

Layouts covered: ``.git`` directory; ``.git`` file with ``gitdir:`` (worktrees,
submodules) and ``commondir``. The ref store (:mod:`.store`) is chosen here, once per
checkout: :mod:`.reftable` when the repository says so, else :mod:`.files`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

from ..core.errors import RefError
from . import files, reftable
from .store import RefStore

# Refs that live in a worktree's own git dir rather than the common dir (git-worktree(1)).
_PER_WORKTREE_PREFIXES = ("refs/bisect/", "refs/worktree/", "refs/rewritten/")
# The stores a repository may use, the first that claims it wins; files claims any.
_STORES: tuple[RefStore, ...] = (reftable.STORE, files.STORE)


@dataclass(frozen=True)
class GitDirs:
    """Where a working tree's git data lives.

    Attributes:
        worktree: top of the working tree (resolved).
        git_dir: the directory holding this worktree's ``HEAD``.
        common_dir: the directory holding ``refs/`` and ``packed-refs`` (equal to
            ``git_dir`` except in linked worktrees).
        store: how the repository keeps its refs (ask it, never test which it is).
        deploy_link: a symlink naming this worktree as the release in use
            (``current -> releases/X``, :mod:`stalewatch.guard.release`): retargeted, the
            code moved, so its name is watched in its directory like a ref.
    """

    worktree: Path
    git_dir: Path
    common_dir: Path
    store: RefStore = files.STORE
    deploy_link: Path | None = None

    @property
    def checkout(self) -> Path:
        """The path guards and a daemon name this checkout by: the deploy link the code
        came through (the same for every release), else the worktree."""
        return self.worktree if self.deploy_link is None else self.deploy_link

    @classmethod
    def plain(cls, directory: Path, deploy_link: Path) -> GitDirs:
        """A release no git owns (an export with a ``REVISION`` file), named by ``deploy_link``.

        Its "git dirs" are the directory itself: nothing of git's is ever found there,
        so only the directory's identity and the link are watched.
        """
        return cls(directory, directory, directory, deploy_link=deploy_link)

    # Paths built once per checkout: a pathlib join costs 2 to 5 µs, and a turn of the
    # watcher would otherwise build seven (issue 17: every microsecond of an update's
    # path is paid again, several times slower, on a CPU just woken).

    @cached_property
    def head_file(self) -> Path:
        return self.git_dir / "HEAD"

    @cached_property
    def packed_refs(self) -> Path:
        return self.common_dir / "packed-refs"

    @cached_property
    def head_log(self) -> Path:
        """``logs/HEAD``: HEAD's reflog."""
        return self.git_dir / "logs" / "HEAD"

    @cached_property
    def ref_path(self) -> Callable[[str], Path]:
        """The loose file of ref ``name`` (per-worktree refs in the worktree's git dir)."""
        git_dir, common_dir = self.git_dir, self.common_dir  # not self: no reference cycle

        @lru_cache(maxsize=256)  # bounded over a long life of branch switches
        def ref_path(name: str) -> Path:
            return (git_dir if name.startswith(_PER_WORKTREE_PREFIXES) else common_dir) / name

        return ref_path

    @cached_property
    def log_path(self) -> Callable[[Path], Path | None]:
        """The reflog of the loose ref file ``ref`` (``None``: not under either git dir)."""
        # Per-worktree refs live under the worktree's git dir, which may itself sit
        # inside the common dir (.git/worktrees/x): look there first.
        bases = (self.git_dir, self.common_dir)

        @lru_cache(maxsize=256)
        def log_path(ref: Path) -> Path | None:
            base = next((b for b in bases if ref.is_relative_to(b)), None)
            return None if base is None else base / "logs" / ref.relative_to(base)

        return log_path


def find_git_dirs(start: Path) -> GitDirs | None:
    """Find the git data of the working tree enclosing ``start`` (a resolved path).

    Walks up from ``start`` (or its parent, for a file) to the first ``.git``
    directory or ``.git`` file, the way git discovers a repository. Returns ``None``
    when no ancestor has one.

    Raises:
        RefError: a ``.git`` file or ``commondir`` exists but cannot be read or parsed.
    """
    here = start if start.is_dir() else start.parent
    for directory in (here, *here.parents):
        dotgit = directory / ".git"
        if dotgit.is_dir():
            return _layout(directory, dotgit)
        if dotgit.is_file():
            text = files.read_small(dotgit) or ""
            if not text.startswith("gitdir:"):
                raise RefError(dotgit, "a .git file must start with 'gitdir:'")
            # An absolute target replaces the directory in the join.
            return _layout(directory, (directory / text[len("gitdir:") :].strip()).resolve())
    return None


def _layout(worktree: Path, git_dir: Path) -> GitDirs:
    common = (files.read_small(git_dir / "commondir") or "").strip()  # absolute, or relative to git_dir
    common_dir = (git_dir / common).resolve() if common else git_dir
    store = next(store for store in _STORES if store.found_in(common_dir))
    return GitDirs(worktree, git_dir, common_dir, store)
