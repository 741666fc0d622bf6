"""The server processes that told the daemon which revision they loaded.

A process whose guard uses the daemon as its source registers on its connection:
``{"type": "register", "checkout": ..., "revision": ..., "inflight": N}``, then says
when its work in flight changes (``{"type": "inflight", ...}``). Its pid is the
connection's peer (``SO_PEERCRED``, ``LOCAL_PEERPID`` on macOS), not what it claims,
and its registration ends with the connection. The socket loop writes; a metrics
scrape reads from its own thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Process:
    """One registered server process.

    Attributes:
        pid: the peer's pid (0 when the platform cannot tell).
        checkout: the checkout it guards (as the daemon names it).
        revision: the revision it loaded.
        since: ``time.time()`` when it registered.
        connection: the daemon's number for its connection.
        inflight: its work in flight, as it last said.
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
    """Registered processes by connection; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_connection: dict[int, Process] = {}

    def register(self, connection: int, checkout: str, pid: int, revision: str, inflight: int = 0) -> Process:
        """Record (or replace) the registration made on ``connection``."""
        process = Process(pid, checkout, revision, time.time(), connection, inflight, time.monotonic())
        with self._lock:
            self._by_connection[connection] = process
        return process

    def set_inflight(self, connection: int, inflight: int) -> Process | None:
        """Record a registered process's work in flight; ``None`` when unregistered or unchanged."""
        with self._lock:
            process = self._by_connection.get(connection)
            if process is None or process.inflight == inflight:
                return None
            process = replace(process, inflight=inflight)
            self._by_connection[connection] = process
        return process

    def unregister(self, connection: int) -> Process | None:
        """Forget the registration of a closed connection (harmless when there is none)."""
        with self._lock:
            return self._by_connection.pop(connection, None)

    def processes(self, checkout: str) -> list[Process]:
        """The processes registered for ``checkout``, oldest first."""
        with self._lock:
            found = [p for p in self._by_connection.values() if p.checkout == checkout]
        return sorted(found, key=lambda p: (p.since, p.connection))
