"""A bounded, fork-safe cache: at most ``limit`` entries, reads without a lock.

Used where a read sits on a hot path (a strict check's ``packed-refs`` lookup, the
Hermes accelerator's read) and the answers are keyed by something a process sees few
of (a file, a checkout): a read is one dict lookup, atomic under the GIL; a store takes
the lock and drops the oldest entry stored once the bound is reached. In a forked
child the lock is replaced (a parent's thread may have held it at ``fork()``); the
entries stay valid there.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import Generic, TypeVar

from . import forking

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``limit`` entries; the oldest stored goes first.

    Attributes:
        limit: the most entries kept.
        lock: taken by stores and :meth:`clear` (tests hold it across a fork).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.lock = threading.Lock()
        self._entries: dict[K, V] = {}
        forking.in_child(self._after_fork_in_child)

    def get(self, key: K) -> V | None:
        """The entry for ``key``, or ``None`` (no lock: one dict read)."""
        return self._entries.get(key)

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key`` (as the newest entry), dropping the oldest past the bound."""
        with self.lock:
            self._entries.pop(key, None)
            while len(self._entries) >= self.limit:
                del self._entries[next(iter(self._entries))]  # dicts keep insertion order
            self._entries[key] = value

    def clear(self) -> None:
        """Forget every entry (tests, and a process that wants its memory back)."""
        with self.lock:
            self._entries.clear()

    @property
    def entries(self) -> Mapping[K, V]:
        """A read-only view of the entries, oldest first."""
        return MappingProxyType(self._entries)

    def _after_fork_in_child(self) -> None:
        self.lock = threading.Lock()
