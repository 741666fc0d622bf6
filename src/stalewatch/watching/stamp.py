"""Stat stamps: has anything that can move HEAD changed since it was last read? Pure.

The periodic re-verification backs up the kernel's events. It must stay cheap for a
thousand checkouts, so it first compares a :class:`Stamp` — the ``lstat`` of every
file a plan names (HEAD, the refs on its chain, ``packed-refs``) — with the one
taken just before the last read, and reads HEAD only when they differ.

A bare stat fingerprint is not enough on its own: a file rewritten twice
within one timestamp tick on a recycled inode, with the same size, keeps inode, size,
mtime and ctime. So a stamp records whether any file changed less than
:data:`~stalewatch.git.packed.RACY_NS` before it was taken (``racy``); a racy stamp
proves nothing and the next verification reads. Since stat data changes with every
later write once that window has passed, an equal, settled stamp means the files
are what was read. The watcher still reads every few verifications regardless,
against a clock stepped backwards or a filesystem that lies about timestamps.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..git.packed import RACY_NS

_FileStamp = tuple[int, int, int, int, int, int] | int | None


@dataclass(frozen=True)
class Stamp:
    """The stat data of a plan's files at one moment.

    Attributes:
        files: per file (in plan order): (dev, ino, mode, size, mtime_ns, ctime_ns),
            ``None`` when absent, or the errno of a failed ``lstat``.
        racy: some file changed too recently for its stat data to prove anything.
    """

    files: tuple[_FileStamp, ...]
    racy: bool

    def proves_unchanged_since(self, earlier: Stamp | None) -> bool:
        """True when nothing changed between ``earlier`` and this stamp."""
        return earlier is not None and not earlier.racy and not self.racy and self.files == earlier.files


def take(paths: Iterable[str]) -> Stamp:
    """Stamp ``paths`` now (``lstat``: a symlinked HEAD is stamped as the link)."""
    now = time.time_ns()
    files: list[_FileStamp] = []
    racy = False
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError as exc:  # absent: None; else its errno
            files.append(None if exc.errno in (errno.ENOENT, errno.ENOTDIR) else exc.errno or -1)
            continue
        changed = max(st.st_mtime_ns, st.st_ctime_ns)
        racy = racy or now - changed < RACY_NS
        files.append((st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return Stamp(tuple(files), racy)
