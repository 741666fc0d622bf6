"""One inotify instance per process, shared by every watcher in it, and its reader thread.

The kernel allows 128 inotify *instances* per user (``fs.inotify.max_user_instances``),
shared with every program of that user, and each of watchdog's observers opens one and
runs a thread per watched directory. :class:`Inotify` opens one instance for the whole
process and reads it on two threads (``stalewatch-inotify``, ``-2``), waiting on one
epoll where it is registered one-shot, so an event wakes one of them; watchers add and remove watches on
it as their plans change.

Built on libc's three calls (``inotify_init1``, ``inotify_add_watch``,
``inotify_rm_watch``, through ctypes) and the kernel's constants, not on watchdog's
inotify layer: its bookkeeping re-adds a watch with a caller's mask and so *replaces*
the mask another caller set on the same directory, records a refused watch (EACCES)
as if it existed, and removes every watch from the kernel when closed (which, in a
forked child, would strip the parent's); its observer adds an emitter thread per
watched directory and a DEBUG log line per raw event. watchdog is used through its
public observer API only, where there is no inotify (:mod:`.observer`).

Each watched directory is registered with the names in it that matter to its
watcher; the reader matches an event's name against them and calls the watcher only
on a match. Callbacks run on the reader thread and do no I/O of their own (a watcher
sets flags and queues itself for a worker), but a wake-up's turn may run there when no
other runs, once every call of its read is made (:mod:`.here`): it may block in a
subscriber, and the other reader reads meanwhile. The kernel's queue
overflow is reported to every listener, so every checkout resyncs. A reader that dies
ends the other and tells every listener at once; they open a fresh instance.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import select
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..core.shared import Shared
from . import inotify_calls as abi
from .here import one_turn_after
from .inotify_calls import AVAILABLE, inotify_add_watch, inotify_init, inotify_rm_watch
from .notifier import Listener, Registration

logger = logging.getLogger(__name__)

# The worktree and its parent: only the checkout or its .git renamed, replaced, deleted
# or changing permission. No IN_MODIFY/IN_CLOSE_WRITE: writes to files there (an app's
# debug log) never even wake the reader.
ANCHOR_MASK = (
    abi.IN_CREATE
    | abi.IN_DELETE
    | abi.IN_MOVED_FROM
    | abi.IN_MOVED_TO
    | abi.IN_ATTRIB
    | abi.IN_DELETE_SELF
    | abi.IN_MOVE_SELF
    | abi.IN_ONLYDIR
    | abi.IN_DONT_FOLLOW
)
# Git dirs and ref dirs: also a file rewritten in place (reported once, when its writer
# closes it: never a half-written HEAD). No IN_OPEN/IN_CLOSE_NOWRITE/IN_ACCESS, so
# reading .git never feeds the watch.
REF_MASK = ANCHOR_MASK | abi.IN_CLOSE_WRITE
_SELF = abi.IN_DELETE_SELF | abi.IN_MOVE_SELF | abi.IN_IGNORED | abi.IN_UNMOUNT


_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name
_READ_SIZE = 64 * 1024
_UNWATCH_BATCH = 256  # kernel watches removed per hold of the lock (add() waits meanwhile)
_UNWATCH_DELAY_MS = 100  # the longest a watch left for later stays in the kernel
_READERS = 2  # each may run a wake-up's turn (.here), one at a time: another reads meanwhile
_ARMED = select.EPOLLIN | select.EPOLLONESHOT  # the instance, until a reader re-arms it


@dataclass(eq=False)
class _Registration(Registration):
    mask: int = 0  # the events it wants (the kernel's mask for the directory is the union)
    wd: int = -1  # the kernel's watch descriptor (shared by every registration of the inode)


class Inotify:
    """One inotify instance and its reader thread: a :class:`~.notifier.Notifier`.
    Use :func:`acquire` / :meth:`release`.

    Raises:
        OSError: the instance cannot be opened (``EMFILE``: the user's instance limit).
    """

    def __init__(self) -> None:
        fd = inotify_init()
        if fd < 0:
            raise _error("inotify_init")
        self.fd, self.pid, opened = fd, os.getpid(), [fd]
        try:  # out of descriptors half-way: none of ours is left open
            # Closed on exec (hook processes); a forked child closes its copy (see below).
            self._kill_r, self._kill_w = os.pipe()  # non-inheritable by default
            opened += (self._kill_r, self._kill_w)
            # One-shot: an event wakes one idle reader, which reads until none is left and
            # only then (or when it runs a turn, for the other to read meanwhile) re-arms the
            # instance: the events that follow (git's lock file, then its rename) never wake
            # the other reader to contend for the GIL on the update's path.
            os.set_blocking(fd, False)
            os.set_blocking(self._kill_r, False)
            self._epoll = select.epoll()  # an object: closed when dropped
            self._epoll.register(fd, _ARMED)
            self._epoll.register(self._kill_r, select.EPOLLIN | select.EPOLLET)
        except BaseException:
            for number in opened:
                os.close(number)
            raise
        self._lock = threading.Lock()
        # By watch descriptor, the registrations on it in the order they came; a dict: the
        # worktrees' common parent holds one per checkout, and removing one of ten
        # thousand must not walk them all.
        self._watches: dict[int, dict[_Registration, None]] = {}
        self._doomed: list[int] = []  # kernel watches nobody wants, for the reader to remove
        self._fds_open = True  # under _lock: once closed, their numbers may be reused
        self._closing = False
        self.dead = False
        names = ["stalewatch-inotify"] + [f"stalewatch-inotify-{i}" for i in range(2, _READERS + 1)]
        self._readers = [threading.Thread(target=self._run, name=name, daemon=True) for name in names]
        self._running = _READERS  # readers not ended yet (under _lock): the last closes the fds
        self._dispatching: set[threading.Thread] = set()  # readers calling listeners (turns)
        self.thread = self._readers[0]
        for reader in self._readers:
            reader.start()

    # -- watches (any thread) -------------------------------------------------------

    def add(self, path: Path, narrow: bool, names: frozenset[bytes], listener: Listener) -> Registration:
        """Watch directory ``path`` for ``listener``; events named ``names`` reach it.

        Raises:
            OSError: ``ENOSPC`` (the user's watch limit), ``EACCES``, ``ENOENT``,
                ``ENOTDIR``, or ``EBADF`` once this instance is closed or dead.
        """
        mask = ANCHOR_MASK if narrow else REF_MASK
        registration = _Registration(path, narrow, names, listener, mask=mask)
        with self._lock:
            if self._closing:  # closed, or its reader died
                raise OSError(errno.EBADF, "inotify instance closed")
            # IN_MASK_ADD: another registration of the same inode keeps its events.
            wd = inotify_add_watch(self.fd, os.fsencode(path), mask | abi.IN_MASK_ADD)
            if wd < 0:
                raise _error("inotify_add_watch", path)
            registration.wd = wd
            self._watches.setdefault(wd, {})[registration] = None
        return registration

    def remove(self, registration: Registration, *, later: bool = False) -> None:
        """Stop delivering to ``registration``; the last one of a directory unwatches it.

        ``later``: the kernel's watch is removed by the reader thread, in batches,
        within :data:`_UNWATCH_DELAY_MS` (or by closing the instance, if that comes
        first). For watchers that stop by the thousand (a daemon's reload or exit):
        each removal made here would cost the caller a system call and a round of the
        GIL with the reader, which the kernel wakes for every watch removed.
        """
        with self._lock:
            registration.alive = False
            if not isinstance(registration, _Registration):
                return
            wd = registration.wd
            watch = self._watches.get(wd)
            if watch is None or registration not in watch:
                return
            del watch[registration]
            if not watch and not self._closing:
                del self._watches[wd]
                if later:
                    self._doomed.append(wd)
                    if len(self._doomed) in (1, _UNWATCH_BATCH) and self._fds_open:
                        # The first wakes the reader to set its deadline; a full batch,
                        # to remove it now.
                        os.write(self._kill_w, b"r")
                    return
                # EINVAL: the kernel dropped it already (directory deleted); its
                # IN_IGNORED then finds no entry and is skipped.
                inotify_rm_watch(self.fd, wd)

    def _unwatch_doomed(self) -> None:
        """On the reader thread: remove the kernel watches :meth:`remove` left for later."""
        while True:
            with self._lock:  # add() waits meanwhile: a wd it gets back again is not removed
                if not self._doomed or self._closing:
                    return
                batch, self._doomed = self._doomed[:_UNWATCH_BATCH], self._doomed[_UNWATCH_BATCH:]
                for wd in batch:
                    if wd not in self._watches:  # not watched again since (same inode, same wd)
                        inotify_rm_watch(self.fd, wd)

    def lost(self, registration: Registration) -> bool:
        """The kernel dropped the watch, or it was removed (reader death is told at once)."""
        return not registration.alive

    def watch_count(self) -> int:
        """Directories watched now (kernel watches held by this instance)."""
        with self._lock:
            return len(self._watches)

    def release(self) -> None:
        """A watcher is done with this instance; the last one closes it (reader joined)."""
        if _shared.release(self):
            self.close()

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        """Stop the reader (joined within a second) and close the instance."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            if self._fds_open:
                os.write(self._kill_w, b"x")  # wakes a reader, which wakes the next (_finish)
        deadline = time.monotonic() + 1.0
        for reader in self._readers:  # one in a turn (a slow subscriber) ends after it
            if reader is not threading.current_thread() and reader not in self._dispatching:
                reader.join(timeout=max(0.0, deadline - time.monotonic()))

    def forget(self) -> None:
        """Close the descriptors, once: by the last reader to end (under the lock), or in
        a forked child, touching nothing else (the lock may be held by a parent thread
        that is gone: not taken). The child's descriptor refers to the parent's instance:
        removing a watch through it would remove the parent's, and reading it would steal
        its events.
        """
        self._closing = True
        if self._fds_open:
            self._fds_open = False
            for fd in (self.fd, self._kill_r, self._kill_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
            with contextlib.suppress(OSError):
                self._epoll.close()

    # -- the reader thread ----------------------------------------------------------

    def _run(self) -> None:
        me = threading.current_thread()
        try:
            unwatch_by: float | None = None  # when watches left for later must be gone
            while not self._closing:
                # Idle: no timeout. With watches to remove: by their deadline, together
                # (a stop by the thousand wakes a reader once per batch, not per watch).
                timeout = -1.0 if unwatch_by is None else max(0.0, unwatch_by - time.monotonic())
                ready = self._epoll.poll(timeout)
                if self._closing:
                    break
                if self._kill_r in dict(ready):  # watches left for later
                    with contextlib.suppress(BlockingIOError):  # (an event's wake-up: no read)
                        while os.read(self._kill_r, 4096):
                            pass
                if self._doomed:
                    if unwatch_by is None:
                        unwatch_by = time.monotonic() + _UNWATCH_DELAY_MS / 1000
                    if time.monotonic() >= unwatch_by or len(self._doomed) >= _UNWATCH_BATCH:
                        self._unwatch_doomed()
                        unwatch_by = None
                else:
                    unwatch_by = None
                while not self._closing:  # every event, then re-armed
                    try:
                        data = os.read(self.fd, _READ_SIZE)
                    except BlockingIOError:
                        break
                    self._dispatching.add(me)
                    one_turn_after(self._dispatch, data, self._arm)
                    self._dispatching.discard(me)
                self._arm()
        except BaseException:
            logger.exception("stalewatch: the inotify reader failed")
        finally:
            self._finish()

    def _arm(self) -> None:
        """Let the instance wake a reader again (see ``_ARMED``)."""
        try:  # noqa: SIM105 - not contextlib.suppress: an update's path (issue 27)
            self._epoll.modify(self.fd, _ARMED)
        except (OSError, ValueError):  # closed meanwhile
            pass

    def _finish(self) -> None:
        with self._lock:
            died = not self._closing
            self.dead |= died
            self._closing = True
            listeners = self._listeners()
            self._watches.clear()
            self._running -= 1
            if self._fds_open and self._running:
                os.write(self._kill_w, b"x")  # the next reader ends too
            elif not self._running:
                self.forget()
        if died:
            logger.error("stalewatch: the inotify reader thread died; every watcher opens a new instance")
            for listener in listeners:
                _call(listener.on_reader_died)

    def _listeners(self) -> list[Listener]:
        # Under _lock. Each listener once, whatever the number of its directories.
        return list({id(r.listener): r.listener for watch in self._watches.values() for r in watch}.values())

    def _dispatch(self, data: bytes) -> None:
        """Hand each event of one read to the registrations that want it.

        Deliberately silent: no log line per event (a debug log beside a checkout
        would otherwise feed itself).
        """
        calls: list[tuple[Callable[[Registration, bytes, bool], None], Registration, bytes, bool]] = []
        overflow = False
        offset = 0
        with self._lock:
            while offset + _EVENT.size <= len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                if mask & abi.IN_Q_OVERFLOW:
                    overflow = True
                    continue
                watch = self._watches.get(wd)
                if watch is None:
                    continue  # removed meanwhile (its IN_IGNORED, or a late event)
                if mask & _SELF and not name:
                    for registration in watch:
                        calls.append((registration.listener.on_event, registration, b"", True))
                        # Deleted, unmounted or moved away: this registration no longer
                        # watches the directory at its path (a moved one's watch follows
                        # the inode elsewhere until removed).
                        registration.alive = False
                    if mask & abi.IN_IGNORED:  # the kernel dropped the watch
                        del self._watches[wd]
                    continue
                for registration in watch:
                    if registration.mask & mask and name in registration.names:
                        deleted = bool(mask & abi.IN_DELETE)
                        calls.append((registration.listener.on_event, registration, name, deleted))
            listeners = self._listeners() if overflow else []
        for call, target, name, deleted in calls:
            try:
                call(target, name, deleted)
            except Exception:
                logger.exception("stalewatch: error handling an event in %s", target.path)
        if overflow:
            logger.warning("stalewatch: inotify queue overflow: events were lost; every checkout resyncs")
            for listener in listeners:
                _call(listener.on_overflow)


def _call(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        logger.exception("stalewatch: error in %r", callback)


def _error(what: str, path: Path | None = None) -> OSError:
    # The bindings are made with use_errno=True: ctypes keeps the call's errno.
    code = ctypes.get_errno() or errno.EIO
    reason = {errno.ENOSPC: "inotify watch limit reached", errno.EMFILE: "inotify instance limit reached"}
    message = reason.get(code, os.strerror(code))
    return OSError(code, f"{what}: {message}", None if path is None else str(path))


# -- the process's instance --------------------------------------------------------------

_shared: Shared[Inotify] = Shared(Inotify, usable=lambda instance: not instance.dead, forget=Inotify.forget)


def acquire() -> Inotify:
    """The process's instance (opened now if there is none, or it died); count a user.

    Raises:
        OSError: inotify is unavailable here (``ENOSYS``), or the instance limit is
            reached (``EMFILE``).
    """
    if not AVAILABLE:
        raise OSError(errno.ENOSYS, "inotify is not available on this platform")
    return _shared.acquire()
