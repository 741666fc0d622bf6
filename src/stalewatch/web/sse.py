"""Server-Sent Events of a guard's status, for WSGI and ASGI servers.

A page subscribes with ``new EventSource("/events")`` and learns at once when the
code under the server moved, without polling. Each stream sends, in order:

- ``retry: <ms>`` (the browser's reconnect delay), then the current snapshot as
  ``event: <status>``, ``id: <generation>``, and JSON ``data:`` holding
  ``{"type": "snapshot", **Snapshot.to_dict()}``;
- one message per status change: ``event: <status>`` (``current``, ``stale``,
  ``unreadable``), ``id: <generation>``, and ``{"type": "event", **Event.to_dict()}``
  (the same ``type`` tags as the daemon's protocol);
- with a daemon's automatic restart, one ``event: restart`` message per phase, with
  ``{"type": "restart", "checkout": ..., "phase": ..., "reason": ..., "retry_after": ...}``
  (the snapshot's ``restart`` field holds the latest phase for a new client);
- a ``: keep-alive`` comment whenever nothing was sent for ``keepalive`` seconds, so
  proxies keep the connection and a server notices a client that has gone.

Each client has a bounded queue. A client too slow to drain it loses the queued
events and gets a fresh snapshot instead, so the last status always arrives.
Disconnecting unsubscribes the client.

Example::

    from stalewatch.sse import EventStream

    stream = EventStream(guard)
    # WSGI: route GET /events to stream.wsgi; ASGI: route it to stream.asgi
    # on shutdown: stream.close()

and in the page::

    new EventSource("/events").addEventListener("stale", () => showRestartBanner());
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from wsgiref.types import StartResponse, WSGIEnvironment

from ..core.phases import RestartState
from ..core.status import Event, Snapshot
from ..guard.guard import Guard
from . import Receive, Scope, Send

KEEPALIVE = b": keep-alive\n\n"
"""The comment sent when a stream has been idle for its keep-alive interval."""

_HEADERS = [
    ("Content-Type", "text/event-stream; charset=utf-8"),
    ("Cache-Control", "no-cache"),
    ("X-Accel-Buffering", "no"),  # nginx would otherwise buffer the stream
]
_ASGI_HEADERS = [(k.lower().encode(), v.encode()) for k, v in _HEADERS]  # copied: middleware appends
_NOT_ALLOWED = [(b"allow", b"GET, HEAD"), (b"content-length", b"0")]


def format_message(event: str, data: Mapping[str, Any], *, id: int | None = None) -> bytes:
    """One SSE message: ``event:``, optional ``id:``, one JSON ``data:`` line, blank line.

    Example: ``format_message("stale", event.to_dict(), id=event.generation)``.
    """
    head = f"event: {event}\n" + (f"id: {id}\n" if id is not None else "")
    # json.dumps escapes newlines inside strings, so the data is always one line.
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _status_message(item: Snapshot | Event) -> bytes:
    kind = "event" if isinstance(item, Event) else "snapshot"
    return format_message(item.status.value, {"type": kind, **item.to_dict()}, id=item.generation)


class _Client:
    """One connected stream: a bounded queue filled by the guard, drained by the writer."""

    def __init__(self, guard: Guard, limit: int, notify: Callable[[], None]) -> None:
        self._guard = guard
        self._limit = limit
        self._notify = notify
        self._lock = threading.Lock()
        self._events: list[Event] | None = []  # None: overflowed, resynced with a snapshot
        self._restarts: deque[RestartState] = deque(maxlen=limit)  # the newest phases win
        self.closed = False
        self.last = 0  # the generation sent last (the writer's)

    def push(self, item: Event | RestartState) -> None:
        """The guard's subscriber callback, for events and restart phases (any thread):
        queue, never block."""
        with self._lock:
            if isinstance(item, RestartState):
                self._restarts.append(item)
            elif self._events is not None and len(self._events) < self._limit:
                self._events.append(item)
            else:
                self._events = None  # replaced by a snapshot when the writer catches up
        self._notify()

    def close(self) -> None:
        self.closed = True
        self._notify()

    def after_wait(self, woke: bool) -> bytes:
        """What to send after a wait: everything since the last generation sent, else
        a keep-alive when the wait was silent."""
        with self._lock:
            events, self._events = self._events, []
            restarts = list(self._restarts)
            self._restarts.clear()
        chunks: list[bytes] = []
        for item in [self._guard.snapshot()] if events is None else events:
            if item.generation > self.last:
                chunks.append(_status_message(item))
                self.last = item.generation
        checkout = str(self._guard.checkout)
        chunks.extend(
            format_message("restart", {"type": "restart", "checkout": checkout, **state.to_dict()})
            for state in restarts
        )
        return b"".join(chunks) or (b"" if woke else KEEPALIVE)


class EventStream:
    """A Server-Sent Events endpoint pushing each status change of ``guard``.

    One object serves both interfaces: :meth:`wsgi` is a WSGI application and
    :meth:`asgi` an ASGI one; mount either at the path the page listens on. Other
    methods than GET and HEAD get 405.

    Args:
        guard: the guard whose status to stream (start it, or events never come).
        keepalive: seconds of silence before a ``: keep-alive`` comment.
        queue_size: events buffered per client before it is resynced with a snapshot.
        retry_ms: the reconnect delay the browser is told to use.

    Example::

        stream = EventStream(guard, keepalive=15)
        app = dispatch({"/events": stream.wsgi}, default=app)   # your router
    """

    def __init__(
        self, guard: Guard, *, keepalive: float = 15.0, queue_size: int = 64, retry_ms: int = 3000
    ) -> None:
        if keepalive <= 0 or queue_size < 1 or retry_ms < 0:
            raise ValueError("keepalive must be > 0, queue_size >= 1 and retry_ms >= 0")
        self.guard = guard
        self.keepalive = keepalive
        self.queue_size = queue_size
        self.retry_ms = retry_ms
        self._clients: set[_Client] = set()
        self._changed = threading.Condition()
        self._closed = False

    # -- bookkeeping ------------------------------------------------------------------

    @property
    def clients(self) -> int:
        """How many streams are open right now."""
        with self._changed:
            return len(self._clients)

    def wait_for_clients(self, count: int, timeout: float) -> bool:
        """Block until exactly ``count`` streams are open; False on timeout.

        For graceful shutdown and tests. Example: ``stream.wait_for_clients(0, 5.0)``.
        """
        with self._changed:
            return self._changed.wait_for(lambda: len(self._clients) == count, timeout)

    def close(self) -> None:
        """End every open stream and refuse new ones (each gets a snapshot and ends).

        Call it before stopping the server: a server waits for open responses.
        """
        with self._changed:
            self._closed = True
            clients = list(self._clients)
        for client in clients:
            client.close()

    @contextlib.contextmanager
    def _opened(self, notify: Callable[[], None]) -> Iterator[tuple[_Client, bytes]]:
        """A client, subscribed, and its stream's start (the snapshot); forgotten on the way out."""
        client = _Client(self.guard, self.queue_size, notify)
        with self._changed:
            self._clients.add(client)
            self._changed.notify_all()
            client.closed = self._closed
        # Subscribe before reading the snapshot: nothing can fall between the two, and
        # events already covered by the snapshot are skipped by generation.
        unsubscribe_events = self.guard.subscribe(client.push)
        unsubscribe_restarts = self.guard.subscribe_restart(client.push)
        try:
            snap = self.guard.snapshot()
            client.last = snap.generation
            yield client, f"retry: {self.retry_ms}\n\n".encode() + _status_message(snap)
        finally:
            unsubscribe_events()
            unsubscribe_restarts()
            with self._changed:
                self._clients.discard(client)
                self._changed.notify_all()

    # -- WSGI -------------------------------------------------------------------------

    def wsgi(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterator[bytes]:
        """The WSGI application. The server's thread stays with the stream while open.

        A gone client is noticed at the next write (a change or a keep-alive), when
        the server closes the iterator; that unsubscribes it.
        """
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD"), ("Content-Length", "0")])
            return iter(())
        start_response("200 OK", list(_HEADERS))
        return iter(()) if method == "HEAD" else self._wsgi_stream()

    def _wsgi_stream(self) -> Iterator[bytes]:
        # A generator: subscribing happens on the first next(), inside the try whose
        # finally runs when the server closes the iterator, so nothing can leak.
        wake = threading.Event()
        with self._opened(wake.set) as (client, start):
            yield start
            while not client.closed:
                woke = wake.wait(self.keepalive)
                wake.clear()  # before taking: a push after this sets it again
                if data := client.after_wait(woke):
                    yield data

    # -- ASGI -------------------------------------------------------------------------

    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI application (``http`` scopes only).

        Reads ``receive()`` only to notice the client's disconnect, which ends the
        stream at once.
        """
        if scope["type"] != "http":
            raise ValueError(f"EventStream serves HTTP only, not {scope['type']!r}")
        method = str(scope.get("method", "GET")).upper()
        if method != "GET":  # HEAD: the stream's headers; any other: 405
            status, headers = (200, _ASGI_HEADERS) if method == "HEAD" else (405, _NOT_ALLOWED)
            await send({"type": "http.response.start", "status": status, "headers": list(headers)})
            await send({"type": "http.response.body", "body": b""})
            return
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def notify() -> None:  # from the guard's (watcher) thread
            # RuntimeError: the loop is closed, so this stream is over anyway.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake.set)

        with self._opened(notify) as (client, start):
            listener = asyncio.ensure_future(_await_disconnect(receive, client))
            try:
                await send({"type": "http.response.start", "status": 200, "headers": list(_ASGI_HEADERS)})
                await send({"type": "http.response.body", "body": start, "more_body": True})
                while not client.closed:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), self.keepalive)
                    woke = wake.is_set()
                    wake.clear()
                    if data := client.after_wait(woke):
                        await send({"type": "http.response.body", "body": data, "more_body": True})
                if not listener.done():  # closed by the server, not by the client: end cleanly
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                listener.cancel()


async def _await_disconnect(receive: Receive, client: _Client) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            client.close()
            return
