"""An ASGI application guarded by stalewatch, served by uvicorn.

Run it against any git checkout, open the page, then commit in the checkout: the page
shows the restart banner at once (Server-Sent Events) and ``POST /api/chat`` answers
409 instead of running code from two revisions::

    pip install uvicorn
    python scripts/example_asgi.py /path/to/checkout --port 8000

Routes: ``/`` (the page), ``POST /api/chat`` (guarded), ``/events`` (the stream).
"""

from __future__ import annotations

import contextlib
import json
import socket
from types import FrameType

import uvicorn

from example_wsgi import PAGE, arguments, guard_for  # the same page and options; scripts/ is on sys.path
from stalewatch import Guard
from stalewatch.sse import EventStream
from stalewatch.web import ASGIApp, ASGIBarrier, Receive, Scope, Send


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """The application being protected: a page and a chat endpoint."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/api/chat":
        body, kind = json.dumps({"ok": True}).encode(), b"application/json"
    else:
        body, kind = PAGE, b"text/html; charset=utf-8"
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build(guard: Guard, stream: EventStream) -> ASGIApp:
    """The application wrapped in a barrier, with the event stream at /events."""
    guarded = ASGIBarrier(application, guard, routes=["/api/chat"], methods=["POST"])

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/events":
            await stream.asgi(scope, receive, send)
        else:
            await guarded(scope, receive, send)

    return app


class Server(uvicorn.Server):
    """uvicorn waits for open responses on shutdown: end the event streams first."""

    stream: EventStream | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.stream is not None:
            self.stream.close()
        super().handle_exit(sig, frame)


def main() -> None:
    args = arguments(__doc__.splitlines()[0])

    # A pre-forking server must start watchers after the fork; one process here.
    with guard_for(args) as guard:
        stream = EventStream(guard, retry_ms=500)  # back soon after a restart
        config = uvicorn.Config(build(guard, stream), ws="none", lifespan="off", log_level="warning")
        server = Server(config)
        server.stream = stream
        # Bind here, so the address (even with --port 0) is known before serving.
        sock = socket.create_server((args.host, args.port))
        print(f"serving {guard.checkout} on http://{args.host}:{sock.getsockname()[1]}/", flush=True)
        # uvicorn re-raises the Ctrl-C it handled once it has stopped: exit quietly.
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=[sock])


if __name__ == "__main__":
    main()
