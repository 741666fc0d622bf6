"""Talking to a running daemon: connecting, reading its lines, following it.

What the ``events`` and ``status --socket`` commands and :class:`~.client.DaemonWatch`
share. A daemon must greet within a few seconds and then never stay silent for three
keepalive intervals; anything else raises :class:`DaemonUnavailableError`.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core.errors import StalewatchError
from .protocol import MAX_MESSAGE_LINE, PROTOCOL_VERSION, LineReader, ProtocolError, decode

__all__ = [
    "HELLO_TIMEOUT",
    "Backoff",
    "DaemonUnavailableError",
    "check_hello",
    "connect",
    "follow",
    "follow_reconnecting",
    "read_status",
    "receive",
    "silence_limit",
]

FIRST_BACKOFF = 0.05
MAX_BACKOFF = 2.0
HELLO_TIMEOUT = 5.0  # a daemon that accepted must say hello within this


class DaemonUnavailableError(StalewatchError):
    """The daemon's socket cannot be reached, or it answered something unexpected.

    Attributes:
        path: the socket path.
        reason: what went wrong.
    """

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot reach the stalewatch daemon at {path}: {reason}")


def connect(path: Path, timeout: float = 2.0) -> socket.socket:
    """Connect to the daemon at ``path`` (blocking socket with ``timeout``).

    Raises:
        DaemonUnavailableError: no such socket, refused, or timed out.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(os.fspath(path))
    except OSError as exc:
        sock.close()
        raise DaemonUnavailableError(path, exc.strerror or str(exc) or type(exc).__name__) from None
    return sock


def receive(sock: socket.socket, reader: LineReader, path: Path) -> list[dict[str, Any]] | None:
    """The messages one ``recv`` completes; ``None`` when the socket's timeout came first.

    Raises:
        DaemonUnavailableError: the connection failed or closed, or a line broke the protocol.
    """
    try:
        data = sock.recv(65536)
    except TimeoutError:
        return None
    except OSError as exc:
        raise DaemonUnavailableError(path, exc.strerror or str(exc)) from None
    if not data:
        raise DaemonUnavailableError(path, "the daemon closed the connection")
    try:
        return [decode(line) for line in reader.feed(data)]
    except ProtocolError as exc:
        raise DaemonUnavailableError(path, str(exc)) from None


def _messages(sock: socket.socket, path: Path, deadline: float | None = None) -> Iterator[dict[str, Any]]:
    reader = LineReader(MAX_MESSAGE_LINE)
    while True:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DaemonUnavailableError(path, "no complete answer in time")
            sock.settimeout(left)
        messages = receive(sock, reader, path)
        if messages is None:
            raise DaemonUnavailableError(path, "no answer in time")
        yield from messages


def check_hello(message: dict[str, Any], path: Path) -> None:
    """Raise unless ``message`` is a hello in this protocol (an ``error`` line: why not)."""
    if message.get("type") == "error":
        raise DaemonUnavailableError(path, f"{message.get('reason')}: {message.get('detail')}")
    if message.get("type") != "hello":
        raise DaemonUnavailableError(path, f"expected a hello line, got {message.get('type')!r}")
    if message.get("protocol") != PROTOCOL_VERSION:
        raise DaemonUnavailableError(
            path, f"protocol {message.get('protocol')!r}; this client speaks {PROTOCOL_VERSION}"
        )


def read_status(path: Path, timeout: float = 5.0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The daemon's ``hello`` and one ``snapshot`` per checkout, then disconnect.

    The whole exchange takes at most ``timeout`` seconds: a peer that keeps talking
    (pings) without ever sending its snapshots cannot hold the command for ever.

    Raises:
        DaemonUnavailableError: unreachable, silent, too slow, or not speaking this protocol.
    """
    deadline = time.monotonic() + timeout
    with connect(path, timeout) as sock:
        messages = _messages(sock, path, deadline)
        hello = next(messages)
        check_hello(hello, path)
        listed = hello.get("checkouts")
        # Only names count: a daemon's odd list (numbers, objects) must not crash us.
        expected = {c for c in listed if isinstance(c, str)} if isinstance(listed, list) else set()
        snapshots: list[dict[str, Any]] = []
        while len(snapshots) < len(expected):
            message = next(messages)
            if message.get("type") == "snapshot":
                snapshots.append(message)
        return hello, snapshots


def follow(path: Path) -> Iterator[dict[str, Any]]:
    """Every message the daemon sends (``hello`` first), until it disconnects.

    A daemon silent for three keepalive intervals is taken as wedged, as by the
    library client.

    Raises:
        DaemonUnavailableError: unreachable, disconnected, silent, or not speaking
            this protocol.
    """
    with connect(path, HELLO_TIMEOUT) as sock:
        messages = _messages(sock, path)
        hello = next(messages)
        check_hello(hello, path)
        sock.settimeout(silence_limit(hello))
        yield hello
        yield from messages


def silence_limit(hello: dict[str, Any]) -> float:
    """How long a daemon that said ``hello`` may stay silent before it counts as wedged."""
    keepalive = hello.get("keepalive")
    if isinstance(keepalive, int | float) and not isinstance(keepalive, bool) and keepalive > 0:
        return 3.0 * float(keepalive)  # three missed pings
    return HELLO_TIMEOUT


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

    def wait(self, stop: threading.Event) -> bool:
        """Wait the current delay (True if ``stop`` was set meanwhile), then double it."""
        stopped = stop.wait(self.delay)
        self.delay = min(self.delay * 2, self.limit)
        return stopped


def follow_reconnecting(
    path: Path,
    *,
    on_lost: Callable[[DaemonUnavailableError], object],
    on_back: Callable[[], object],
    stop: threading.Event | None = None,
    max_backoff: float = MAX_BACKOFF,
) -> Iterator[dict[str, Any]]:
    """Every message the daemon sends, across its restarts (for ``stalewatch events``).

    The first connection must succeed. After that a lost connection calls
    ``on_lost(error)`` once and is retried with :class:`Backoff` until it is back
    (``on_back()``; a fresh ``hello`` and snapshots follow) or ``stop`` is set.

    Raises:
        DaemonUnavailableError: the first connection failed.
    """
    stop = stop if stop is not None else threading.Event()
    backoff = Backoff(max_backoff)
    messages = follow(path)
    first = next(messages)  # raises: the daemon is not there at all
    yield first
    lost = False
    while not stop.is_set():
        try:
            for message in messages:
                if lost:
                    lost = False
                    on_back()
                backoff.reset()
                yield message
        except DaemonUnavailableError as exc:
            error = exc
        else:
            error = DaemonUnavailableError(path, "the daemon closed the connection")
        if not lost:
            lost = True
            on_lost(error)
        if backoff.wait(stop):
            return
        messages = follow(path)
