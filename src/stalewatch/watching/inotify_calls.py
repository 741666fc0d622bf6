"""libc's three inotify calls, through ctypes, and the kernel's constants (Linux only).

What :mod:`.inotify` is built on; ``AVAILABLE`` is False elsewhere, or with a libc
without inotify, and the watchers use another notifier (:mod:`.notifier`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

# The kernel's ABI (linux/inotify.h), unchanged since Linux 2.6.13.
IN_ATTRIB, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO = 0x4, 0x8, 0x40, 0x80
IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800
IN_UNMOUNT, IN_Q_OVERFLOW, IN_IGNORED = 0x2000, 0x4000, 0x8000
IN_ONLYDIR, IN_DONT_FOLLOW, IN_MASK_ADD = 0x01000000, 0x02000000, 0x20000000


def _libc() -> ctypes.CDLL | None:
    """The process's libc, if it has inotify (Linux); else ``None``: watchers poll."""
    if not sys.platform.startswith("linux"):
        return None  # pragma: no cover - not Linux
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):  # pragma: no cover - a libc without inotify
        return None
    return libc


_LIBC = _libc()
AVAILABLE = _LIBC is not None


def _c() -> ctypes.CDLL:
    if _LIBC is None:  # pragma: no cover - not Linux: acquire() refuses first
        raise OSError(errno.ENOSYS, "inotify is not available on this platform")
    return _LIBC


def inotify_init() -> int:
    """A new instance, closed on exec (hooks never inherit it); -1 and errno on failure."""
    return int(_c().inotify_init1(os.O_CLOEXEC))  # IN_CLOEXEC is O_CLOEXEC


def inotify_add_watch(fd: int, path: bytes, mask: int) -> int:
    """The watch descriptor; -1 and errno on failure."""
    return int(_c().inotify_add_watch(fd, path, mask))


def inotify_rm_watch(fd: int, wd: int) -> int:
    """0; -1 and errno (``EINVAL``: the kernel dropped it already)."""
    return int(_c().inotify_rm_watch(fd, wd))
