"""The handoff lock: the ``flock`` an updater run as ``flock LOCK hermes update`` takes.

``flock(1)`` opens the file (creating it) and takes an exclusive ``flock(2)`` on it; so
do we, from the final re-check of HEAD and markers until the restarted servers are
confirmed, so an updater cannot start in between. The file is opened without following
a symlink.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ...core.errors import LockError

try:  # Unix only; the CLI imports this module everywhere (the daemon refuses to start without)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["HandoffLock"]


class HandoffLock:
    """An exclusive ``flock`` on ``path``, taken without blocking (see :meth:`try_acquire`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        """Take the lock if free; False when another process holds it.

        Raises:
            LockError: the file cannot be opened or created.
        """
        if self._fd is not None:
            return True
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o660)
        except OSError as exc:
            raise LockError(exc.errno, f"cannot open the lock {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as exc:
            os.close(fd)
            raise LockError(exc.errno, f"cannot lock {self.path}: {exc.strerror}") from None
        self._fd = fd
        return True

    def release(self) -> None:
        """Release the lock (harmless when not held)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
