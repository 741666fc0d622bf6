"""HEAD's commit in a checkout's git directories: in-process, through ``git`` only for reftable."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import NeedsGitError
from . import command, refs
from .refs import GitDirs

__all__ = ["head_commit"]


def head_commit(dirs: GitDirs, chain: list[Path] | None = None) -> str | None:
    """HEAD's commit in ``dirs`` (``None``: an unborn branch); see :func:`~.refs.resolve_head`.

    ``chain`` receives the loose refs HEAD resolved through (none for reftable, which
    ``git rev-parse`` resolves: its tables are not parsed here).

    Raises:
        RefError: HEAD cannot be resolved.
    """
    try:
        return refs.resolve_head(dirs, chain)
    except NeedsGitError:
        return command.rev_parse_head(dirs.worktree)
