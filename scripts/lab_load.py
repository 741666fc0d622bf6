"""Load and held requests for the restart lab (``scripts/restart_lab.py``): clients on loopback.

- ``Load`` keeps a few threads sending requests and records each outcome: bounded
  (each thread waits for its answer before the next request).
- ``Gate`` is the Unix socket a held request waits on inside the app (``/api/hold``):
  the request is in flight until the caller releases it, never for a fixed time.
- ``stop_group`` stops a process group and waits until every member is gone.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WAIT = 30.0

__all__ = ["WAIT", "Gate", "Load", "Outcome", "free_port", "group_members", "stop_group"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Outcome:
    """One request: when it started and ended, and what came back (or what failed)."""

    start: float
    end: float
    path: str
    status: int | None = None
    revision: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    retry_after: str | None = None
    error: str | None = None  # the exception's class name
    connected: bool = False  # the kernel completed the connection (maybe only into a backlog)

    @property
    def cut(self) -> bool:
        """A response that began and did not end: what a graceful stop must never do."""
        return self.error is not None and self.status is not None

    @property
    def unserved(self) -> bool:
        """Refused, or reset before any response: the server never took the request."""
        return self.error is not None and self.status is None


def request(port: int, path: str, method: str = "GET") -> Outcome:
    """One request to ``port``, whatever happens (never raises)."""
    start = time.time()
    outcome = Outcome(start, start, path)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT * 4)
    try:
        conn.connect()
        outcome.connected = True
        conn.request(method, path)
        response = conn.getresponse()
        outcome.status = response.status  # the response began: an error now cuts it
        outcome.retry_after = response.getheader("Retry-After")
        body = response.read()
        with contextlib.suppress(ValueError):
            outcome.payload = json.loads(body)
        if isinstance(outcome.payload, dict):
            outcome.revision = outcome.payload.get("revision")
    except (OSError, http.client.HTTPException) as exc:
        outcome.error = type(exc).__name__
    finally:
        conn.close()
        outcome.end = time.time()
    return outcome


class Load:
    """Threads sending requests to ``port`` until stopped; ``outcomes`` records each."""

    def __init__(self, port: int, paths: list[str], threads: int = 4) -> None:
        self.port = port
        self.paths = paths
        self.outcomes: list[Outcome] = []
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"lab-load-{i}", daemon=True)
            for i in range(threads)
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=WAIT)

    def _run(self, number: int) -> None:
        turn = number
        while not self._stop.is_set():
            path = self.paths[turn % len(self.paths)]
            turn += 1
            outcome = request(self.port, path)
            with self._lock:
                self.outcomes.append(outcome)
                self._lock.notify_all()
            if outcome.error == "ConnectionRefusedError":
                # The server is between two lives: knock again soon, never spin.
                self._stop.wait(0.01)

    def snapshot(self) -> list[Outcome]:
        with self._lock:
            return list(self.outcomes)

    def wait_for(self, predicate: Callable[[Outcome], bool], timeout: float = WAIT) -> Outcome:
        """The first outcome from now on that matches ``predicate``."""
        with self._lock:
            seen = len(self.outcomes)

            def found() -> Outcome | None:
                return next((o for o in self.outcomes[seen:] if predicate(o)), None)

            if not self._lock.wait_for(lambda: found() is not None, timeout):
                raise TimeoutError(f"no matching request in {timeout} s")
            match = found()
            assert match is not None
            return match


class Gate:
    """The Unix socket a held request (``/api/hold``) connects to and waits on until released."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        self.listener.settimeout(WAIT)
        self.held: list[socket.socket] = []

    def entered(self, timeout: float = WAIT) -> None:
        """Wait until one more request is held inside the app."""
        self.listener.settimeout(timeout)
        conn, _ = self.listener.accept()
        self.held.append(conn)

    def release(self) -> None:
        """Let every held request go on (each answers once its reader gets a byte)."""
        for conn in self.held:
            with contextlib.suppress(OSError):
                conn.sendall(b"x")
            conn.close()
        self.held.clear()

    def close(self) -> None:
        self.release()
        self.listener.close()


def group_members(pgid: int) -> list[int]:
    """The pids of the processes in group ``pgid`` now (from /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 1 :].split()
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] != b"Z":
            members.append(int(entry.name))
    return members


def stop_group(pgid: int, timeout: float = WAIT) -> None:
    """TERM the group, then KILL what is left after ``timeout``; wait until all are gone.

    A gunicorn new master (``USR2``) outlives the process the lab started: it is in the
    same group, so the group is what is stopped, and each member is waited for on a
    pidfd (never a fixed sleep).
    """
    for signum, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, timeout)):
        try:
            os.killpg(pgid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        for pid in group_members(pgid):
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            try:
                select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            finally:
                os.close(fd)
        if not group_members(pgid):
            return
