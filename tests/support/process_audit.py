"""Record every process a block of code starts, through Python's audit hooks (PEP 578).

An audit hook cannot be removed, so one is installed once per test process; it records
only while some :func:`processes` block is open. Every way Python starts a process
raises one of these events, whatever module does it: ``subprocess``, ``os.system``,
``os.exec*``, ``os.spawn*``, ``os.posix_spawn*``, ``os.fork``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

_PREFIXES = (
    "subprocess.Popen",
    "os.exec",
    "os.spawn",
    "os.posix_spawn",
    "os.system",
    "os.fork",
    "os.forkpty",
)
_open: list[list[str]] = []
_installed = False


def _hook(event: str, args: tuple[object, ...]) -> None:
    if _open and event.startswith(_PREFIXES):
        for record in list(_open):
            record.append(event)


@contextmanager
def processes() -> Iterator[list[str]]:
    """Yield a list that receives the name of every process-starting event in the block."""
    global _installed  # noqa: PLW0603
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True
    record: list[str] = []
    _open.append(record)
    try:
        yield record
    finally:
        _open.remove(record)
