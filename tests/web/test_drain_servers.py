"""A request in flight across a commit finishes, then the restart follows (R8), on real servers.

gunicorn (WSGI, ``gthread`` workers, restarted by HUP through its pid file) and uvicorn
(ASGI, under a real supervisord, restarted by ``supervisorctl restart``) serve an app
from a checkout whose barrier's guard is fed by a real daemon with a restart policy.
A request held open inside the app (it waits on a Unix socket the test answers) keeps
the restart in ``waiting: drain`` while new guarded requests get 409s; once released
it completes on the old code, and only then are the servers restarted onto the new.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemons import WAIT, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo, make_repo

pytestmark = [pytest.mark.real_server, pytest.mark.slow]

BIN = Path(sys.executable).parent
SKIP = ("ping", "health", "event", "snapshot", "pong")

APP = '''\
"""Guarded by stalewatch, fed by the daemon; /api/hold waits until the test answers."""
import asyncio, json, os, socket
from stalewatch import Daemon, Guard
from stalewatch.web import ASGIBarrier, WSGIBarrier

guard = Guard.for_file(__file__, source=Daemon(os.environ["STALEWATCH_SOCKET"])).start()
GATE = os.environ["GATE"]


def body():
    return json.dumps({"revision": guard.loaded_revision, "pid": os.getpid()}).encode()


def inner(environ, start_response):
    if environ["PATH_INFO"] == "/api/hold":
        with socket.socket(socket.AF_UNIX) as gate:
            gate.connect(GATE)
            gate.recv(1)
    data = body()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


async def inner_asgi(scope, receive, send):
    if scope["path"] == "/api/hold":
        reader, writer = await asyncio.open_unix_connection(GATE)
        await reader.read(1)
        writer.close()
    data = body()
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})


app = WSGIBarrier(inner, guard, routes=["/api"])
asgi = ASGIBarrier(inner_asgi, guard, routes=["/api"])
# changes:
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Gate:
    """The Unix socket a held request connects to, and waits on until released."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        self.listener.settimeout(WAIT)
        self.held: list[socket.socket] = []

    def entered(self) -> None:
        conn, _ = self.listener.accept()
        self.held.append(conn)

    def release(self) -> None:
        for conn in self.held:
            with contextlib.suppress(OSError):
                conn.sendall(b"x")
            conn.close()
        self.held.clear()

    def close(self) -> None:
        self.release()
        self.listener.close()


def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request("POST", path)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


class Server:
    """The server under its supervisor, in a session of its own (stopped whole at exit)."""

    def __init__(self, kind: str, workdir: Path, checkout: Path, env: dict[str, str]) -> None:
        self.kind = kind
        self.port = free_port()
        self.workdir = workdir
        log = (workdir / "server.log").open("wb")
        if kind == "gunicorn":
            argv = [
                str(BIN / "gunicorn"), "--workers", "2", "--threads", "4",
                "--bind", f"127.0.0.1:{self.port}", "--chdir", str(checkout),
                "--graceful-timeout", "30", "--pid", str(workdir / "gunicorn.pid"), "app:app",
            ]  # fmt: skip
        else:
            conf = workdir / "supervisord.conf"
            conf.write_text(self._supervisord(checkout, env))
            argv = [str(BIN / "supervisord"), "-c", str(conf)]
        self.proc = subprocess.Popen(
            argv, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            env={**os.environ, **env}, start_new_session=True,
        )  # fmt: skip
        log.close()

    def _supervisord(self, checkout: Path, env: dict[str, str]) -> str:
        d = self.workdir
        where = f"--app-dir {checkout} --host 127.0.0.1 --port {self.port}"
        uvicorn = f"{BIN / 'uvicorn'} {where} --lifespan off app:asgi"
        environment = ",".join(f'{k}="{v}"' for k, v in env.items())
        return textwrap.dedent(
            f"""\
            [supervisord]
            nodaemon=true
            logfile={d / "supervisord.log"}
            pidfile={d / "supervisord.pid"}
            [unix_http_server]
            file={d / "supervisor.sock"}
            [rpcinterface:supervisor]
            supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
            [supervisorctl]
            serverurl=unix://{d / "supervisor.sock"}
            [program:web]
            command={uvicorn}
            environment={environment}
            stopsignal=TERM
            stopwaitsecs=30
            startsecs=0
            autorestart=true
            redirect_stderr=true
            stdout_logfile={d / "web.log"}
            """
        )

    def policy(self) -> str:
        if self.kind == "gunicorn":
            return f'pidfile = "{self.workdir / "gunicorn.pid"}"\nsignal = "HUP"\n'
        argv = [str(BIN / "supervisorctl"), "-c", str(self.workdir / "supervisord.conf"), "restart", "web"]
        return f"action = {json.dumps(argv)}\n"

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=WAIT)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def registered(sub: Subscriber, revision: str, count: int) -> None:
    """Until ``count`` processes are registered, every one on ``revision``."""
    while True:
        processes = sub.next(skip=(*SKIP[:-1], "restart"))
        if processes["type"] != "processes":
            continue
        found = processes["processes"]
        if len(found) == count and all(p["revision"] == revision for p in found):
            return


def listening(port: int, pace: Subscriber) -> None:
    """Until the server accepts connections (it registers as it imports the app, before it
    listens); between tries, the daemon's next line (a ping) paces us."""
    for _ in range(int(2 * WAIT / 0.5)):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        pace.next(skip=())
    raise AssertionError(f"nothing listens on port {port}")


def restart_line(sub: Subscriber, predicate: Any) -> dict[str, Any]:
    while not predicate(line := sub.next("restart", skip=(*SKIP, "processes"))):
        assert line["phase"] not in ("failed", "refused"), line
    return line


@pytest.mark.parametrize("kind", ["gunicorn", "uvicorn"])
def test_r8_a_request_in_flight_across_a_commit_finishes_and_the_restart_follows_it(
    kind: str, workdir: Path, tmp_path: Path
) -> None:
    repo: Repo = make_repo(tmp_path / "checkout", initial=False)
    repo.write("app.py", APP)
    repo.git("add", "app.py")
    repo.git("commit", "-q", "-m", "app")
    old = repo.head()
    gate = Gate(workdir / "gate.sock")
    env = {
        "STALEWATCH_SOCKET": str(workdir / "d.sock"),
        "GATE": str(gate.path),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    server = Server(kind, workdir, repo.path, env)
    workers = 2 if kind == "gunicorn" else 1
    config = workdir / "c.toml"
    config.write_text(
        f'keepalive = 0.5\n[[checkout]]\npath = "{repo.path}"\n[checkout.restart]\n{server.policy()}'
        "settle = 0.2\nmin_interval = 0\nconfirm_timeout = 30\n"
    )
    config.chmod(0o600)
    held: dict[str, Any] = {}
    try:
        with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
            greet(sub)
            registered(sub, old, workers)
            listening(server.port, sub)
            thread = threading.Thread(
                target=lambda: held.update(answer=get(server.port, "/api/hold")), name="test-held"
            )
            thread.start()
            try:
                gate.entered()
                new = repo.commit("update", name="app.py")
                draining = restart_line(sub, lambda m: (m["reason"] or "").startswith("drain"))
                assert (draining["reason"], draining["inflight"], draining["revision"]) == (
                    "drain: 1 in flight",
                    1,
                    new,
                )
                for _ in range(100):  # each worker's client hears the line a moment after us
                    status, payload = get(server.port, "/api/work")
                    assert status == 409 and payload["restart_scheduled"] is True, payload
                    if payload.get("restart_reason") == "drain: 1 in flight":
                        break
                assert payload["restart_inflight"] == 1 and payload["retry_after"] >= 1, payload
            finally:
                gate.release()
                thread.join(WAIT)
            released = draining["at"]
            assert held["answer"] == (200, held["answer"][1]) and held["answer"][1]["revision"] == old
            restarting = restart_line(sub, lambda m: m["phase"] == "restarting")
            assert restarting["at"] > released
            confirmed = restart_line(sub, lambda m: m["phase"] == "confirmed")
            assert confirmed["revision"] == new
            listening(server.port, sub)  # uvicorn registers as it imports, then listens
            status, payload = get(server.port, "/api/work")
            assert (status, payload["revision"]) == (200, new)
    finally:
        server.stop()
        gate.close()
