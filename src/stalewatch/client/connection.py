"""Talking to a running daemon: connecting, reading its lines, asking for its status,
and following it across its restarts.

What :class:`~.daemon.DaemonWatch`, :class:`Follower` (``stalewatch events``) and the
``status --socket`` command share. A daemon must greet within a few seconds and then
never stay silent for three keepalive intervals; anything else raises
:class:`~stalewatch.core.errors.DaemonUnavailableError`. A :class:`Follower`
reconnects with :func:`backoff` after the first connection; a signal handler may stop
it at any moment (:meth:`Follower.stop` sets a flag, shuts the connection down and
wakes a backoff wait: nothing that takes a lock).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import math
import os
import socket
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core.errors import DaemonUnavailableError, ProtocolError
from ..core.signals import Wakeup
from ..protocol.codec import MAX_MESSAGE_LINE, LineReader, decode
from ..protocol.messages import HELLO_TIMEOUT, hello_problem, silence_limit


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
        raise DaemonUnavailableError(path, _refused(path, exc)) from None
    return sock


def _refused(path: Path, exc: OSError) -> str:
    """Why ``connect`` failed: the kernel's "Connection refused" covers three cases a
    user fixes differently (a directory, another kind of file, a socket nobody listens on)."""
    plain = exc.strerror or str(exc) or type(exc).__name__
    if exc.errno != errno.ECONNREFUSED:
        return plain
    try:
        mode = Path(path).stat().st_mode
    except OSError:
        return plain
    if stat.S_ISDIR(mode):
        return f"it is a directory, not a socket (the daemon's socket in it: {path}/stalewatch.sock?)"
    if not stat.S_ISSOCK(mode):
        return "it is not a socket"
    return "no daemon is listening on it (a leftover of a daemon that crashed? start the daemon)"


def messages(
    sock: socket.socket,
    path: Path,
    deadline: float = math.inf,
    tick: Callable[[float], float] | None = None,
) -> Iterator[dict[str, Any]]:
    """Every message read from ``sock``, a checked ``hello`` first, until ``deadline``
    passes or, without one, the daemon stays silent too long: :data:`HELLO_TIMEOUT`
    before its hello, three keepalive intervals after it (it is taken as wedged).
    ``tick(now)``, called before each wait, says when (monotonic) to call it again.

    Raises:
        DaemonUnavailableError: the connection failed or closed, a line broke the
            protocol, the first line was no hello in this protocol, or nothing
            (complete) came in time.
    """
    reader = LineReader(MAX_MESSAGE_LINE)
    greeted = False
    limit = math.inf if deadline < math.inf else HELLO_TIMEOUT  # a deadline bounds the whole exchange
    last = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= deadline:
            raise DaemonUnavailableError(path, "no complete answer in time")
        if now - last >= limit:
            raise DaemonUnavailableError(path, f"the daemon sent nothing for {now - last:.1f} s")
        wake = min(deadline, last + limit, math.inf if tick is None else tick(now))
        sock.settimeout(max(0.001, wake - now))
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError as exc:
            raise DaemonUnavailableError(path, exc.strerror or str(exc)) from None
        if not data:
            raise DaemonUnavailableError(path, "the daemon closed the connection")
        last = time.monotonic()
        try:
            received = [decode(line) for line in reader.feed(data)]
        except ProtocolError as exc:
            raise DaemonUnavailableError(path, str(exc)) from None
        for message in received:
            if not greeted:
                check_hello(message, path)
                greeted = True
                limit = silence_limit(message) if limit < math.inf else limit
            yield message


def shut_down(sock: socket.socket | None) -> None:
    """Wake whoever is blocked reading ``sock`` (any thread, or a signal handler; harmless
    once it is closed)."""
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def check_hello(message: dict[str, Any], path: Path) -> None:
    """Raise unless ``message`` is a hello in this protocol (an ``error`` line: why not).

    Raises:
        DaemonUnavailableError: naming the problem (:func:`~..protocol.messages.hello_problem`).
    """
    problem = hello_problem(message)
    if problem is not None:
        raise DaemonUnavailableError(path, problem)


def read_status(path: Path, timeout: float = 5.0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The daemon's ``hello`` and one ``snapshot`` per checkout, then disconnect.

    The whole exchange takes at most ``timeout`` seconds: a peer that keeps talking
    (pings) without ever sending its snapshots cannot hold the command for ever.

    Raises:
        DaemonUnavailableError: unreachable, silent, too slow, or not speaking this protocol.
    """
    deadline = time.monotonic() + timeout
    with connect(path, timeout) as sock:
        lines = messages(sock, path, deadline)
        hello = next(lines)
        listed = hello.get("checkouts")
        # Only names count: a daemon's odd list (numbers, objects) must not crash us.
        expected = {c for c in listed if isinstance(c, str)} if isinstance(listed, list) else set()
        snapshots = (message for message in lines if message.get("type") == "snapshot")
        return hello, list(itertools.islice(snapshots, len(expected)))


FIRST_BACKOFF = 0.05
MAX_BACKOFF = 2.0


def backoff(limit: float = MAX_BACKOFF) -> Iterator[float]:
    """Waits between reconnection attempts: 0.05 s, doubling up to ``limit`` (a new
    iterator starts again at 0.05 s)."""
    delay = FIRST_BACKOFF
    while True:
        yield delay
        delay = min(delay * 2, limit)


class Follower:
    """Every message a daemon sends, across its restarts, until :meth:`stop`.

    Args:
        path: the daemon's socket.
        say: told once when a connection that was up is lost (``lost the daemon
            (REASON); reconnecting``), and when it is back (``reconnected to the daemon
            at PATH``; a fresh ``hello`` and snapshots follow).
    """

    def __init__(self, path: Path, say: Callable[[str], object]) -> None:
        self.path = path
        self._say = say
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

        The first connection must succeed. After that a lost connection is told once
        and retried with :func:`backoff` until it is back (told too) or the follower
        is stopped.

        Raises:
            DaemonUnavailableError: the first connection failed.
        """
        lost = connected = False
        delays = backoff()
        while not self._stop.is_set:
            try:
                with connect(self.path, HELLO_TIMEOUT) as self._sock:  # stop() shuts it down
                    for message in () if self._stop.is_set else messages(self._sock, self.path):
                        if lost:
                            self._say(f"reconnected to the daemon at {self.path}")
                        lost = False
                        connected = True
                        delays = backoff()
                        yield message
            except DaemonUnavailableError as exc:
                if not connected:
                    raise  # the daemon is not there at all
                if self._stop.is_set:
                    return
                if not lost:
                    self._say(f"lost the daemon ({exc.reason}); reconnecting")
                lost = True
            # A connection ends without an error only once stopped: the wait returns at once.
            if self._stop.wait(next(delays)):
                return
