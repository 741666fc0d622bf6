"""A WSGI application guarded by stalewatch, served by the standard library.

Run it against any git checkout, open the page, then commit in the checkout: the page
shows the restart banner at once (Server-Sent Events) and ``POST /api/chat`` answers
409 instead of running code from two revisions::

    python scripts/example_wsgi.py /path/to/checkout --port 8000

Routes: ``/`` (the page), ``POST /api/chat`` (guarded), ``/events`` (the stream).

With ``--daemon SOCKET`` the guard is fed by a stalewatch daemon; when the daemon has
a restart policy the page shows "restarting…" and reloads itself once the server is
back on the new revision.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from stalewatch import Daemon, Guard
from stalewatch.sse import EventStream
from stalewatch.web import WSGIBarrier

PAGE = b"""<!doctype html>
<title>stalewatch example</title>
<p id="banner" hidden style="background:#fdd;padding:1em"></p>
<p>Status: <b id="status">connecting</b> (loaded <code id="loaded">?</code>)</p>
<button onclick="chat()">POST /api/chat</button> <span id="answer"></span>
<script>
// Each line logged here is also what the headless-browser test reads.
const say = (what) => console.log("stalewatch " + JSON.stringify(what));
const banner = document.getElementById("banner");
const coming = ["scheduled", "waiting", "verifying", "restarting"];
let loaded = null;
let pending = null;  // the restart phase last told, while one is coming or failed
function restart(r) {
  if (!r) return;
  if (r.phase === "idle" || r.phase === "confirmed") { pending = null; return; }
  pending = r;
  banner.hidden = false;
  banner.textContent = coming.includes(r.phase)
    ? "The code was updated: restarting\u2026 (" + r.phase + (r.reason ? ": " + r.reason : "") + ")"
    : "The code was updated; the automatic restart " + r.phase + ": " + r.reason + ". Restart the server.";
  say({event: "restart", phase: r.phase});
}
const events = new EventSource("/events");
for (const name of ["current", "stale", "unreadable", "untracked"]) {
  events.addEventListener(name, (message) => {
    const data = JSON.parse(message.data);
    if (data.type === "snapshot" && loaded !== null && data.loaded_revision !== loaded) {
      say({event: "reload", from: loaded, to: data.loaded_revision});
      location.reload();  // a new server runs the new code: load its page
      return;
    }
    loaded = data.loaded_revision;
    document.getElementById("loaded").textContent = (loaded || "").slice(0, 7);
    document.getElementById("status").textContent = name;
    if (name === "stale" || name === "unreadable") {
      banner.hidden = false;
      banner.textContent = "The code was updated while this server was running: restart it.";
    } else {
      banner.hidden = true;
    }
    // The daemon tells a restart before the change it is for: an event after it keeps it.
    restart(data.restart || (name === "stale" ? pending : null));
    say({event: data.type, status: name, loaded: loaded});
  });
}
events.addEventListener("restart", (message) => restart(JSON.parse(message.data)));
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
    parser.add_argument(
        "--daemon", metavar="SOCKET", help="a stalewatch daemon's socket: learn from it (and its restarts)"
    )
    return parser.parse_args()


def guard_for(args: argparse.Namespace) -> Guard:
    """The guard both examples use: a local watcher, or the daemon at ``--daemon``."""
    source = Daemon(args.daemon) if args.daemon else None
    return Guard.for_checkout(args.checkout, source=source)


def main() -> None:
    args = arguments(__doc__.splitlines()[0])

    with guard_for(args) as guard:
        stream = EventStream(guard, retry_ms=500)  # back soon after a restart
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
