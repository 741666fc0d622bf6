"""Writing a file the way its readers need it: whole or not at all, never through a link."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> tuple[int, int]:
    """Replace ``path`` with ``data`` atomically, with ``mode``; return the new file's
    (device, inode). Nothing is written through a symlink, and a reader sees the old
    file or the new one, whole; the rename survives a crash (both fsynced).

    Raises:
        OSError: the directory cannot be opened or written, the rename failed (the
            target is a directory...). No temporary file is left behind.
    """
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        temp = f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"  # never *.prom: not collected
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, flags, 0o600, dir_fd=directory)
        try:
            with open(fd, "wb") as file:  # closes fd, whatever happens
                file.write(data)  # a buffered write writes it all
                file.flush()
                os.fchmod(fd, mode)  # on the descriptor: no path to follow
                os.fsync(fd)
                info = os.fstat(fd)
            os.rename(temp, path.name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=directory)
            raise
        os.fsync(directory)  # the rename itself survives a crash
        return info.st_dev, info.st_ino
    finally:
        os.close(directory)
