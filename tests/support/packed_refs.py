"""One ``packed-refs`` snapshot, taken and searched as ``git.packed.lookup`` does it, without
its cache: what the tests of ``git/packed`` look at."""

from __future__ import annotations

import os
from pathlib import Path

from stalewatch.git import packed
from stalewatch.git.packed import PackedFile

__all__ = ["find", "snapshot"]


def snapshot(path: Path) -> PackedFile:
    """The snapshot a lookup of ``path`` would take now (``RefError`` as it would raise)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return packed._snapshot(path, fd, os.fstat(fd))
    finally:
        os.close(fd)


def find(path: Path, snap: PackedFile, name: str) -> str | None:
    """What ``snap`` of ``path`` says of ref ``name`` (searched in the file as it is now)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return packed._search(path, snap, fd, name)
    finally:
        os.close(fd)
