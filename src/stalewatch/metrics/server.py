"""``MetricsServer``: the daemon's ``/metrics`` over HTTP, on one thread, never starved.

Prometheus scrapes with a ``GET /metrics``. The daemon answers on one thread
(``stalewatch-metrics-http``) running an ``asyncio`` loop of its own: it accepts,
reads each request without blocking, renders the exposition with
``prometheus_client``'s encoder (text or OpenMetrics, as the ``Accept`` header asks;
gzip when accepted) and writes it without blocking. Nothing a client does can hold
that thread: a request must arrive whole and be answered within
:data:`REQUEST_TIMEOUT` seconds of its accept and fit in :data:`MAX_REQUEST` bytes, at
most :data:`MAX_CONNECTIONS` connections are open, and any error is that connection's
alone. When they are all taken, the oldest connection still sending its request (a
slowloris) makes room for a newcomer, never one being answered nor one younger than
:data:`NEWCOMER_GRACE`: an honest scrape sends its request at once and is answered
within that grace. When no connection may be replaced, newcomers wait in the listen
backlog (nothing is accepted) until one closes or a grace ends. With nobody scraping,
the thread sleeps in ``select`` without a timeout: no wake-ups, no CPU.

This is not a general HTTP server: one request per connection (``Connection:
close``), ``GET`` and ``HEAD`` of ``/metrics`` (and ``/``), nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import gzip
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from http import HTTPStatus

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
_OUT_OF = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


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
        self._thread: threading.Thread | None = None
        self._main: asyncio.Task[None] | None = None
        self._stopped = False
        self._connections: dict[asyncio.Task[None], float] = {}  # each one's accept (monotonic)
        self._answering: set[asyncio.Task[None]] = set()  # their request read: never replaced
        self._freed = asyncio.Event()  # a connection closed
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
        if self._thread is None and not self._stopped:
            loop = asyncio.new_event_loop()
            self._main = loop.create_task(self._serve(loop, self._listener))  # type: ignore[arg-type]
            self._thread = threading.Thread(
                target=self._run, args=(loop, self._main), name="stalewatch-metrics-http", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close every connection and the listener. Harmless twice."""
        self._stopped = True
        thread, self._thread = self._thread, None
        if thread is not None and self._main is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                self._main.get_loop().call_soon_threadsafe(self._main.cancel)
            if thread is not threading.current_thread():
                thread.join(timeout=5.0)
                if thread.is_alive():
                    return  # wedged in a collect: leave its sockets to it (the process is ending)
        if self._listener is not None:
            self._listener.close()

    # -- the thread ------------------------------------------------------------------------

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop, main: asyncio.Task[None]) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(main)
        loop.close()

    async def _serve(self, loop: asyncio.AbstractEventLoop, listener: socket.socket) -> None:
        try:
            while True:
                try:
                    await self._make_room()
                    sock, _ = await loop.sock_accept(listener)
                except OSError as exc:
                    if exc.errno in _OUT_OF:  # the backlog keeps it: rest instead of spinning
                        self._log_error(f"cannot accept a scrape: {exc.strerror}", trace=False)
                        await asyncio.sleep(0.1)
                    continue
                except Exception:  # a bug here must not end the endpoint
                    self._log_error("unexpected error in the metrics server; serving on")
                    await asyncio.sleep(0.1)
                    continue
                accepted = time.monotonic()
                task = loop.create_task(self._answer(loop, sock, accepted))
                self._connections[task] = accepted
                task.add_done_callback(functools.partial(self._closed, sock))
                await asyncio.sleep(0)  # a request that waited in the backlog is read (and answered) now
        finally:  # stopped: every connection ends, its socket closed
            for task in self._connections:
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

    async def _make_room(self) -> None:
        """Return once a newcomer may be accepted: a place is free, or the oldest
        connection still sending its request past its grace is closed for it."""
        while len(self._connections) >= MAX_CONNECTIONS:
            coming = {at: task for task, at in self._connections.items() if task not in self._answering}
            oldest = min(coming, default=None)
            wait = None if oldest is None else oldest + NEWCOMER_GRACE - time.monotonic()
            if oldest is not None and wait is not None and wait <= 0:
                coming[oldest].cancel()
                await asyncio.wait([coming[oldest]])
                continue
            self._freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._freed.wait(), wait)

    def _closed(self, sock: socket.socket, task: asyncio.Task[None]) -> None:
        sock.close()
        del self._connections[task]
        self._answering.discard(task)
        self._freed.set()

    async def _answer(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, accepted: float) -> None:
        try:
            async with asyncio.timeout_at(accepted + self._timeout):
                received = bytearray()
                while (end := received.find(b"\r\n\r\n")) < 0 and len(received) <= MAX_REQUEST:
                    if not (data := await loop.sock_recv(sock, 4096)):
                        return
                    received += data
                self._answering.add(asyncio.current_task())  # type: ignore[arg-type]
                head = bytes(received[:end]) if 0 <= end <= MAX_REQUEST else None
                await loop.sock_sendall(sock, self._respond(head))
        except OSError:  # reset, broken pipe, past its deadline: that client's alone
            return
        except Exception:
            self._log_error("unexpected error answering a scrape")

    def _respond(self, head: bytes | None) -> bytes:
        """The whole response to a request head (``None``: too large)."""
        if head is None:
            return _response(431, b"request too large\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response(400, b"bad request\n")
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return _response(405, b"GET /metrics\n", [("Allow", "GET, HEAD")])
        path, head_only = target.split("?", 1)[0], method == "HEAD"
        if path != "/metrics":
            return (
                _response(200, _INDEX, head_only=head_only)
                if path == "/"
                else _response(404, b"not found: try /metrics\n")
            )
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
            return _response(500, b"collecting metrics failed (logged)\n")
        self.scrapes += 1
        extra = [("Content-Type", content_type)]
        if gzip_accepted(headers.get("accept-encoding", "")):
            body = gzip.compress(body, compresslevel=6)
            extra.append(("Content-Encoding", "gzip"))
        return _response(200, body, extra, head_only=head_only)

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
    code: int, body: bytes, headers: list[tuple[str, str]] | None = None, *, head_only: bool = False
) -> bytes:
    lines = [f"HTTP/1.1 {code} {HTTPStatus(code).phrase}"]
    fields = headers or [("Content-Type", "text/plain; charset=utf-8")]
    lines += [f"{name}: {value}" for name, value in fields]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + (b"" if head_only else body)
