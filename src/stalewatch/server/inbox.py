"""The loop's inbox: how other threads hand the daemon's loop what they learnt.

Watcher threads (a guard's event, a watcher's health), restart threads (a new phase)
and the reload's thread (what it bound) never touch the loop's tables: they post a
typed message (:data:`~.checkout.Posted`, :class:`~.reloader.Bound`), handled in
the order posted.

The loop holds :attr:`Inbox.turn` for all of its turn but its wait. A thread that
posts while the loop waits takes the turn lock itself and handles what is queued
there and then (``handle``: the loop's own code, so its lines reach the clients
without waiting for the loop's thread to wake, issue 27); it never waits for the lock
(the loop may be waiting for that very thread: a watcher's stop). Whoever handles,
the loop is woken after, for what may wait until the lines are out (the journal,
``STATUS=``); a reload's :class:`~.reloader.Bound`, and what follows it, is left
to the loop's thread.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator

from .checkout import Posted
from .reloader import Bound

Message = Posted | Bound
"""What another thread hands the loop."""


class Inbox:
    """Messages for the loop, with one wake-up per batch.

    Args:
        wake: wakes the loop (signal- and thread-safe).
        handle: handles messages on the posting thread, holding :attr:`turn` (they
            come from :meth:`take` with ``posted_only``); ``None``: only the loop does.
    """

    def __init__(self, wake: Callable[[], None], handle: Callable[[], None] | None = None) -> None:
        self._wake = wake
        self._handle = handle
        self._queue: deque[Message] = deque()  # appended by any thread, taken under `turn`
        self._poked = False  # a wake-up for the inbox is pending
        self.turn = threading.Lock()

    def post(self, message: Message) -> None:
        """Hand ``message`` to the loop (any thread): handled now if the loop waits, else
        on its next turn."""
        self._queue.append(message)
        if self._handle is not None and self.turn.acquire(blocking=False):
            try:
                if self._handle is not None:  # not closed meanwhile
                    self._handle()
            finally:
                self.turn.release()
        # One wake-up per batch: a reload's ten thousand health reports (or a stop's)
        # cost one system call, not one each. The loop clears the flag before it takes
        # the messages (take), so one put after that pokes again.
        if not self._poked:
            self._poked = True
            self._wake()

    def take(self, *, posted_only: bool = False) -> Iterator[Message]:
        """Every message posted so far, and those posted meanwhile, under :attr:`turn`;
        ``posted_only``: up to the first :class:`~.reloader.Bound` (the loop's alone)."""
        if not posted_only:
            self._poked = False
        queue = self._queue
        while queue and not (posted_only and isinstance(queue[0], Bound)):
            yield queue.popleft()

    def close(self) -> None:
        """Handle nothing on posting threads from now on (the loop is ending)."""
        with self.turn:
            self._handle = None
