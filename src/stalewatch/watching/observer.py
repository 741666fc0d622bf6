"""watchdog's public ``Observer`` as a notifier: the native backend outside Linux.

``watchdog.observers.Observer`` is FSEvents on macOS, kqueue on the BSDs,
ReadDirectoryChangesW on Windows, and inotify on Linux (which is how the code other
platforms run is tested here: ``STALEWATCH_NOTIFIER=observer``). One observer per
process (:func:`acquire`, :meth:`ObserverNotifier.release`), one scheduled watch per
directory however many watchers register it, and one handler per watch that matches
each event's name against the registrations, as :mod:`.inotify` does.

What the backends cannot do, and who covers it:

- a lost event is silent (FSEvents' ``MustScanSubDirs``/``UserDropped`` flags are not
  acted on, watchdog issue #124; a ReadDirectoryChangesW buffer overflow returns zero
  bytes, which reads as no event, #1019): :meth:`~.notifier.Listener.on_overflow` is
  never called, and the watcher's periodic verification (stat stamps of the plan's files, HEAD read every
  few rounds) catches the change within its verify interval;
- a backend thread that dies says nothing: :meth:`ObserverNotifier.lost` asks whether
  the observer and the watch's emitter still run, on every verification;
- FSEvents watches recursively: events from subdirectories are dropped here.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from ..core.shared import Shared
from .notifier import Listener, Registration

logger = logging.getLogger(__name__)

# Narrow directories (the worktree and its parent): entries created, deleted, renamed;
# never content writes, so an app's log beside the checkout never wakes the backend.
_NARROW: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]
# Git and ref directories: also a file rewritten in place (modified on macOS and
# Windows; closed after writing on Linux).
_WIDE = [*_NARROW, FileModifiedEvent, FileClosedEvent]
_TIMEOUT = 0.1  # an emitter's read timeout: how long unscheduling waits for it to stop


def native() -> bool:
    """Whether watchdog has a native backend here (not its polling observer)."""
    return Observer is not PollingObserver


class _Directory(FileSystemEventHandler):
    """One scheduled watch, the registrations on it, and watchdog's handler for it."""

    def __init__(self, observer: BaseObserver, path: Path, narrow: bool) -> None:
        self.key = (path, narrow)
        # FSEvents reports resolved paths (/private/var for /var): either one matches.
        self._prefixes = {str(path), os.path.realpath(path)}
        self.registrations: dict[Registration, None] = {}
        self.gone = False
        self.watch = observer.schedule(
            self, str(path), recursive=False, event_filter=_NARROW if narrow else _WIDE
        )
        self.emitter = next((e for e in list(observer.emitters) if e.watch == self.watch), None)
        if self.emitter is not None:
            self.emitter.name = "stalewatch-observer-emitter"

    def dispatch(self, event: FileSystemEvent) -> None:
        """On the observer's thread; must never raise (that would end the thread)."""
        try:
            source = os.fsdecode(event.src_path)
            if source in self._prefixes and event.event_type in ("deleted", "moved"):
                self.gone = True  # the directory itself: the backend's watch is over
                for registration in tuple(self.registrations):
                    registration.alive = False
                    registration.listener.on_event(registration, b"", True)
                return
            for path in (source, os.fsdecode(event.dest_path)) if event.dest_path else (source,):
                parent, name = os.path.split(path)
                if parent not in self._prefixes:
                    continue  # a subdirectory's (FSEvents is recursive)
                raw = os.fsencode(name)
                for registration in tuple(self.registrations):  # copied whole under the GIL
                    if raw in registration.names:
                        registration.listener.on_event(registration, raw, event.event_type == "deleted")
        except Exception:
            logger.exception("stalewatch: error handling an event in %s", self.key[0])

    @property
    def over(self) -> bool:
        """The directory went away, or its emitter thread ran and ended."""
        emitter = self.emitter
        return self.gone or (emitter is not None and emitter.ident is not None and not emitter.is_alive())


class ObserverNotifier:
    """The process's watchdog observer: a :class:`~.notifier.Notifier`. Use :func:`acquire`.

    Its lock is never taken on the observer's thread (handlers read their directory's
    registrations copied whole), so scheduling under it cannot deadlock with a dispatch.
    """

    def __init__(self) -> None:
        if not native():  # watchdog's own polling is no notification: our watchers poll
            raise OSError(errno.ENOSYS, "watchdog has no native observer on this platform")
        self._observer = Observer(timeout=_TIMEOUT)
        self._observer.name = "stalewatch-observer"
        self._lock = threading.Lock()
        self._directories: dict[tuple[Path, bool], _Directory] = {}
        self._closed = False
        self._observer.start()

    def add(self, path: Path, narrow: bool, names: frozenset[bytes], listener: Listener) -> Registration:
        """Watch directory ``path`` for ``listener`` (see :meth:`.notifier.Notifier.add`)."""
        # Checked here: some backends fail only later, on their own thread.
        code = 0 if path.is_dir() else errno.ENOTDIR if path.exists() else errno.ENOENT
        code = code or (0 if os.access(path, os.R_OK | os.X_OK) else errno.EACCES)
        if code:
            raise OSError(code, os.strerror(code), str(path))
        registration = Registration(path, narrow, names, listener)
        with self._lock:
            if self._closed or not self._observer.is_alive():
                raise OSError(errno.EBADF, "watchdog observer closed")
            directory = self._directories.get((path, narrow))
            if directory is None or directory.over:  # its registrations are told, or see lost()
                if directory is not None:
                    self._unschedule(directory)
                directory = self._directories[path, narrow] = _Directory(self._observer, path, narrow)
            directory.registrations[registration] = None
        return registration

    def remove(self, registration: Registration, *, later: bool = False) -> None:
        """Stop delivering to ``registration``; the last one unschedules its directory."""
        with self._lock:
            registration.alive = False
            directory = self._directories.get((registration.path, registration.narrow))
            if directory is None or directory.registrations.pop(registration, 0) is not None:
                return  # not registered here (any more)
            if not directory.registrations and not self._closed:
                self._unschedule(directory)

    def lost(self, registration: Registration) -> bool:
        """Removed, its directory gone, or the observer or its emitter thread dead."""
        directory = self._directories.get((registration.path, registration.narrow))
        return (
            not registration.alive
            or directory is None
            or registration not in directory.registrations  # its watch was replaced
            or directory.over
            or not self._observer.is_alive()
        )

    def watch_count(self) -> int:
        """Directories scheduled now."""
        with self._lock:
            return len(self._directories)

    def release(self) -> None:
        """A watcher is done with this observer; the last one stops it."""
        if _shared.release(self):
            self.close()

    def close(self) -> None:
        """Stop the observer and every emitter (joined within a second)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._directories.clear()
        self._observer.stop()
        if self._observer is not threading.current_thread():
            self._observer.join(timeout=1.0)

    def forget_after_fork(self) -> None:
        """In a forked child: the threads are the parent's; touch nothing."""
        self._closed = True

    def _unschedule(self, directory: _Directory) -> None:
        # Under _lock. KeyError: the emitter stopped itself and the observer forgot it.
        self._directories.pop(directory.key, None)
        with contextlib.suppress(KeyError):
            self._observer.unschedule(directory.watch)


_shared: Shared[ObserverNotifier] = Shared(
    ObserverNotifier,
    usable=lambda notifier: notifier._closed or notifier._observer.is_alive(),
    forget=ObserverNotifier.forget_after_fork,
)


def acquire() -> ObserverNotifier:
    """The process's observer (started now if there is none, or it died); count a user."""
    return _shared.acquire()
