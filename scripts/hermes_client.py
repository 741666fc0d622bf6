"""What talks to the Hermes WebUI in ``scripts/check_hermes_server.py``: HTTP, SSE, held turns.

- :class:`Board`: everything observed, in order, with the time it arrived; scenarios
  wait on it (a condition) for what they expect.
- :func:`call`, :func:`health`, :func:`btw`: one request each, on loopback; a
  :class:`Reply` says what came back or how it failed (refused, reset, cut, timed out).
- :class:`Turn`: one chat turn (a new session, ``POST /api/chat/start``, its SSE stream
  ``GET /api/chat/stream?stream_id=`` read to the end), every event posted.
- :class:`Hold`: the socket the fake Agent connects to when a turn must be held; the
  turn ends when the harness releases it, never on a timer.
- :class:`Load`: a steady, light request loop (bounded in count and time).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TIMEOUT = 10.0
GUARD_BODY = {"session_id": "nope", "question": "hi"}  # the guard runs before the session lookup


@dataclass(frozen=True)
class Seen:
    """One observation: when it arrived, what kind (daemon, reply, turn, hold), its data."""

    at: float
    kind: str
    data: dict[str, Any]


class Board:
    """Observations in arrival order; :meth:`wait_for` blocks on a condition, with a timeout."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.seen: list[Seen] = []

    def post(self, kind: str, **data: Any) -> Seen:
        with self._cond:
            item = Seen(time.time(), kind, data)
            self.seen.append(item)
            self._cond.notify_all()
        return item

    def mark(self) -> int:
        """A position: ``wait_for(..., since=mark)`` looks only at what came after it."""
        with self._cond:
            return len(self.seen)

    def wait_for(
        self, predicate: Callable[[Seen], bool], timeout: float, since: int | None = None
    ) -> Seen | None:
        """The first observation from ``since`` (default: from now on) matching, or None."""
        deadline = time.monotonic() + timeout
        with self._cond:
            index = len(self.seen) if since is None else since
            while True:
                while index < len(self.seen):
                    if predicate(self.seen[index]):
                        return self.seen[index]
                    index += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def select(self, predicate: Callable[[Seen], bool], since: int = 0) -> list[Seen]:
        with self._cond:
            return [item for item in self.seen[since:] if predicate(item)]


# -- one request -----------------------------------------------------------------------


@dataclass
class Reply:
    """One HTTP request: when it started and ended, its status and JSON, or how it failed."""

    path: str
    start: float
    end: float = 0.0
    status: int | None = None
    payload: Any = None
    error: str | None = None  # the exception's class name

    @property
    def refused(self) -> bool:
        return self.error == "ConnectionRefusedError"

    @property
    def unserved(self) -> bool:
        """Refused or reset before any response: the server never took it (a stop-then-start)."""
        return self.error is not None and self.status is None and self.error != "TimeoutError"

    @property
    def lost(self) -> bool:
        """A 5xx, a response cut off, or no answer in time: what a restart must never cause."""
        return (self.status is not None and (self.status >= 500 or self.error is not None)) or (
            self.error == "TimeoutError"
        )


def call(port: int, method: str, path: str, body: Any = None, timeout: float = TIMEOUT) -> Reply:
    reply = Reply(path, time.time())
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, None if body is None else json.dumps(body), headers)
        response = conn.getresponse()
        reply.status = response.status  # the response began: an error now cuts it
        data = response.read()
        with contextlib.suppress(ValueError):
            reply.payload = json.loads(data)
    except (OSError, http.client.HTTPException) as exc:
        reply.error = "TimeoutError" if isinstance(exc, TimeoutError) else type(exc).__name__
    finally:
        conn.close()
        reply.end = time.time()
    return reply


def health(port: int) -> dict[str, Any] | None:
    """``GET /health`` (unguarded): ``active_streams``, ``server_started_at``...; None if no answer."""
    reply = call(port, "GET", "/health", timeout=5.0)
    return reply.payload if reply.status == 200 and isinstance(reply.payload, dict) else None


def btw(port: int) -> Reply:
    """``POST /api/btw`` for a session that does not exist: 404 while current, 409 once stale."""
    return call(port, "POST", "/api/btw", GUARD_BODY)


# -- a chat turn -----------------------------------------------------------------------


class Turn:
    """One chat turn, read to the end of its SSE stream; every event posted as ``turn``.

    Posts ``{"name", "event": <SSE event>}`` for each event, then ``{"name", "event":
    "end", "how": ...}``: ``stream_end`` (the WebUI closed the turn's stream), ``eof``
    (the connection ended without it), ``refused`` (``chat/start`` said no: ``status``),
    or an error.
    """

    def __init__(self, port: int, board: Board, message: str, name: str) -> None:
        self.port, self.board, self.message, self.name = port, board, message, name
        self.answer = ""
        self.events: list[str] = []
        self._conn: http.client.HTTPConnection | None = None
        self._thread = threading.Thread(target=self._run, name=f"lab-turn-{name}", daemon=True)

    def start(self) -> Turn:
        self._thread.start()
        return self

    def close(self) -> None:
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=TIMEOUT)

    def _end(self, how: str, **data: Any) -> None:
        self.board.post("turn", name=self.name, event="end", how=how, **data)

    def _run(self) -> None:
        session = call(self.port, "POST", "/api/session/new", {})
        if session.status != 200:
            self._end("refused", status=session.status, payload=session.payload, error=session.error)
            return
        sid = session.payload["session"]["session_id"]
        start = call(self.port, "POST", "/api/chat/start", {"session_id": sid, "message": self.message})
        if start.status != 200 or not isinstance(start.payload, dict) or "stream_id" not in start.payload:
            self._end("refused", status=start.status, payload=start.payload, error=start.error)
            return
        self.board.post("turn", name=self.name, event="started", stream_id=start.payload["stream_id"])
        try:
            self._read(str(start.payload["stream_id"]))
        except (OSError, http.client.HTTPException) as exc:
            self._end(f"error: {type(exc).__name__}")

    def _read(self, stream_id: str) -> None:
        # No read timeout: the turn is held as long as the harness wants; close() ends it.
        self._conn = conn = http.client.HTTPConnection("127.0.0.1", self.port)
        conn.request("GET", f"/api/chat/stream?stream_id={stream_id}")
        response = conn.getresponse()
        event = "message"
        while line := response.fp.readline():
            text = line.decode(errors="replace").rstrip("\r\n")
            if text.startswith("event:"):
                event = text[6:].strip()
            elif text.startswith("data:"):
                self.events.append(event)
                if event == "token":
                    with contextlib.suppress(ValueError, AttributeError):
                        self.answer += json.loads(text[5:]).get("text", "")
                self.board.post("turn", name=self.name, event=event)
                if event == "stream_end":
                    self._end("stream_end")
                    return
        self._end("eof")


# -- held turns ------------------------------------------------------------------------


class Hold:
    """The Unix socket held turns connect to: ``hold`` posts ``started`` / ``ended``.

    A fake Agent turn asked to hold connects, says ``{"pid", "label", "task"}`` and waits
    for one line. ``ended`` carries ``released``: False means the turn's process went
    away before the harness released it (the turn was cut off).
    """

    def __init__(self, path: Path, board: Board) -> None:
        self.path, self.board = path, board
        self._server: socket.socket | None = None
        self._conns: dict[int, socket.socket] = {}
        self._released: set[int] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        self._server = socket.socket(socket.AF_UNIX)
        self._server.bind(str(self.path))
        self._server.listen()
        self._server.settimeout(0.2)  # the accept loop checks _stop this often
        self._spawn(self._accept, "lab-hold-accept")

    def _spawn(self, target: Callable[..., None], name: str, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        assert self._server is not None
        number = 0
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            number += 1
            with self._lock:
                self._conns[number] = conn
            self._spawn(self._follow, f"lab-hold-{number}", number, conn)

    def _follow(self, number: int, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while b"\n" not in buffer and (data := conn.recv(4096)):
                buffer += data
            with contextlib.suppress(ValueError):
                self.board.post("hold", event="started", id=number, **json.loads(buffer.split(b"\n")[0]))
            while conn.recv(4096):
                pass
        with self._lock:
            released = number in self._released
        self.board.post("hold", event="ended", id=number, released=released)

    def release(self, number: int) -> None:
        with self._lock:
            self._released.add(number)
            conn = self._conns.get(number)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(b"release\n")

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            conns = list(self._conns)
        for number in conns:
            self.release(number)
        for thread in self._threads:
            thread.join(timeout=TIMEOUT)
        if self._server is not None:
            self._server.close()


# -- a steady light load -----------------------------------------------------------------


@dataclass
class Load:
    """One thread: ``POST /api/btw`` (guarded), and ``GET /health`` every ``health_every``-th.

    Paced by ``interval`` seconds between requests; stops by itself after ``limit``
    requests or ``seconds``. Every reply is posted as ``reply`` and kept in ``replies``.
    """

    port: int
    board: Board
    interval: float = 0.05
    limit: int = 5000
    seconds: float = 600.0
    health_every: int = 5
    replies: list[Reply] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lab-load", daemon=True)

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=TIMEOUT * 2)

    def _run(self) -> None:
        deadline = time.monotonic() + self.seconds
        for number in range(self.limit):
            if self._stop.is_set() or time.monotonic() > deadline:
                return
            if number % self.health_every == self.health_every - 1:
                reply = call(self.port, "GET", "/health", timeout=TIMEOUT)
            else:
                reply = btw(self.port)
            self.replies.append(reply)
            started = reply.payload.get("server_started_at") if isinstance(reply.payload, dict) else None
            self.board.post(
                "reply",
                path=reply.path,
                start=reply.start,
                status=reply.status,
                error=reply.error,
                started=started,
            )
            self._stop.wait(self.interval)  # pacing: a light, steady loop
