"""The notifier interface: what tells a watcher that something changed in a directory.

A watcher registers each directory of its plan for the names in it that matter, and
hears back "something changed at one of those names" (:meth:`Listener.on_event`), "the
directory itself went away" (the same call with an empty name), and, from a notifier
that can tell, "events were lost" (:meth:`Listener.on_overflow`) or "this notifier is
dead" (:meth:`Listener.on_reader_died`). Every implementation is one file:

- ``inotify`` (:mod:`.inotify`): Linux; the process's one inotify instance and reader
  thread, however many checkouts; reports overflow and its own death.
- ``observer`` (:mod:`.observer`): watchdog's public ``Observer`` (FSEvents on macOS,
  kqueue on the BSDs, ReadDirectoryChangesW on Windows; inotify on Linux, so the code
  other platforms run is tested here). Those backends drop events *silently*
  (FSEvents' ``MustScanSubDirs``, Windows' buffer overflow): the watcher's periodic
  verification is what catches such a drop, within its verify interval.
- ``polling``: no notifier; the watcher stats its files every poll interval
  (:mod:`.watcher`, which is also where a watcher goes when a notifier is refused).

Which one runs: ``STALEWATCH_NOTIFIER`` (:func:`stalewatch.core.settings.notifier`),
else :func:`platform_default`.
"""

from __future__ import annotations

import errno
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class Listener(Protocol):
    """What a watcher gives a notifier: called on the notifier's thread, must not block."""

    def on_event(self, registration: Registration, name: bytes, deleted: bool) -> None:
        """Something happened at ``name`` in the registered directory (``deleted``: it is
        gone); ``name`` is empty for the directory itself (deleted, moved away)."""

    def on_overflow(self) -> None:
        """The notifier lost events: resync."""

    def on_reader_died(self) -> None:
        """The notifier is dead: watch anew (on a fresh one)."""


@dataclass(eq=False)
class Registration:
    """One listener's watch of one directory.

    Attributes:
        path: the directory, as the listener named it.
        narrow: only entries created, deleted or renamed matter (no content writes).
        names: the names in the directory that matter to it (its listener may change
            them); events for others are dropped on the notifier's thread.
        alive: False once removed, or once the directory went away: watch anew.
    """

    path: Path
    narrow: bool
    names: frozenset[bytes]
    listener: Listener
    alive: bool = True


class Notifier(Protocol):
    """A process-wide notifier, shared by its watchers (:func:`acquire`, :meth:`release`).

    One that cannot tell when it lost events never calls :meth:`Listener.on_overflow`:
    only the watchers' periodic verification catches what it lost.
    """

    def add(self, path: Path, narrow: bool, names: frozenset[bytes], listener: Listener) -> Registration:
        """Watch directory ``path`` (non-recursively) for ``listener``.

        Raises:
            OSError: a limit (``ENOSPC``, ``EMFILE``), ``EACCES``, ``ENOENT``,
                ``ENOTDIR``, or ``EBADF`` once closed or dead.
        """

    def remove(self, registration: Registration, *, later: bool = False) -> None:
        """Stop delivering to ``registration`` (``later``: the system's watch may go in a batch)."""

    def lost(self, registration: Registration) -> bool:
        """Whether ``registration`` no longer watches its directory (gone, or its thread died)."""

    def release(self) -> None:
        """A watcher is done with this notifier; the last one closes it."""


def platform_default() -> str:
    """The notifier this platform gets: ``inotify`` on Linux, else watchdog's observer
    where it has a native backend, else ``polling``."""
    from . import inotify_calls  # noqa: PLC0415 - tells whether libc has inotify

    if inotify_calls.AVAILABLE:
        return "inotify"
    if sys.platform.startswith("linux"):
        return "polling"  # no inotify in this libc: watchdog would poll too
    from .observer import native  # noqa: PLC0415

    return "observer" if native() else "polling"


def acquire(kind: str) -> Notifier:
    """The process's notifier of ``kind`` (opened if there is none); count a user.

    Raises:
        OSError: ``ENOSYS`` for ``polling`` (or a kind unavailable here), else what
            opening it raised (``EMFILE``: the instance limit).
    """
    if kind not in ("inotify", "observer"):  # each a module of this package, imported when asked for
        raise OSError(errno.ENOSYS, f"no change notifier ({kind})")
    notifier: Notifier = importlib.import_module(f".{kind}", __package__).acquire()
    return notifier
