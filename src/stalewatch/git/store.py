"""The ref store interface: how a repository keeps its refs, asked instead of a flag.

One store per layout, each in its own module: :mod:`.files` (loose refs and
``packed-refs``, read in-process) and :mod:`.reftable` (through ``git``). The store is
chosen once, when :func:`~.refs.find_git_dirs` finds a checkout, and travels as
``GitDirs.store``: callers ask it, nothing else tests which layout it is. A new layout
is a new module with a class of these methods, listed in ``refs._STORES``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # refs imports the stores; a store only names GitDirs in signatures
    from .refs import GitDirs


class RefStore(Protocol):
    """What the watcher, the guard and the reflog reader need from a ref store."""

    name: str
    """git's name for the format (``files``, ``reftable``), as ``--ref-format`` says it."""

    def found_in(self, common_dir: Path) -> bool:
        """Whether the repository at ``common_dir`` keeps its refs this way."""

    def resolve_head(self, dirs: GitDirs, chain: list[Path] | None = None) -> str | None:
        """HEAD's commit (``None``: an unborn branch).

        ``chain``, if given, receives the file of every ref HEAD resolved through, as
        far as resolution got: the files whose writes can move HEAD's commit.

        Raises:
            RefError: HEAD is missing, unreadable or corrupt.
        """

    def head_chain(self, dirs: GitDirs) -> list[Path]:
        """The files :meth:`resolve_head` would collect now; never raises."""

    def watched(self, dirs: GitDirs) -> tuple[Path, ...]:
        """Files besides ``HEAD`` and the chain whose writes can move any ref."""

    def reflogs(self, dirs: GitDirs, chain: Sequence[Path] = ()) -> list[Path]:
        """``HEAD``'s reflog file, then those of the refs in ``chain`` (innermost
        first); empty when this store keeps no reflog files."""
