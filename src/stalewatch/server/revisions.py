"""The revisions a checkout ever had, as far as the daemon can tell.

A server registers the revision it loaded; a revision the checkout never had is a
lie (or a bug), and must never make the restart machine want a restart (issue 15,
item 5: a bogus 40-hex revision made the daemon restart in a loop). A revision is
known when it is HEAD's now, one the daemon saw HEAD at (its loaded revision, its
events), or one ``logs/HEAD`` names (its newest 256 KiB: where HEAD was before the
daemon started). The reflog is read again only when the file changed, so a client
registering over and over costs a ``stat``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..git.reflog import head_log
from ..git.refs import GitDirs

__all__ = ["MAX_SEEN", "Revisions"]

MAX_SEEN = 4096
"""Revisions remembered from what the daemon saw (the oldest forgotten first)."""


class Revisions:
    """The known revisions of one checkout; thread-safe.

    Args:
        dirs: the checkout's git directories (``None``: untracked, only what was seen).
    """

    def __init__(self, dirs: GitDirs | None) -> None:
        self._dirs = dirs
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._logged: frozenset[str] = frozenset()
        self._stamp: tuple[int, int, int, int] | None = None

    def saw(self, *revisions: str | None) -> None:
        """The daemon saw HEAD at these (its loaded revision, an event's current one)."""
        with self._lock:
            for revision in filter(None, revisions):
                self._seen[revision] = None
                self._seen.move_to_end(revision)
                while len(self._seen) > MAX_SEEN:
                    self._seen.popitem(last=False)

    def knows(self, revision: str) -> bool:
        """Whether the checkout had ``revision`` (seen, or in ``logs/HEAD``)."""
        with self._lock:
            if revision in self._seen or revision in self._logged:
                return True
            if (dirs := self._dirs) is None:
                return False
            try:
                info = dirs.store.reflogs(dirs)[0].stat()
            except (IndexError, OSError):  # no reflog (reftable), or none yet
                return False
            stamp = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            if stamp == self._stamp:
                return False
            entries, _ = head_log(dirs)
            self._logged = frozenset(e.old for e in entries) | frozenset(e.new for e in entries)
            self._stamp = stamp
            return revision in self._logged
