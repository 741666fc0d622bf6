"""One instance per process, shared by its users: made by the first, closed after the last.

The process's inotify instance (and its reader thread) and its worker threads each
serve every watcher of the process. A :class:`Shared` makes the instance when a first
user acquires it, counts the users of each instance, and hands the instance back to
the caller to close when its last user releases it. A forked child starts with none:
the parent's instance and its threads are the parent's (see :mod:`.forking`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from . import forking

T = TypeVar("T")


class Shared(Generic[T]):
    """The process's one ``T``, reference-counted.

    Args:
        make: builds a new instance (may raise: nothing is counted then).
        usable: whether the current instance may still be handed out (an inotify
            instance whose reader died may not); default: always.
        forget: called on the current instance in a forked child, where it belongs to
            the parent (close the child's copies of its descriptors, nothing more).
    """

    def __init__(
        self,
        make: Callable[[], T],
        *,
        usable: Callable[[T], bool] | None = None,
        forget: Callable[[T], None] | None = None,
    ) -> None:
        self._make = make
        self._usable = usable
        self._forget = forget
        self._lock = threading.Lock()
        self.current: T | None = None  # the instance handed out now, if any (tests and benches)
        self._users: dict[int, int] = {}  # id(instance) -> users: an old instance is counted too
        forking.in_child(self._after_fork_in_child)

    def acquire(self) -> T:
        """The current instance (made now if there is none, or it is not usable); one more user.

        Raises:
            Exception: whatever ``make`` raises.
        """
        with self._lock:
            current = self.current
            if current is None or (self._usable is not None and not self._usable(current)):
                current = self.current = self._make()
            self._users[id(current)] = self._users.get(id(current), 0) + 1
            return current

    def release(self, instance: T) -> bool:
        """One user is done with ``instance``; True when it was the last: the caller closes it.

        The last user's instance is no longer handed out: the next :meth:`acquire` makes
        a new one even while the caller is still closing this one.
        """
        with self._lock:
            left = self._users.get(id(instance), 0) - 1
            if left > 0:
                self._users[id(instance)] = left
                return False
            self._users.pop(id(instance), None)
            if self.current is instance:
                self.current = None
            return True

    def users(self, instance: T) -> int:
        """How many users hold ``instance`` now."""
        with self._lock:
            return self._users.get(id(instance), 0)

    def _after_fork_in_child(self) -> None:
        # The lock may have been held by a parent's thread that is gone.
        self._lock = threading.Lock()
        current, self.current = self.current, None
        self._users.clear()
        if current is not None and self._forget is not None:
            self._forget(current)
