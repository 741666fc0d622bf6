"""A WSGI application guarded by stalewatch, served by the standard library.

Run it against any git checkout, open the page, then commit in the checkout: the page
shows the restart banner at once (Server-Sent Events) and ``POST /api/chat`` answers
409 instead of running code from two revisions::

    python scripts/example_wsgi.py /path/to/checkout --port 8000

Routes: ``/`` (the page), ``POST /api/chat`` (guarded), ``/events`` (the stream).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from stalewatch import Guard
from stalewatch.sse import EventStream
from stalewatch.web import WSGIBarrier

PAGE = b"""<!doctype html>
<title>stalewatch example</title>
<p id="banner" hidden style="background:#fdd;padding:1em">
  The code was updated while this server was running: restart it.</p>
<p>Status: <b id="status">connecting</b></p>
<button onclick="chat()">POST /api/chat</button> <span id="answer"></span>
<script>
const events = new EventSource("/events");
for (const name of ["current", "stale", "unreadable", "untracked"]) {
  events.addEventListener(name, () => {
    document.getElementById("status").textContent = name;
    document.getElementById("banner").hidden = name !== "stale" && name !== "unreadable";
  });
}
async function chat() {
  const response = await fetch("/api/chat", {method: "POST", body: "hello"});
  document.getElementById("answer").textContent = response.status + " " + await response.text();
}
</script>
"""


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """wsgiref with a thread per request: each open event stream holds one."""

    daemon_threads = True


def application(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """The application being protected: a page and a chat endpoint."""
    if environ["PATH_INFO"] == "/api/chat":
        body = json.dumps({"ok": True}).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
    start_response(
        "200 OK", [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(PAGE)))]
    )
    return [PAGE]


def build(guard: Guard, stream: EventStream) -> WSGIApplication:
    """The application wrapped in a barrier, with the event stream at /events."""
    guarded = WSGIBarrier(application, guard, routes=["/api/chat"], methods=["POST"])

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ["PATH_INFO"] == "/events":
            return stream.wsgi(environ, start_response)
        return guarded(environ, start_response)

    return app


def arguments(description: str) -> argparse.Namespace:
    """The command line both examples take: a checkout, --host and --port."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("checkout", nargs="?", default=".", help="a git checkout to guard (default: .)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    return parser.parse_args()


def main() -> None:
    args = arguments(__doc__.splitlines()[0])

    with Guard.for_checkout(args.checkout) as guard:
        stream = EventStream(guard)
        server = make_server(args.host, args.port, build(guard, stream), server_class=ThreadingWSGIServer)
        print(f"serving {guard.checkout} on http://{args.host}:{server.server_port}/", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            stream.close()  # ends open streams, so their threads finish
            server.server_close()


if __name__ == "__main__":
    main()
