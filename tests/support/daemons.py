"""Helpers for the daemon tests: a real daemon process, real sockets, no sleeping.

Readiness comes from the daemon itself: every daemon started here gets a
``NOTIFY_SOCKET`` bound by the test, and :func:`start_daemon` returns once ``READY=1``
arrived. Reads wait on sockets with timeouts.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_notify_ids = itertools.count()
WAIT = 10.0  # generous upper bound for anything that should take milliseconds


@contextmanager
def short_dir() -> Iterator[Path]:
    """A short directory under /tmp: AF_UNIX paths are limited to 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="sw-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Notifications:
    """A fake systemd: a datagram socket the daemon sends sd_notify messages to.

    A thread drains it at once (as systemd does), so the daemon never finds it full.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.05)
        self.received: list[str] = []
        self.arrivals: list[tuple[float, str]] = []  # (monotonic time, datagram), as they came
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="test-notify-reader", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while not self._stop.is_set():
            try:
                message = self.sock.recv(4096).decode()
                self.arrivals.append((time.monotonic(), message))
                self._queue.put(message)
            except TimeoutError:
                continue
            except OSError:
                return

    def wait_for(self, predicate: Any, timeout: float = WAIT) -> str:
        """Consume datagrams in order until one matches ``predicate``; return it."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no matching notification in {timeout} s; got {self.received}"
                ) from None
            self.received.append(message)
            if predicate(message):
                return message

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
        self.path.unlink(missing_ok=True)


class DaemonProcess:
    """A ``python -m stalewatch daemon`` subprocess, its log and its notifications."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path, notes: Notifications, sock: Path) -> None:
        self.proc = proc
        self.log = log
        self.notes = notes
        self.socket = sock

    def log_text(self) -> str:
        return self.log.read_text()

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=WAIT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT)


def daemon_command(*args: str, python: Sequence[str] = (sys.executable, "-m", "stalewatch")) -> list[str]:
    """``stalewatch daemon ARGS`` as this interpreter runs it (``python``: what runs the CLI)."""
    return [*python, "daemon", *args]


@contextmanager
def start_daemon(
    workdir: Path,
    *args: str,
    env: dict[str, str] | None = None,
    name: str = "d",
    wait_ready: bool = True,
    python: Sequence[str] = (sys.executable, "-m", "stalewatch"),
) -> Iterator[DaemonProcess]:
    """Start a daemon with ``--socket workdir/<name>.sock``; wait for READY=1; kill at exit.

    ``python`` is what runs the CLI (default ``python -m stalewatch``).
    """
    sock = workdir / f"{name}.sock"
    notes = Notifications(workdir / f"{name}-{next(_notify_ids)}.notify")
    log = workdir / f"{name}.log"
    environment = {**os.environ, "NOTIFY_SOCKET": str(notes.path), **(env or {})}
    if "JOURNAL_STREAM" not in (env or {}):
        environment.pop("JOURNAL_STREAM", None)  # the format depends on it
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            daemon_command("--socket", str(sock), *args, python=python),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            env=environment,
        )
    daemon = DaemonProcess(proc, log, notes, sock)
    try:
        if wait_ready:
            try:
                notes.wait_for(lambda m: "READY=1" in m.split("\n"))
            except AssertionError:
                raise AssertionError(f"daemon not ready; log:\n{log.read_text()}") from None
        yield daemon
    finally:
        daemon.kill()
        notes.close()


class Subscriber:
    """A socket client reading the daemon's JSON lines with timeouts."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.buffer = b""

    def line(self, timeout: float = WAIT) -> bytes | None:
        """The next raw line, or ``None`` at end of stream."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line within {timeout} s (buffered {self.buffer[:200]!r})")
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                continue
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def next(
        self, *types: str, timeout: float = WAIT, skip: tuple[str, ...] = ("ping", "health")
    ) -> dict[str, Any]:
        """The next message, skipping ``skip`` types; assert its type is one of ``types``."""
        while True:
            line = self.line(timeout)
            if line is None:
                raise AssertionError("the daemon closed the connection")
            message: dict[str, Any] = json.loads(line)
            if message["type"] in skip:
                continue
            if types:
                assert message["type"] in types, message
            return message

    def rest(self, timeout: float = WAIT) -> list[dict[str, Any]]:
        """Every remaining message until the daemon closes the connection."""
        messages = []
        while (line := self.line(timeout)) is not None:
            messages.append(json.loads(line))
        return messages

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def greet(sub: Subscriber) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read the hello line and one snapshot per checkout it lists."""
    hello = sub.next("hello")
    snapshots = [sub.next("snapshot") for _ in hello["checkouts"]]
    return hello, snapshots


REQUIRED = ("type", "checkout", "status", "loaded_revision", "current_revision", "generation", "at")


class LineReader:
    """Reads a child's pipe line by line with a timeout (select, never a blind sleep)."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe
        self.buffer = b""

    def line(self, timeout: float = WAIT) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line within {timeout} s (buffered {self.buffer[:200]!r})")
            ready, _, _ = select.select([self.pipe], [], [], left)
            if ready:
                data = os.read(self.pipe.fileno(), 65536)
                if not data:
                    raise AssertionError(f"pipe closed (buffered {self.buffer[:200]!r})")
                self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def until(self, predicate: Any, timeout: float = WAIT) -> str:
        """Consume lines until one matches ``predicate``; return it."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.line(max(0.0, deadline - time.monotonic()))
            if predicate(line):
                return line
