"""The server processes that told the daemon which revision they loaded (R5).

A process whose guard uses the daemon as its source registers on its connection:
``{"type": "register", "checkout": ..., "revision": ..., "inflight": N}``, then says
when its work in flight changes (``{"type": "inflight", ...}``, R8). Its pid is the
connection's peer (``SO_PEERCRED``, ``LOCAL_PEERPID`` on macOS), not what it claims,
and its registration ends with the connection. The socket loop writes; restart
sequences read and wait for a change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

__all__ = ["Process", "Registry"]


@dataclass(frozen=True)
class Process:
    """One registered server process.

    Attributes:
        pid: the peer's pid (0 when the platform cannot tell).
        checkout: the checkout it guards (as the daemon names it).
        revision: the revision it loaded.
        since: ``time.time()`` when it registered.
        connection: the daemon's number for its connection.
        inflight: its work in flight, as it last said (R8).
        registered_at: ``time.monotonic()`` when it registered (for the restart
            sequence, whose clock is monotonic).
    """

    pid: int
    checkout: str
    revision: str
    since: float
    connection: int
    inflight: int = 0
    registered_at: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {"pid": self.pid, "revision": self.revision, "since": self.since, "inflight": self.inflight}


class Registry:
    """Registered processes by connection; thread-safe, with waiting for a change."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._by_connection: dict[int, Process] = {}

    def register(self, connection: int, checkout: str, pid: int, revision: str, inflight: int = 0) -> Process:
        """Record (or replace) the registration made on ``connection``."""
        process = Process(pid, checkout, revision, time.time(), connection, inflight, time.monotonic())
        with self._cond:
            self._by_connection[connection] = process
            self._cond.notify_all()
        return process

    def set_inflight(self, connection: int, inflight: int) -> Process | None:
        """Record a registered process's work in flight; ``None`` when unregistered or unchanged."""
        with self._cond:
            process = self._by_connection.get(connection)
            if process is None or process.inflight == inflight:
                return None
            process = replace(process, inflight=inflight)
            self._by_connection[connection] = process
            self._cond.notify_all()
        return process

    def unregister(self, connection: int) -> Process | None:
        """Forget the registration of a closed connection (harmless when there is none)."""
        with self._cond:
            process = self._by_connection.pop(connection, None)
            if process is not None:
                self._cond.notify_all()
            return process

    def processes(self, checkout: str) -> list[Process]:
        """The processes registered for ``checkout``, oldest first."""
        with self._cond:
            found = [p for p in self._by_connection.values() if p.checkout == checkout]
        return sorted(found, key=lambda p: (p.since, p.connection))

    def wait(
        self,
        checkout: str,
        predicate: Callable[[list[Process]], bool],
        timeout: float,
        stop: threading.Event,
    ) -> bool:
        """Wait until ``predicate(processes(checkout))`` holds; False on timeout or stop."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if predicate(self.processes(checkout)):  # re-entrant: _cond is an RLock's
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or stop.is_set():
                    return False
                self._cond.wait(left)

    def wake(self) -> None:
        """Wake every waiter (to notice a stop)."""
        with self._cond:
            self._cond.notify_all()
