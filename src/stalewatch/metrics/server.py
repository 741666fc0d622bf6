"""``MetricsServer``: the daemon's ``/metrics`` over HTTP, on one thread, never starved.

Prometheus scrapes with a ``GET /metrics``. The daemon answers on one thread
(``stalewatch-metrics-http``) running a ``selectors`` loop: it accepts, reads each
request without blocking, renders the exposition with ``prometheus_client``'s encoder
(text or OpenMetrics, as the ``Accept`` header asks; gzip when accepted) and writes
it without blocking. Nothing a client does can hold that thread: a request must
arrive whole within :data:`REQUEST_TIMEOUT` seconds and fit in :data:`MAX_REQUEST`
bytes, at most :data:`MAX_CONNECTIONS` connections are open, and any error is that
connection's alone. When they are all taken, a new connection replaces the oldest one
still sending its request (a slowloris), never one being answered nor one younger
than :data:`NEWCOMER_GRACE`: an honest scrape sends its request at once and is
answered within that grace. When no connection may be replaced, newcomers wait in
the listen backlog (the listener rests) until one closes or a grace ends. With nobody scraping, the
thread sleeps in ``select`` without a timeout: no wake-ups, no CPU.

This is not a general HTTP server: one request per connection (``Connection:
close``), ``GET`` and ``HEAD`` of ``/metrics`` (and ``/``), nothing else.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.exposition import choose_encoder, generate_latest, gzip_accepted
from prometheus_client.registry import Collector

from ..core.errors import MetricsError
from ..core.escaping import printable

logger = logging.getLogger(__name__)

MAX_CONNECTIONS = 16
MAX_REQUEST = 8192  # bytes of request line and headers (Prometheus sends ~300)
REQUEST_TIMEOUT = 5.0  # seconds from accept to the response written
NEWCOMER_GRACE = 0.1  # seconds a new connection has to send its request before it may be replaced
_INDEX = b"stalewatch metrics: /metrics\n"
_TEXT = "text/plain; version=0.0.4; charset=utf-8"  # the text format every Prometheus reads


@dataclass
class _Connection:
    sock: socket.socket
    accepted: float
    received: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None  # the response, while it is being written


class MetricsServer:
    """Serves ``registry`` on ``host:port`` until :meth:`stop`.

    Args:
        host: an IP address (``0.0.0.0``, ``::`` for every interface).
        port: the TCP port; 0 picks a free one (see :attr:`address`).
        registry: what a scrape collects.
        request_timeout: seconds a connection may take from accept to response written.
    """

    def __init__(
        self, host: str, port: int, registry: Collector, *, request_timeout: float = REQUEST_TIMEOUT
    ) -> None:
        self.address = (host, port)  # the port the kernel chose, once bound
        self._timeout = request_timeout
        self._registry = registry
        self._listener: socket.socket | None = None
        self._wake: tuple[socket.socket, ...] = ()  # (read, write), while running
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._connections: dict[int, _Connection] = {}
        self._resting_until: float | None = None  # the listener rests until a place frees up, or then
        self.scrapes = 0
        self._error_logged = 0.0

    @property
    def url(self) -> str:
        return f"http://{_host_port(*self.address)}/metrics"

    def bind(self) -> None:
        """Bind and listen (before the thread starts, so an error reaches the caller).

        Raises:
            MetricsError: the address is in use, not local, or not permitted.
        """
        host, port = self.address
        v6 = ":" in host
        # SO_REUSEADDR (TIME_WAIT after a restart); "::" takes IPv4 too where the platform can
        # (create_server raises ValueError where it cannot: OpenBSD, IPv6 off).
        dualstack = v6 and socket.has_dualstack_ipv6()
        try:
            sock = socket.create_server(
                self.address,
                family=socket.AF_INET6 if v6 else socket.AF_INET,
                backlog=64,
                dualstack_ipv6=dualstack,
            )
        except OSError as exc:  # the system's reason alone (create_server appends the address's repr)
            code = exc.errno or 0  # < 0: a lookup's (getaddrinfo), no system errno
            said = os.strerror(code) if code > 0 else exc.strerror or exc
            reason = f"cannot listen on {_host_port(host, port)}: {said}"
            raise MetricsError("metrics_address", reason) from None
        sock.setblocking(False)
        self._listener = sock
        self.address = (host, sock.getsockname()[1])

    def start(self) -> MetricsServer:
        if self._listener is None:
            self.bind()
        if self._thread is None and not self._stop.is_set():
            self._wake = socket.socketpair()
            self._thread = threading.Thread(
                target=self._run, args=(self._listener,), name="stalewatch-metrics-http", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close every connection and the listener. Harmless twice."""
        self._stop.set()
        with contextlib.suppress(OSError):
            for sock in self._wake[1:]:  # the write end, while running
                sock.send(b"\0")
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
            if thread.is_alive():
                return  # wedged in a collect: leave its sockets to it (the process is ending)
        for sock in [c.sock for c in self._connections.values()] + [*self._wake]:
            sock.close()
        self._connections.clear()
        self._wake = ()
        if self._listener is not None:
            self._listener.close()

    # -- the thread ------------------------------------------------------------------------

    def _run(self, listener: socket.socket) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(listener, selectors.EVENT_READ)
            selector.register(self._wake[0], selectors.EVENT_READ)
            while not self._stop.is_set():
                try:
                    self._turn(selector, listener)
                except Exception:  # a bug here must not end the endpoint
                    self._log_error("unexpected error in the metrics server; serving on")
                    self._stop.wait(0.1)

    def _turn(self, selector: selectors.BaseSelector, listener: socket.socket) -> None:
        deadlines = [c.accepted + self._timeout for c in self._connections.values()]
        if self._resting_until is not None:
            deadlines.append(self._resting_until)
        timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None  # idle: until woken
        events = selector.select(timeout)
        for key, mask in events:
            if isinstance(key.data, _Connection):
                self._serve(selector, key.data, mask)
        # Accept after reading: a request that arrived is answered (or at least read)
        # before a newcomer may need its place.
        if any(key.fileobj is listener for key, _ in events):
            self._accept(selector, listener)
        now = time.monotonic()
        if self._resting_until is not None and now >= self._resting_until:
            self._wake_listener(selector)
        for conn in [c for c in self._connections.values() if now >= c.accepted + self._timeout]:
            self._close(selector, conn)

    def _wake_listener(self, selector: selectors.BaseSelector) -> None:
        if self._listener is not None and self._listener not in selector.get_map():
            self._resting_until = None
            selector.register(self._listener, selectors.EVENT_READ)

    def _accept(self, selector: selectors.BaseSelector, listener: socket.socket) -> None:
        for _ in range(MAX_CONNECTIONS):
            if len(self._connections) >= MAX_CONNECTIONS:
                # The oldest connection still sending its request past its grace makes
                # room; never one being answered, nor a new one.
                coming = [c for c in self._connections.values() if c.out is None]
                oldest = min(coming, key=lambda c: c.accepted, default=None)
                if oldest is None or time.monotonic() < oldest.accepted + NEWCOMER_GRACE:
                    # Every place is being answered or young: the backlog holds the
                    # newcomers; rest the listener (no spinning) until a place frees up
                    # or the oldest request still coming may be replaced.
                    selector.unregister(listener)
                    self._resting_until = None if oldest is None else oldest.accepted + NEWCOMER_GRACE
                    return
                self._close(selector, oldest)
            try:
                sock, _ = listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._log_error(f"cannot accept a scrape: {exc.strerror}", trace=False)
                    self._stop.wait(0.1)  # the backlog keeps it: rest instead of spinning
                return
            sock.setblocking(False)
            conn = self._connections[sock.fileno()] = _Connection(sock, time.monotonic())
            selector.register(sock, selectors.EVENT_READ, conn)
            # A request that waited in the backlog is here already: answer it now, before
            # it could need a place.
            self._serve(selector, conn, selectors.EVENT_READ)

    def _serve(self, selector: selectors.BaseSelector, conn: _Connection, mask: int) -> None:
        try:
            if conn.out is None and mask & selectors.EVENT_READ:
                data = conn.sock.recv(4096)
                if not data:
                    self._close(selector, conn)
                    return
                conn.received += data
                end = conn.received.find(b"\r\n\r\n")
                if end < 0 and len(conn.received) <= MAX_REQUEST:
                    return  # not whole yet
                whole = 0 <= end <= MAX_REQUEST
                conn.out = memoryview(self._respond(bytes(conn.received[:end]) if whole else None))
                selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
            if conn.out is not None:
                conn.out = conn.out[conn.sock.send(conn.out) :]
                if not conn.out:
                    self._close(selector, conn)
        except BlockingIOError:
            return
        except OSError:
            self._close(selector, conn)  # reset, broken pipe: that client's alone
        except Exception:
            self._log_error("unexpected error answering a scrape")
            self._close(selector, conn)

    def _close(self, selector: selectors.BaseSelector, conn: _Connection) -> None:
        self._connections.pop(conn.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            selector.unregister(conn.sock)
        conn.sock.close()
        self._wake_listener(selector)

    def _respond(self, head: bytes | None) -> bytes:
        """The whole response to a request head (``None``: too large)."""
        if head is None:
            return _response(431, "Request Header Fields Too Large", b"request too large\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response(400, "Bad Request", b"bad request\n")
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return _response(405, "Method Not Allowed", b"GET /metrics\n", [("Allow", "GET, HEAD")])
        path = target.split("?", 1)[0]
        if path == "/":
            return _response(200, "OK", _INDEX, head_only=method == "HEAD")
        if path != "/metrics":
            return _response(404, "Not Found", b"not found: try /metrics\n")
        headers = {
            name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in lines[1:])
        }
        encoder: Callable[[Collector], bytes]
        try:
            encoder, content_type = choose_encoder(headers.get("accept", ""))
        except Exception:  # "version=abc" raises TypeError in the library: answer plain text
            encoder, content_type = generate_latest, _TEXT
        try:
            body = encoder(self._registry)
        except Exception:
            self._log_error("collecting metrics failed")
            return _response(500, "Internal Server Error", b"collecting metrics failed (logged)\n")
        self.scrapes += 1
        extra = [("Content-Type", content_type)]
        if gzip_accepted(headers.get("accept-encoding", "")):
            body = gzip.compress(body, compresslevel=6)
            extra.append(("Content-Encoding", "gzip"))
        return _response(200, "OK", body, extra, head_only=method == "HEAD")

    def _log_error(self, what: str, *, trace: bool = True) -> None:
        # At most once a minute: a client that triggers an error in a loop must not
        # flood the daemon's log.
        now = time.monotonic()
        if not self._error_logged or now - self._error_logged >= 60.0:
            self._error_logged = now
            (logger.exception if trace else logger.warning)("stalewatch: %s", printable(what))


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _response(
    code: int,
    reason: str,
    body: bytes,
    headers: list[tuple[str, str]] | None = None,
    *,
    head_only: bool = False,
) -> bytes:
    lines = [f"HTTP/1.1 {code} {reason}"]
    fields = headers or [("Content-Type", "text/plain; charset=utf-8")]
    lines += [f"{name}: {value}" for name, value in fields]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + (b"" if head_only else body)
