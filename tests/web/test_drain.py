"""A restart drains the work in flight first (R8), seen from the server's side, with a real daemon.

A request held open inside the application (an event the test sets, never a sleep)
is counted by the barrier; the daemon's restart waits for it (``waiting: drain: 1 in
flight``), guarded requests meanwhile get 409s saying so, the SSE stream tells the
phase with its count, and the action runs only once the request has finished.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stalewatch import Daemon, Guard
from stalewatch.sse import EventStream
from stalewatch.web import WSGIBarrier
from tests.support.children import python_child
from tests.support.daemons import WAIT, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo
from tests.support.restarts import RawServer
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


# slow (quick: end to end of what quick tests cover in parts: test_barrier_work (the count),
# tests/client/test_inflight (its report), test_restart_harmless's
# test_r8_work_in_flight_holds_the_restart_until_it_is_done (the hold))
@pytest.mark.slow
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
                # The app's guard hears the daemon on a connection of its own: wait until
                # it has (this client may be told first).
                told = threading.Event()
                drained = guard.subscribe_restart(
                    lambda state: told.set() if (state.reason or "").startswith("drain") else None
                )
                try:
                    restart = guard.snapshot().restart
                    if restart is None or not (restart.reason or "").startswith("drain"):
                        assert told.wait(WAIT), guard.snapshot().restart
                finally:
                    drained()
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


WORKER = """
import sys
from stalewatch import Daemon, Guard
guard = Guard.for_checkout({checkout!r}, source=Daemon({socket!r})).start()
with guard.work():
    print("working", flush=True)
    sys.stdin.readline()
    guard.stop()  # its connection to the daemon closes; the work goes on
    print("disconnected", flush=True)
    sys.stdin.readline()
"""


def restart_lines_within(sub: Subscriber, seconds: float) -> list[dict[str, Any]]:
    """Every restart line the daemon sends within ``seconds`` (to show one does not come)."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = sub.next(timeout=left, skip=())  # each ping counts: the deadline holds
        except AssertionError:  # no line within the time left
            break
        if line["type"] == "restart":
            seen.append(line)
    return seen


# slow (quick: a real daemon's run of test_restart_machine.py's test of the same name)
@pytest.mark.slow
def test_r8_a_server_whose_connection_drops_mid_drain_is_waited_for_while_its_process_runs(
    workdir: Path, git_repo: Repo
) -> None:
    """Review of issue 15: a server with work in flight whose daemon connection closed took
    its count with it; the drain passed and the action cut off work still running."""
    with (
        start_daemon(workdir, "--config", str(config(workdir, git_repo))) as daemon,
        Subscriber(daemon.socket) as sub,
    ):
        greet(sub)
        old = git_repo.head()
        other = RawServer(daemon.socket, git_repo.path)  # another server, idle, on the old code
        other.register(old)
        code = WORKER.format(checkout=str(git_repo.path), socket=str(daemon.socket))
        with python_child(code, cwd=workdir, env=dict(os.environ), stderr=workdir / "worker.err") as worker:
            assert worker.line() == "working\n"
            while len(sub.next("processes", skip=SKIP[:3])["processes"]) < 2:
                pass
            new = git_repo.commit("update")
            draining = restart_line(sub, lambda m: (m["reason"] or "").startswith("drain"))
            assert (draining["reason"], draining["revision"]) == ("drain: 1 in flight", new)
            worker.send("\n")
            assert worker.line() == "disconnected\n"
            # Its registration is gone, its process and its work are not: no action, at
            # two looks of the drain at least (drain_poll 1 s).
            seen = restart_lines_within(sub, 2.5)
            assert all(m["phase"] == "waiting" for m in seen), seen
            assert action_runs(workdir) == []
            worker.send("\n")
            assert worker.finish() == 0
            exited = time.time()
            restart_line(sub, lambda m: m["phase"] == "restarting")
            while sub.next("restart", skip=SKIP)["phase"] not in ("confirmed", "failed"):
                pass  # the other server is not restarted by the action: not confirmed
        other.close()
        (ran,) = action_runs(workdir)
        assert ran >= exited  # the action came once the process had gone
