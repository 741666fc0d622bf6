"""Real servers on loopback for the web tests: wsgiref (threaded) and uvicorn.

Both bind port 0 on 127.0.0.1, serve on a thread, and are stopped and joined on exit,
so no thread outlives a test.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

import uvicorn

from stalewatch.web import ASGIApp, Receive, Scope, Send

TIMEOUT = 10.0


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = False
    block_on_close = True  # server_close() joins every request thread


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve_wsgi(app: WSGIApplication) -> Iterator[int]:
    """Serve ``app`` with wsgiref on a thread per request; yield the port."""
    server = make_server("127.0.0.1", 0, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="test-wsgiref"
    )
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT)


@contextmanager
def serve_asgi(app: ASGIApp) -> Iterator[int]:
    """Serve ``app`` with uvicorn (h11, asyncio) on a thread; yield the port.

    The socket listens before the server thread starts, so requests made at once
    wait in the backlog instead of racing the server's startup.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        http="h11",
        loop="asyncio",
        ws="none",
        lifespan="off",
        log_config=None,
        log_level="warning",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="test-uvicorn")
    thread.start()
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(TIMEOUT)
        sock.close()


@contextmanager
def serve(kind: str, wsgi: WSGIApplication, asgi: ASGIApp) -> Iterator[int]:
    """Serve the WSGI or the ASGI form of the same application."""
    with serve_wsgi(wsgi) if kind == "wsgi" else serve_asgi(asgi) as port:
        yield port


def request(
    port: int, method: str, path: str, body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One real HTTP request; returns (status, headers with lower-case names, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return resp.status, headers, resp.read()
    finally:
        conn.close()


# -- inner applications: echo the request, reading its body -------------------------


def echo_wsgi(environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes]:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    data = json.dumps({"method": environ["REQUEST_METHOD"], "path": environ["PATH_INFO"], "body": len(body)})
    out = data.encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(out)))])
    return [out]


async def echo_asgi(scope: Scope, receive: Receive, send: Send) -> None:
    assert scope["type"] == "http"
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    out = json.dumps({"method": scope["method"], "path": scope["path"], "body": len(body)}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": out})


def route_wsgi(routes: dict[str, WSGIApplication], default: WSGIApplication) -> WSGIApplication:
    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Any:
        return routes.get(environ["PATH_INFO"], default)(environ, start_response)

    return app


def route_asgi(routes: dict[str, ASGIApp], default: ASGIApp) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await routes.get(scope["path"], default)(scope, receive, send)

    return app


# -- reading Server-Sent Events ------------------------------------------------------


class SSEReader:
    """Reads an event stream from a real connection, one message block at a time."""

    def __init__(self, port: int, path: str = "/events") -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
        self.conn.request("GET", path, headers={"Accept": "text/event-stream"})
        self.response = self.conn.getresponse()

    def block(self) -> list[str]:
        """The next non-empty block of lines; EOFError when the stream ended."""
        lines: list[str] = []
        while True:
            raw = self.response.readline()
            if not raw:
                raise EOFError("the stream ended")
            line = raw.decode().rstrip("\r\n")
            if line:
                lines.append(line)
            elif lines:
                return lines

    def message(self, skip: Callable[[list[str]], bool] | None = None) -> dict[str, Any]:
        """The next ``event:`` message as {"event", "id", "data"}; comments are skipped."""
        while True:
            lines = self.block()
            fields = dict(line.split(": ", 1) for line in lines if not line.startswith(":") and ": " in line)
            if "event" not in fields or (skip is not None and skip(lines)):
                continue
            return {"event": fields["event"], "id": fields.get("id"), "data": json.loads(fields["data"])}

    def close(self) -> None:
        # A close-delimited (HTTP/1.0) response owns the socket, not the connection.
        self.response.close()
        self.conn.close()
