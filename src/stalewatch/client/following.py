"""Following a daemon: every line it sends, across its restarts (``stalewatch events``).

A :class:`Follower` reconnects with :class:`Backoff` after the first connection; a
signal handler may stop it at any moment (:meth:`Follower.stop` sets a flag, shuts
the connection down and wakes a backoff wait: nothing that takes a lock).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core.errors import DaemonUnavailableError
from ..core.signals import Wakeup
from ..protocol.messages import HELLO_TIMEOUT
from .connection import connect, messages, shut_down

FIRST_BACKOFF = 0.05
MAX_BACKOFF = 2.0


class Backoff:
    """Exponential waits between reconnection attempts: 0.05 s, doubling up to ``limit``.

    Example::

        backoff = Backoff(2.0)
        while not stop.is_set():
            ...                    # try; on success: backoff.reset()
            if backoff.wait(stop):
                break              # stopped while waiting
    """

    def __init__(self, limit: float = MAX_BACKOFF) -> None:
        self.limit = limit
        self.delay = FIRST_BACKOFF

    def reset(self) -> None:
        self.delay = FIRST_BACKOFF

    def wait(self, stop: threading.Event | Wakeup) -> bool:
        """Wait the current delay (True if ``stop`` was set meanwhile), then double it."""
        stopped = stop.wait(self.delay)
        self.delay = min(self.delay * 2, self.limit)
        return stopped


class Follower:
    """Every message a daemon sends, across its restarts, until :meth:`stop`.

    Args:
        path: the daemon's socket.
        on_lost: called once with the error when a connection that was up is lost.
        on_back: called when it is back (a fresh ``hello`` and snapshots follow).
    """

    def __init__(
        self,
        path: Path,
        *,
        on_lost: Callable[[DaemonUnavailableError], object],
        on_back: Callable[[], object],
    ) -> None:
        self.path = path
        self._on_lost = on_lost
        self._on_back = on_back
        self._backoff = Backoff()
        self._stop = Wakeup()
        self._sock: socket.socket | None = None

    def stop(self) -> None:
        """Stop following (signal-safe): the loop ends at once, without reporting a loss."""
        self._stop.set()
        shut_down(self._sock)

    def close(self) -> None:
        """Release the wake-up sockets (after the loop ended)."""
        self._stop.close()

    def messages(self) -> Iterator[dict[str, Any]]:
        """Every message (``hello`` first on each connection) until stopped.

        The first connection must succeed. After that a lost connection calls
        ``on_lost(error)`` once and is retried with :class:`Backoff` until it is back
        (``on_back()``) or the follower is stopped.

        Raises:
            DaemonUnavailableError: the first connection failed.
        """
        lost = connected = False
        while not self._stop.is_set:
            try:
                with connect(self.path, HELLO_TIMEOUT) as self._sock:  # stop() shuts it down
                    for message in () if self._stop.is_set else messages(self._sock, self.path):
                        if lost:
                            self._on_back()
                        lost = False
                        connected = True
                        self._backoff.reset()
                        yield message
            except DaemonUnavailableError as exc:
                if not connected:
                    raise  # the daemon is not there at all
                if self._stop.is_set:
                    return
                if not lost:
                    self._on_lost(exc)
                lost = True
            # A connection ends without an error only once stopped: the wait returns at once.
            if self._backoff.wait(self._stop):
                return
