"""The daemon's listening socket: bound safely, one daemon per path, removed only if ours.

No path the daemon creates or removes is ever followed as a link: the lock beside the
socket is opened with ``O_NOFOLLOW`` and must be a regular file, a stale socket is
removed only if it still is the socket probed, and the socket gets its mode from the
umask at ``bind`` (a ``chmod`` afterwards would follow a symlink swapped in meanwhile).

The lock file is removed by the daemon that holds it, on its way out (:func:`release`),
so none is left behind. That is safe because a daemon that takes the lock checks, once
it holds it, that the path still names the file it locked: one that opened the file
just before its owner removed it would otherwise hold a lock nobody else can see.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
from pathlib import Path

from ..core.errors import SocketPathError

logger = logging.getLogger(__name__)

_MAX_UNIX_PATH = 107  # sun_path holds 108 bytes including the terminating NUL


def listen(path: Path) -> tuple[socket.socket, int]:
    """Bind and listen on ``path`` (mode 0660), replacing a stale socket from a crash.

    Holds an exclusive ``flock`` on ``<path>.lock`` for the daemon's lifetime, so two
    daemons starting at once cannot both decide the socket is stale. Returns the
    listening socket and the lock's file descriptor.

    Raises:
        SocketPathError: the path is too long, its directory is missing, it is not a
            socket, a live daemon is listening on it, or the lock is not a regular file.
    """
    if len(os.fsencode(path)) > _MAX_UNIX_PATH:
        raise SocketPathError(path, f"too long for a Unix socket (more than {_MAX_UNIX_PATH} bytes)")
    if not path.parent.is_dir():
        raise SocketPathError(path, f"directory {path.parent} does not exist")
    lock = _take_lock(path)
    try:
        _remove_stale(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # The mode comes from the umask at bind, never from a chmod of the path.
        old_umask = os.umask(0o117)
        try:
            sock.bind(os.fspath(path))
        except OSError as exc:
            sock.close()
            raise SocketPathError(path, f"cannot bind: {exc.strerror or exc}") from None
        finally:
            os.umask(old_umask)
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        release(path, lock)
        raise
    return sock, lock


def _take_lock(path: Path) -> int:
    import fcntl  # noqa: PLC0415 - Unix only, and the CLI imports this module everywhere

    lock_path = Path(f"{path}.lock")
    for _ in range(8):  # each retry means another daemon removed the file as we opened it
        lock = _open_lock(lock_path)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
            raise SocketPathError(path, "another stalewatch daemon is running on this socket") from None
        if _names(lock_path, lock):
            return lock
        os.close(lock)  # its owner removed it on the way out: lock the file the path names now
    raise SocketPathError(lock_path, "the lock file keeps being replaced; is something removing it?")


def _names(lock_path: Path, lock: int) -> bool:
    """Whether ``lock_path`` (not followed) still is the file open as ``lock``."""
    try:
        return os.path.samestat(lock_path.lstat(), os.fstat(lock))
    except FileNotFoundError:
        return False


def release(path: Path, lock: int) -> None:
    """Remove ``<path>.lock`` if it still is the file we hold, then let the lock go.

    Removed while still held, so a daemon starting now either waits out our lock and
    finds the path gone (it then locks a new file), or opens the new file itself.
    """
    lock_path = Path(f"{path}.lock")
    with contextlib.suppress(OSError):
        if _names(lock_path, lock):
            lock_path.unlink()
    os.close(lock)


def _open_lock(lock_path: Path) -> int:
    # O_NOFOLLOW: a planted symlink must not make us create or lock a file elsewhere;
    # O_NONBLOCK: a planted FIFO must not hang us (refused below as not a regular file).
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        lock = os.open(lock_path, flags, 0o660)
    except OSError as exc:
        reason = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise SocketPathError(lock_path, f"cannot open the lock file: {reason}") from None
    if not stat.S_ISREG(os.fstat(lock).st_mode):
        os.close(lock)
        raise SocketPathError(lock_path, "the lock file is not a regular file")
    return lock


def _remove_stale(path: Path) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise SocketPathError(path, "exists and is not a socket; refusing to replace it")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(os.fspath(path))
        except ConnectionRefusedError:
            logger.info("stalewatch: replacing the stale socket %s (its daemon is gone)", path)
            unlink_if_same(path, info)
            return
        except OSError as exc:
            raise SocketPathError(path, f"exists and cannot be probed: {exc.strerror or exc}") from None
    raise SocketPathError(path, "a daemon is already listening on it")


def unlink_if_same(path: Path, seen: os.stat_result) -> None:
    """Unlink ``path`` only if it still is the file ``seen``, never a successor's (or a
    link) that replaced it meanwhile (lstat: links are not followed)."""
    with contextlib.suppress(OSError):
        if os.path.samestat(path.lstat(), seen):
            path.unlink()  # unlink removes a link itself, never its target


unlink_if_ours = unlink_if_same  # the daemon's own socket, on its way out
