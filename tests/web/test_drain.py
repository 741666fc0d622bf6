"""A restart drains the work in flight first (R8), seen from the server's side, with a real daemon.

A request held open inside the application (an event the test sets, never a sleep)
is counted by the barrier; the daemon's restart waits for it (``waiting: drain: 1 in
flight``), guarded requests meanwhile get 409s saying so, the SSE stream tells the
phase with its count, and the action runs only once the request has finished.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stalewatch import Daemon, Guard
from stalewatch.sse import EventStream
from stalewatch.web import WSGIBarrier
from tests.support.daemons import Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo
from tests.support.web import SSEReader, request, route_wsgi, serve_wsgi
from tests.web.test_barrier_work import Gate, Held, held_wsgi

SKIP = ("ping", "health", "event", "snapshot", "processes", "pong")
RECORD = "import sys, time; open(sys.argv[1], 'a').write(f'{time.time()}\\n')"


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def config(workdir: Path, repo: Repo) -> Path:
    """A restart policy whose action records when it ran (nothing is restarted here)."""
    file = workdir / "c.toml"
    action = json.dumps([sys.executable, "-c", RECORD, str(workdir / "runs")])
    file.write_text(
        f'keepalive = 0.5\n[[checkout]]\npath = "{repo.path}"\n[checkout.restart]\n'
        f"action = {action}\nsettle = 0.2\nmin_interval = 0\nconfirm_timeout = 1\n"
    )
    file.chmod(0o600)
    return file


def action_runs(workdir: Path) -> list[float]:
    runs = workdir / "runs"
    return [float(line) for line in runs.read_text().split()] if runs.exists() else []


def restart_line(sub: Subscriber, predicate: Any) -> dict[str, Any]:
    while not predicate(line := sub.next("restart", skip=SKIP)):
        assert line["phase"] not in ("failed", "refused"), line
    return line


def test_r8_the_restart_waits_for_a_request_in_flight_and_says_so_meanwhile(
    workdir: Path, git_repo: Repo
) -> None:
    with (
        start_daemon(workdir, "--config", str(config(workdir, git_repo))) as daemon,
        Subscriber(daemon.socket) as sub,
    ):
        greet(sub)
        guard = Guard.for_checkout(git_repo.path, source=Daemon(daemon.socket))
        gate = Gate()
        stream = EventStream(guard, keepalive=30)
        app = route_wsgi({"/events": stream.wsgi}, WSGIBarrier(held_wsgi(gate), guard, routes=["/api"]))
        with guard, serve_wsgi(app) as port, gate:
            assert sub.next("processes", skip=SKIP[:3])["processes"]
            reader = SSEReader(port)
            try:
                assert reader.message()["data"]["type"] == "snapshot"
                held = Held(port, "/api/hold")
                gate.entered()  # a request in flight since before the commit
                new = git_repo.commit("update")
                draining = restart_line(sub, lambda m: (m["reason"] or "").startswith("drain"))
                assert (draining["phase"], draining["reason"], draining["inflight"]) == (
                    "waiting",
                    "drain: 1 in flight",
                    1,
                )
                assert draining["revision"] == new and draining["retry_after"] >= 1
                # New guarded requests are refused meanwhile, saying what the restart waits for.
                status, headers, body = request(port, "POST", "/api/chat")
                payload = json.loads(body)
                assert status == 409
                assert payload["restart_scheduled"] is True and payload["restart_phase"] == "waiting"
                assert (payload["restart_reason"], payload["restart_inflight"]) == ("drain: 1 in flight", 1)
                assert headers["retry-after"] == str(payload["retry_after"])
                # The page hears the same phase, with its count.
                told = reader.message(skip=lambda lines: "event: restart" not in lines)
                while not (told["data"]["reason"] or "").startswith("drain"):
                    told = reader.message(skip=lambda lines: "event: restart" not in lines)
                assert (told["data"]["phase"], told["data"]["inflight"]) == ("waiting", 1)
                assert action_runs(workdir) == []
                released = time.time()
                gate.release()
                assert held.result() == (200, b"first last")  # finished, not cut off
                restart_line(sub, lambda m: m["phase"] == "restarting")
                # This server is not restarted by the action: the restart ends not confirmed.
                while sub.next("restart", skip=SKIP)["phase"] not in ("confirmed", "failed"):
                    pass
                (ran,) = action_runs(workdir)
                assert ran >= released  # the action came after the request ended
            finally:
                stream.close()
                reader.close()
