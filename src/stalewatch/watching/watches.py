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
from pathlib import Path

from . import notifier
from .notifier import Listener, Notifier, Registration
from .plan import Plan

Identity = tuple[int, int] | None


def identity_of(path: str) -> Identity:
    """(device, inode) of ``path``, ``None`` when gone or unreadable (no Path object:
    it is called for every anchor and directory on every verification)."""
    try:
        st = os.stat(path)  # noqa: PTH116 - no pathlib: see above
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _names(plan: Plan, path: Path) -> frozenset[bytes]:
    return frozenset(os.fsencode(name) for name in plan.names(path))


class Watches:
    """One checkout's registrations on the process's notifier.

    Args:
        listener: what the notifier calls for events in these directories.
        replan: called when a planned directory vanished before it could be watched
            (git removed it meanwhile): the caller plans again.
        kind: which notifier (``inotify``, ``observer``: see :mod:`.notifier`).

    Attributes:
        instance: the notifier held now (``None`` when not watching).
    """

    def __init__(self, listener: Listener, replan: Callable[[], None], kind: str = "inotify") -> None:
        self._listener = listener
        self._replan = replan
        self._kind = kind
        self._lock = threading.Lock()
        self._closed = False
        self.instance: Notifier | None = None
        # By directory: its registration (None: a narrow directory we may not read) and
        # its identity when watched.
        self._watched: dict[Path, tuple[Registration | None, Identity]] = {}

    def open(self, plan: Plan) -> None:
        """Watch every directory of ``plan`` (after :meth:`close`).

        Raises:
            OSError: no instance (``EMFILE``, ``ENOSYS``), a watch refused (``ENOSPC``,
                ``EACCES`` on a git or ref directory), or closed for good.
        """
        with self._lock:
            if self._closed:
                raise OSError(errno.ESHUTDOWN, "stopping")
            if self.instance is None:
                self.instance = notifier.acquire(self._kind)
            for path in plan.watch:
                self._add(self.instance, plan, path)

    def _add(self, hub: Notifier, plan: Plan, path: Path) -> None:
        # Under _lock.
        ident = identity_of(str(path))  # before the watch: a later swap shows up as a mismatch
        try:
            registration: Registration | None = hub.add(
                path, path in plan.narrow, _names(plan, path), self._listener
            )
        except (FileNotFoundError, NotADirectoryError):
            self._replan()  # git removed it since the plan was made: plan again
            return
        except PermissionError:
            if path not in plan.narrow:
                raise  # a git or ref directory we cannot watch: changes would go unseen
            # A traverse-only parent: the identity check of each verification backs it up.
            registration = None
        self._watched[path] = (registration, ident)

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
            hub = self.instance
            if self._closed or hub is None:
                return False
            # Watches to make anew: a directory deleted or moved away (the kernel
            # dropped or moved its watch) or replaced, even on the same inode.
            stale = {
                path
                for path, (registration, ident) in self._watched.items()
                if (registration is not None and hub.lost(registration))
                or (recheck and identity_of(str(path)) != ident)
                or (path in new.narrow) != (registration is None or registration.narrow)
            }
            if new is old and not stale and self._watched.keys() == new.watch:
                return False  # the common case: nothing moved (and nothing left to watch)
            moved = False
            for path in (self._watched.keys() - new.watch) | stale:
                registration, _ = self._watched.pop(path)
                if registration is not None:
                    hub.remove(registration)
                moved = True
            for path, (registration, _) in self._watched.items():
                names = _names(new, path)
                if registration is not None and names != registration.names:
                    # The reader sorted events with the old names until now: the caller
                    # resolves again, so a write to the new branch is never lost.
                    registration.names = names
                    moved = True
            for path in new.watch - self._watched.keys():
                self._add(hub, new, path)
                moved = True
        return moved

    def lost(self) -> bool:
        """A directory's watch is gone, or the directory at its path is another one."""
        with self._lock:
            hub = self.instance
            return hub is not None and any(
                registration is not None and (hub.lost(registration) or identity_of(str(path)) != ident)
                for path, (registration, ident) in self._watched.items()
            )

    def close(self, *, final: bool = False) -> None:
        """Remove every watch and let go of the instance; ``final``: for good."""
        with self._lock:
            self._closed = self._closed or final
            hub, watched = self.instance, self._watched
            self.instance, self._watched = None, {}
        if hub is None:
            return
        for registration, _ in watched.values():
            if registration is not None:
                hub.remove(registration, later=True)  # the reader unwatches them in batches
        hub.release()

    def count(self) -> int:
        """Directories watched natively now."""
        with self._lock:
            return sum(registration is not None for registration, _ in self._watched.values())
