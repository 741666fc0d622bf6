"""A file the daemon trusts (its configuration): read only when safely owned, checked on the opened file.

The file names commands the daemon runs, so, as sudo and cron do, it is refused when
anyone but its owner may write it or its owner is neither root nor the daemon's user.
Every check is made on the opened file (``fstat``): the file checked is the file read.
A FIFO, a device or a huge file is refused without hanging or reading it whole.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..core.errors import DaemonConfigError

__all__ = ["MAX_CONFIG_BYTES", "check_ownership", "read_checked"]

MAX_CONFIG_BYTES = 1 << 20
"""Largest configuration file read (a real one is a few hundred bytes)."""


def read_checked(file: Path) -> str:
    """The file's text, after checking the opened file: regular, small, safely owned."""
    try:
        # O_NONBLOCK: a FIFO planted at the path must not hang the daemon (or a reload).
        fd = os.open(file, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise _refusal(file, f"cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refusal(file, "cannot read: not a regular file")
        check_ownership(file, info)
        try:
            with open(fd, "rb", closefd=False) as opened:  # buffered: reads on until that much, or the end
                data = opened.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise _refusal(file, f"cannot read: {exc.strerror or exc}") from None
        if len(data) > MAX_CONFIG_BYTES:
            raise _refusal(file, f"cannot read: larger than {MAX_CONFIG_BYTES} bytes")
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refusal(file, f"cannot read: {exc}") from None


def check_ownership(file: Path, info: os.stat_result, euid: int | None = None) -> None:
    """Refuse a file that anyone but its owner may write, or owned by a stranger.

    Its owner must be root or the daemon's user (``euid``; default ours).

    Raises:
        DaemonConfigError: naming the owner or the mode, and what to do.
    """
    euid = os.geteuid() if euid is None else euid
    if info.st_uid not in (0, euid):
        owner = f"owned by uid {info.st_uid}, neither root nor the daemon's user (uid {euid})"
        raise _refusal(file, f"{owner}; it names commands the daemon runs")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        who = "group and others" if mode & 0o022 == 0o022 else "group" if mode & 0o020 else "others"
        reason = f"writable by {who} (mode {mode:04o}); it names commands the daemon runs"
        raise _refusal(file, f"{reason}: chmod go-w {file}")


def _refusal(file: Path, reason: str) -> DaemonConfigError:
    return DaemonConfigError("config", str(file), reason, file=file)
