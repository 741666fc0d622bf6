"""The daemon's log: one line per message on stderr, with journald's priorities under systemd.

Outside text (a path, a client's line, a hook's output) may hold a newline or an escape
sequence: every message is escaped with :func:`~stalewatch.core.escaping.printable`, so
one message is one line and none can forge another (a traceback stays as it is).
"""

from __future__ import annotations

import logging
import os
import sys
from logging.handlers import SysLogHandler

from ..core.escaping import printable


class _OneLineFormatter(logging.Formatter):
    """Escapes control characters in the message: a path or a client's line holding a
    newline must not forge a log line of its own (a traceback stays as it is)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)


class _JournalFormatter(_OneLineFormatter):
    """journald adds its own timestamps; a ``<N>`` prefix carries the priority (syslog's)."""

    def format(self, record: logging.LogRecord) -> str:
        priority = SysLogHandler.priority_names[SysLogHandler.priority_map.get(record.levelname, "info")]
        return f"<{priority}>{super().format(record)}"


def _journal_attached() -> bool:
    # systemd sets JOURNAL_STREAM to the device:inode of the stream it connected;
    # honour it only when stderr still is that stream (not redirected by a wrapper).
    device, _, inode = os.environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        info = os.fstat(sys.stderr.fileno())
        return (info.st_dev, info.st_ino) == (int(device), int(inode))
    except (ValueError, OSError, AttributeError):
        return False


def install(level: str) -> logging.Handler:
    """Log to stderr at ``level`` (``info``...); returns the handler, for removal at exit."""
    handler = logging.StreamHandler(sys.stderr)
    if _journal_attached():
        handler.setFormatter(_JournalFormatter("%(message)s"))
    else:
        handler.setFormatter(_OneLineFormatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
