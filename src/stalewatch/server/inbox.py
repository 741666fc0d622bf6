"""The loop's inbox: how other threads hand the daemon's loop what they learnt.

Watcher threads (a guard's event, a watcher's health), restart threads (a new phase)
and the reload's thread (what it bound) never touch the loop's tables: they post a
typed message (:data:`~.checkout.Posted`, :class:`~.reload_plan.Bound`), and the loop takes
every message there is on its next turn, in the order they were posted.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator

from .checkout import Posted
from .reload_plan import Bound

__all__ = ["Inbox", "Message"]

Message = Posted | Bound
"""What another thread hands the loop."""


class Inbox:
    """Messages for the loop, with one wake-up per batch.

    Args:
        wake: wakes the loop (signal- and thread-safe).
    """

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._queue: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self._poked = False  # a wake-up for the inbox is pending

    def post(self, message: Message) -> None:
        """Hand ``message`` to the loop (any thread): handled on its next turn."""
        # One wake-up per batch: a reload's ten thousand health reports (or a stop's)
        # cost one system call, not one each. The loop clears the flag before it takes
        # the messages (take), so one put after that pokes again.
        self._queue.put(message)
        if not self._poked:
            self._poked = True
            self._wake()

    def take(self) -> Iterator[Message]:
        """Every message posted so far, and those posted meanwhile (the loop's thread)."""
        self._poked = False
        while True:
            try:
                yield self._queue.get_nowait()
            except queue.Empty:
                return
