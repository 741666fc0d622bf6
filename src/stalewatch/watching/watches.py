"""One checkout's watches on the process's notifier: the directories of its plan.

A :class:`Watches` holds the notifier (:func:`.notifier.acquire`) while it watches
anything, and one registration per directory of the current :class:`~.plan.Plan`,
narrow or not (``narrow``: renames and deletions only), with the names in it that
matter. Moving to a new plan re-registers only what changed.
Changed on a worker, closed by ``stop()`` from the caller's thread too: always under
its lock.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import notifier
from .notifier import Listener, Notifier, Registration
from .plan import Plan

__all__ = ["Identity", "Watches", "identity_of"]

Identity = tuple[int, int] | None


def identity_of(path: str) -> Identity:
    """(device, inode) of ``path``, ``None`` when gone or unreadable (no Path object:
    it is called for every anchor and directory on every verification)."""
    try:
        st = os.stat(path)  # noqa: PTH116 - no pathlib: see above
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


@dataclass
class _Watched:
    registration: Registration | None  # None: a narrow directory we may not read
    identity: Identity
    narrow: bool


def _want(plan: Plan, path: Path) -> tuple[bool, frozenset[bytes]]:
    return path in plan.narrow, frozenset(os.fsencode(name) for name in plan.names(path))


class Watches:
    """One checkout's registrations on the process's notifier.

    Args:
        listener: what the notifier calls for events in these directories.
        replan: called when a planned directory vanished before it could be watched
            (git removed it meanwhile): the caller plans again.
        kind: which notifier (``inotify``, ``observer``: see :mod:`.notifier`).
    """

    def __init__(self, listener: Listener, replan: Callable[[], None], kind: str = "inotify") -> None:
        self._listener = listener
        self._replan = replan
        self._kind = kind
        self._lock = threading.Lock()
        self._closed = False
        self._instance: Notifier | None = None
        self._watched: dict[Path, _Watched] = {}

    @property
    def instance(self) -> Notifier | None:
        """The instance held now (``None`` when not watching)."""
        return self._instance

    def open(self, plan: Plan) -> None:
        """Watch every directory of ``plan`` (after :meth:`close`).

        Raises:
            OSError: no instance (``EMFILE``, ``ENOSYS``), a watch refused (``ENOSPC``,
                ``EACCES`` on a git or ref directory), or closed for good.
        """
        with self._lock:
            if self._closed:
                raise OSError(errno.ESHUTDOWN, "stopping")
            if self._instance is None:
                self._instance = notifier.acquire(self._kind)
            for path in plan.watch:
                self._add(self._instance, plan, path)

    def _add(self, hub: Notifier, plan: Plan, path: Path) -> None:
        # Under _lock.
        ident = identity_of(str(path))  # before the watch: a later swap shows up as a mismatch
        narrow, names = _want(plan, path)
        try:
            registration: Registration | None = hub.add(path, narrow, names, self._listener)
        except (FileNotFoundError, NotADirectoryError):
            self._replan()  # git removed it since the plan was made: plan again
            return
        except PermissionError:
            if path not in plan.narrow:
                raise  # a git or ref directory we cannot watch: changes would go unseen
            # A traverse-only parent: the identity check of each verification backs it up.
            registration = None
        self._watched[path] = _Watched(registration, ident, narrow)

    def follow(self, old: Plan, new: Plan, *, recheck: bool = False) -> bool:
        """Move the watches from plan ``old`` to ``new``; True if any changed.

        Args:
            recheck: also compare each directory's identity with the one it had when
                watched (the periodic verification does; a directory deleted or moved
                away reports itself through its registration).

        Raises:
            OSError: a watch could not be added (a limit): the caller falls back.
        """
        with self._lock:
            hub = self._instance
            if self._closed or hub is None:
                return False
            if new is old and not recheck and not self._dead(hub) and self._watched.keys() == new.watch:
                return False  # the common case: nothing moved (and nothing left to watch)
            # Watches to make anew: a directory deleted or moved away (the kernel
            # dropped or moved its watch) or replaced, even on the same inode.
            stale = {
                path
                for path, watched in self._watched.items()
                if (watched.registration is not None and hub.lost(watched.registration))
                or (recheck and identity_of(str(path)) != watched.identity)
                or _want(new, path)[0] != watched.narrow
            }
            moved = False
            for path in (self._watched.keys() - new.watch) | stale:
                watched = self._watched.pop(path)
                if watched.registration is not None:
                    hub.remove(watched.registration)
                moved = True
            for path, watched in self._watched.items():
                names = _want(new, path)[1]
                if watched.registration is not None and names != watched.registration.names:
                    # The reader sorted events with the old names until now: the caller
                    # resolves again, so a write to the new branch is never lost.
                    watched.registration.names = names
                    moved = True
            for path in new.watch - self._watched.keys():
                self._add(hub, new, path)
                moved = True
        return moved

    def _dead(self, hub: Notifier | None) -> bool:
        return hub is not None and any(
            w.registration is not None and hub.lost(w.registration) for w in self._watched.values()
        )

    def lost(self) -> bool:
        """A directory's watch is gone, or the directory at its path is another one."""
        with self._lock:
            return self._dead(self._instance) or any(
                w.registration is not None and identity_of(str(path)) != w.identity
                for path, w in self._watched.items()
            )

    def close(self, *, final: bool = False) -> None:
        """Remove every watch and let go of the instance; ``final``: for good."""
        with self._lock:
            self._closed = self._closed or final
            hub, watched = self._instance, self._watched
            self._instance, self._watched = None, {}
        if hub is None:
            return
        for entry in watched.values():
            if entry.registration is not None:
                hub.remove(entry.registration, later=True)  # the reader unwatches them in batches
        hub.release()

    def count(self) -> int:
        """Directories watched natively now."""
        with self._lock:
            return sum(1 for w in self._watched.values() if w.registration is not None)
