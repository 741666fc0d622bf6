"""The reftable ref store (git >= 2.45, ``--ref-format=reftable``), through ``git``.

Its binary tables are not parsed here: HEAD is resolved by ``git rev-parse`` (a process
per read, so a strict check costs milliseconds, not microseconds). git renames
``tables.list.lock`` over ``tables.list`` on every ref update, in the common dir's
stack and in a linked worktree's own: those are the files to watch. Reflogs live in
the tables: no reflog files, so no cause is told.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .command import rev_parse_head

if TYPE_CHECKING:  # refs imports this module to choose a store
    from .refs import GitDirs
    from .store import RefStore


@dataclass(frozen=True)
class Reftable:
    """reftable, read through ``git`` (see the module doc)."""

    name = "reftable"

    def found_in(self, common_dir: Path) -> bool:
        """A ``reftable/`` directory, or ``extensions.refStorage = reftable`` in the config."""
        if (common_dir / "reftable").is_dir():
            return True
        try:
            config = (common_dir / "config").read_text("utf-8", "replace").lower()
        except OSError:
            return False
        return "refstorage = reftable" in config or "refstorage=reftable" in config

    def resolve_head(self, dirs: GitDirs, chain: list[Path] | None = None) -> str | None:
        """HEAD's commit by ``git rev-parse``; ``chain`` stays empty (no ref files)."""
        return rev_parse_head(dirs.worktree)

    def head_chain(self, dirs: GitDirs) -> list[Path]:
        """Empty: no loose refs to follow."""
        return []

    def watched(self, dirs: GitDirs) -> tuple[Path, ...]:
        """``tables.list`` of each stack (a linked worktree has its own)."""
        stacks = dict.fromkeys((dirs.git_dir, dirs.common_dir))
        return tuple(base / "reftable" / "tables.list" for base in stacks)

    def reflogs(self, dirs: GitDirs, chain: Sequence[Path] = ()) -> list[Path]:
        """Empty: reftable keeps no ``logs/``."""
        return []


STORE: RefStore = Reftable()
"""The one instance: a store keeps no state of its own."""
