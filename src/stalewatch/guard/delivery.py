"""Delivering a guard's events (and restart notices) to its subscribers: each once, in order.

The guard appends events under its own lock, in generation order, and then calls
:meth:`Subscribers.drain` outside it. Whoever holds the delivery lock delivers
everything pending; a thread that finds it taken leaves its events to the holder, who
looks at the queue again after releasing. So events go out in the order they were
made, one subscriber call at a time, and a subscriber that calls back into the guard
(``check(strict=True)`` from a callback) cannot deadlock.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

logger = logging.getLogger(__name__)


class Subscribers(Generic[T]):
    """A guard's subscriber callbacks and the items (events) waiting for them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: deque[T] = deque()
        self._callbacks: dict[int, Callable[[T], object]] = {}
        self._ids = itertools.count()

    def add(self, callback: Callable[[T], object]) -> Callable[[], None]:
        """Register ``callback``; return the function that unregisters it (harmless twice)."""
        key = next(self._ids)
        self._callbacks[key] = callback

        def remove() -> None:
            self._callbacks.pop(key, None)

        return remove

    def push(self, item: T) -> None:
        """Queue ``item`` (called under the guard's lock, so in generation order)."""
        self._pending.append(item)

    def drain(self) -> None:
        """Deliver every queued event, unless another thread is delivering already."""
        while self._pending:
            if not self._lock.acquire(blocking=False):
                return  # the holder re-checks the queue after releasing
            try:
                while self._pending:
                    item = self._pending.popleft()
                    for key, callback in list(self._callbacks.items()):
                        if key not in self._callbacks:
                            continue  # unsubscribed while this item was being delivered
                        try:
                            callback(item)
                        except Exception:
                            logger.exception("stalewatch: subscriber %r failed", callback)
            finally:
                self._lock.release()

    def after_fork(self) -> None:
        """In a forked child: the delivering thread is gone, and maybe with it the lock."""
        self._lock = threading.Lock()
