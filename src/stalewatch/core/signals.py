"""Signals, handled one way: a handler sets a flag or wakes a loop; the loop does the work.

Python runs a handler on the main thread between two bytecodes, wherever that thread
is: inside a lock's critical section, half-way through a loop's turn. A handler that
takes a lock the interrupted code holds (``threading.Event.set`` does) deadlocks, and
one that raises tears the interrupted code apart. So every handler installed here only
calls the function it was given, and that function only sets an attribute and wakes
the loop that owns the work: :class:`Wakeup` (a byte on a socket pair, no lock), a
``queue.SimpleQueue.put`` (reentrant by design), or ``socket.shutdown``.
"""

from __future__ import annotations

import contextlib
import functools
import select
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from types import FrameType

_interrupted = False  # a SIGINT reached a handler of handling(): the command line exits 130


def interrupted() -> bool:
    """Whether a SIGINT (Ctrl-C) reached a handler installed by :func:`handling`."""
    return _interrupted


@contextlib.contextmanager
def handling(handlers: Mapping[signal.Signals, Callable[[], object]]) -> Iterator[bool]:
    """For the ``with`` block, each signal calls its function; the previous handlers after.

    Only on the main thread (Python's rule): elsewhere nothing is installed and the
    block gets ``False`` (an embedded daemon is stopped by its owner).

    Example::

        with signals.handling({signal.SIGTERM: wakeup.set, signal.SIGINT: wakeup.set}):
            while not wakeup.is_set:
                ...
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    with contextlib.ExitStack() as previous:  # each handler replaced is put back
        for signum, call in handlers.items():
            previous.callback(signal.signal, signum, signal.signal(signum, functools.partial(_handle, call)))
        yield True


def _handle(call: Callable[[], object], signum: int, frame: FrameType | None) -> None:
    if signum == signal.SIGINT:
        global _interrupted  # noqa: PLW0603 - one flag, set from a handler
        _interrupted = True
    call()


class Wakeup:
    """A flag a signal handler (or any thread) may set, and a socket pair that wakes a waiter.

    :meth:`set` only assigns an attribute and sends a byte: safe in a signal handler,
    whatever the interrupted code holds. A loop waits with :meth:`wait`, or puts
    :meth:`fileno` in its selector and then calls :meth:`drain`. After :meth:`close`
    a late :meth:`poke` from another thread is a no-op.
    """

    def __init__(self) -> None:
        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        self._write.setblocking(False)
        self.is_set = False  # what set() sets: read it, never write it

    def set(self) -> None:
        """Set the flag and wake the waiter (signal-safe; any thread)."""
        self.is_set = True
        self.poke()

    def poke(self) -> None:
        """Wake the waiter without setting the flag (signal-safe; any thread)."""
        with contextlib.suppress(OSError):  # full: a wake-up is pending; closed: shut down
            self._write.send(b"\0")

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until set (or poked), at most ``timeout`` s; return whether it is set."""
        if not self.is_set:
            with contextlib.suppress(OSError, ValueError):  # closed meanwhile
                select.select([self._read], [], [], timeout)
            self.drain()
        return self.is_set

    def fileno(self) -> int:
        """The readable end, readable while a wake-up is pending (for a selector)."""
        return self._read.fileno()

    def drain(self) -> None:
        """Consume pending wake-ups."""
        with contextlib.suppress(OSError):
            while self._read.recv(4096):
                pass

    def close(self) -> None:
        """Close both ends (harmless twice)."""
        self._read.close()
        self._write.close()
