"""watchdog's observers as stalewatch runs them, and the faults watchdog keeps to itself.

Part of the watcher: with :mod:`.watcher` the only code that imports watchdog.
Here live the observer subclasses that report their own death (C9), the emitter without
watchdog's rename hold, and the log listener that turns watchdog's queue-overflow
warning into a resync of every live watcher.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Protocol

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
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

__all__ = [
    "EVENTS",
    "native_observer",
    "polling_observer",
    "start_lock",
    "stop_observer",
    "track",
    "untrack",
    "warn_if_overflow_log_is_silenced",
]

logger = logging.getLogger("stalewatch.watching.watcher")

# Only writes matter; opened/closed-no-write traffic (watchdog's default mask) would
# wake us for every read of .git. FileClosedEvent is close-after-write: some
# filesystems report a rewrite-in-place only that way.
EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileDeletedEvent,
    FileClosedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]


try:  # Linux only: elsewhere watchdog's native observer is not inotify
    from watchdog.observers.inotify import InotifyEmitter, InotifyObserver
except (ImportError, OSError):  # pragma: no cover - not Linux
    InotifyEmitter = InotifyObserver = None  # type: ignore[assignment,misc]


if InotifyEmitter is not None:

    class _Emitter(InotifyEmitter):
        """watchdog's inotify emitter without its 0.5 s hold on a rename's first half.

        watchdog holds IN_MOVED_FROM up to 0.5 s to pair it with IN_MOVED_TO. When its
        thread takes the first half before the second arrives (a race: 11 of 5,000 ref
        updates here), it sleeps the whole 0.5 s, and every later event of the directory
        waits behind it. Pairing is of no use to us (either half wakes the worker), so
        the hold is zero. ``tests/test_watcher.py`` checks this still takes effect.
        """

        def on_thread_start(self) -> None:
            super().on_thread_start()
            try:
                self._inotify._move_event_grouper._queue.delay = 0  # type: ignore[union-attr]
            except AttributeError:  # another watchdog: keep its behaviour
                logger.debug("stalewatch: cannot remove watchdog's rename hold", exc_info=True)


class _Native(Observer):  # type: ignore[misc,valid-type]
    """The platform observer, reporting its own unexpected death at once (C9)."""

    on_exit: Callable[[], None] | None = None

    def __init__(self) -> None:
        super().__init__()
        if InotifyObserver is not None and isinstance(self, InotifyObserver):
            self._emitter_class = _Emitter

    def run(self) -> None:
        try:
            super().run()
        finally:
            _report_exit(self)


class _Polling(PollingObserver):
    on_exit: Callable[[], None] | None = None

    def run(self) -> None:
        try:
            super().run()
        finally:
            _report_exit(self)


def _report_exit(observer: _Native | _Polling) -> None:
    # should_keep_running() is still True only when the thread ended without stop():
    # watchdog lets an exception kill its dispatch thread silently.
    if observer.on_exit is not None and observer.should_keep_running():
        observer.on_exit()


def native_observer() -> BaseObserver:
    return _Native()


def polling_observer(interval: float) -> BaseObserver:
    return _Polling(timeout=interval)


def stop_observer(observer: BaseObserver) -> None:
    observer.on_exit = None  # type: ignore[attr-defined]
    observer.stop()
    if observer is not threading.current_thread():
        observer.join(timeout=2.0)


class _Overflowable(Protocol):
    def queue_overflowed(self) -> None: ...


# watchdog logs an inotify queue overflow and moves on without telling handlers;
# events were lost, so every live watcher must distrust its flag and re-resolve.
_live: set[_Overflowable] = set()
_live_lock = threading.Lock()
start_lock = threading.Lock()


_OVERFLOW_LOGGERS = ("watchdog.observers.inotify_c", "watchdog.observers.inotify")


def track(watcher: _Overflowable) -> None:
    """Tell ``watcher`` about every inotify queue overflow until :func:`untrack`."""
    with _live_lock:
        _live.add(watcher)


def untrack(watcher: _Overflowable) -> None:
    with _live_lock:
        _live.discard(watcher)


def warn_if_overflow_log_is_silenced() -> None:
    # The level check happens before any handler runs: a watchdog logger quieted below
    # WARNING hides overflows from us, leaving only the periodic re-verification.
    if not all(logging.getLogger(name).isEnabledFor(logging.WARNING) for name in _OVERFLOW_LOGGERS):
        logger.warning(
            "stalewatch: watchdog's warnings are silenced, so inotify queue overflows go "
            "unnoticed; lost updates are caught only by the periodic re-verification"
        )


class _OverflowListener(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in str(record.msg).lower():
            with _live_lock:
                watchers = list(_live)
            for watcher in watchers:
                watcher.queue_overflowed()


_overflow_listener = _OverflowListener(level=logging.WARNING)
for _name in _OVERFLOW_LOGGERS:
    logging.getLogger(_name).addHandler(_overflow_listener)


def _forget_in_child() -> None:
    # The parent's watchers have no threads in a forked child (C9: guards restart).
    global _live_lock, start_lock  # noqa: PLW0603 - the old locks may be held by a thread that is gone
    _live_lock = threading.Lock()
    start_lock = threading.Lock()
    _live.clear()


os.register_at_fork(after_in_child=_forget_in_child)
