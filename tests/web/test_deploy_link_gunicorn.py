"""A real gunicorn served from a deploy link (issue 28 item 2): Capistrano's switch refuses
with 409 at once, and the recipe in docs/deployment.md ("Releases behind a symlink") is
what reloads the new release, by hand or by the daemon's restart; the trap beside it is
proven too.

gunicorn keeps ``--chdir`` as given (``abspath``, not ``realpath``) at the head of
``sys.path``, so the app's ``__file__`` keeps the link, and a HUP's new workers import
through it. A working directory set by whoever starts gunicorn (systemd's
``WorkingDirectory=``, supervisord's ``directory=``) without ``--chdir`` is resolved by the
kernel: ``sys.path`` names the old release, the guard needs ``deploy_link=``, and a HUP
imports the old release again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemons import Subscriber, greet, short_dir, start_daemon
from tests.support.deploys import Releases
from tests.support.ports import free_port
from tests.support.repos import make_repo
from tests.support.restarts import phases
from tests.support.web import request

pytestmark = pytest.mark.real_server

BIN = Path(sys.executable).parent
WAIT = 15.0

APP = """\
import json, os
from stalewatch import Daemon, Guard
from stalewatch.web import WSGIBarrier

socket = os.environ.get("STALEWATCH_SOCKET")
source = Daemon(socket) if socket else None
guard = Guard.for_module(__name__, deploy_link=os.environ.get("DEPLOY_LINK") or None, source=source)
guard.start()


def inner(environ, start_response):
    body = json.dumps({"loaded": guard.loaded_revision, "file": __file__}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


app = WSGIBarrier(inner, guard, routes=["/api"])
"""


@contextlib.contextmanager
def gunicorn(workdir: Path, cwd: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[int]:
    """gunicorn (one sync worker) in a session of its own; yields its port; stopped whole."""
    port = free_port()
    environ = {**os.environ, **(env or {})}
    environ.pop("PWD", None)  # as a supervisor starts it: only the kernel's working directory
    with (workdir / "gunicorn.log").open("wb") as log:
        proc = subprocess.Popen(
            [str(BIN / "gunicorn"), "--bind", f"127.0.0.1:{port}", "--workers", "1",
             "--pid", str(workdir / "gunicorn.pid"), *args, "app:app"],
            cwd=cwd, env=environ, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
    try:
        yield port
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=WAIT)


def answer(port: int, wanted: int, loaded: str | None = None) -> dict[str, str]:
    """Ask until the server answers ``wanted`` (and, for a 200, serves ``loaded``); each
    try is a real request, the deadline bounds them."""
    deadline = time.monotonic() + WAIT
    pause = threading.Event()
    last: object = None
    while time.monotonic() < deadline:
        try:
            status, _, body = request(port, "GET", "/api")
        except OSError as exc:  # not listening yet, or its workers being replaced
            last = exc
        else:
            last = (status, body)
            if status == wanted:
                payload: dict[str, str] = json.loads(body)
                if loaded is None or payload.get("loaded") == loaded:
                    return payload
        pause.wait(0.02)  # between two requests (no spin while gunicorn starts), not instead of a condition
    raise AssertionError(f"no {wanted} within {WAIT} s; last: {last}")


@pytest.fixture
def deploys(tmp_path: Path) -> Releases:
    origin = make_repo(tmp_path / "origin")
    origin.write("app.py", APP)
    origin.git("add", "app.py")
    origin.git("commit", "-q", "-m", "app")
    releases = Releases(tmp_path / "deploy", origin)
    releases.capistrano_switch(releases.export("1", origin.head()))
    return releases


def hup(workdir: Path) -> None:
    pid = int((workdir / "gunicorn.pid").read_text())
    os.kill(pid, signal.SIGHUP)


def test_served_through_chdir_on_the_link_a_switch_is_409_and_hup_loads_the_new_release(
    deploys: Releases, tmp_path: Path
) -> None:
    first = deploys.origin.head()
    with gunicorn(tmp_path, tmp_path, "--chdir", str(deploys.current)) as port:
        served = answer(port, 200, first)
        assert served["file"] == str(deploys.current / "app.py")  # the link, as gunicorn kept it
        second = deploys.origin.commit("two")
        deploys.capistrano_switch(deploys.export("2", second))
        answer(port, 409)
        hup(tmp_path)
        served = answer(port, 200, second)  # the new workers imported the new release


def test_a_working_directory_on_the_link_is_the_trap_hup_reloads_the_old_release(
    deploys: Releases, tmp_path: Path
) -> None:
    first = deploys.origin.head()
    env = {"DEPLOY_LINK": str(deploys.current)}  # the path lost the link: named
    with gunicorn(tmp_path, deploys.current, env=env) as port:
        served = answer(port, 200, first)
        assert served["file"] == str(deploys.current.resolve() / "app.py")  # resolved: the link is lost
        deploys.capistrano_switch(deploys.export("2", deploys.origin.commit("two")))
        answer(port, 409)
        hup(tmp_path)
        # The new worker imported the old release again, and says so: still refused.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            status, _, body = request(port, "GET", "/api")
            assert status == 409, body


@pytest.mark.slow
def test_the_daemon_restarts_gunicorn_onto_the_release_the_link_names(
    deploys: Releases, tmp_path: Path
) -> None:
    # R5, R10 on top: the servers register the release they loaded under the link; the
    # daemon's HUP is confirmed once they run the new one.
    first = deploys.origin.head()
    with short_dir() as workdir:
        pidfile = workdir / "gunicorn.pid"
        config = workdir / "c.toml"
        config.write_text(
            f'keepalive = 0.5\n[[checkout]]\npath = "{deploys.current}"\n[checkout.restart]\n'
            f'pidfile = "{pidfile}"\nsignal = "HUP"\nsettle = 0.2\nmin_interval = 0\nconfirm_timeout = 30\n'
        )
        config.chmod(0o600)
        env = {"STALEWATCH_SOCKET": str(workdir / "d.sock")}
        with (
            start_daemon(workdir, "--config", str(config)) as daemon,
            Subscriber(daemon.socket) as sub,
            gunicorn(workdir, tmp_path, "--chdir", str(deploys.current), env=env) as port,
        ):
            greet(sub)
            answer(port, 200, first)
            while True:  # the worker registered what it loaded, under the link's key
                line = sub.next("processes", skip=("ping", "health", "event", "snapshot", "pong", "restart"))
                if [p["revision"] for p in line["processes"]] == [first]:
                    break
            second = deploys.origin.commit("two")
            deploys.capistrano_switch(deploys.export("2", second))
            last = phases(sub, "confirmed", "failed", "refused")[-1]
            assert (last["phase"], last["revision"]) == ("confirmed", second), last
            answer(port, 200, second)
