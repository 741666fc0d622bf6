"""Automatic restart end to end: real gunicorn and supervisord, a real daemon, load, commits.

Each server runs a WSGI app from a git checkout (scripts/restart_lab.py): its guard is
fed by the daemon, registers the revision it loaded, and answers /api/* with 409 once
stale. A few threads keep sending requests while commits land; every outcome is
checked afterwards against the daemon's phases.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from gitrepo import GIT_ENV
from lab_load import Gate, free_port, request, stop_group
from restart_lab import Lab, Line, Load, Outcome
from tests.support.daemons import Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo, make_repo
from tests.support.restarts import config, phases

pytestmark = pytest.mark.real_server

COMMITS = 3


Done = tuple[str, float, Line, Line]
"""A commit: its revision, when it was made, its ``scheduled`` and ``confirmed`` lines."""


def run_commits(lab: Lab, load: Load, workers: int) -> list[Done]:
    """Commit ``COMMITS`` times; each ends confirmed with every worker on it."""
    done = []
    for number in range(COMMITS):
        committed_at = time.time()
        new = lab.commit(f"commit {number}")
        scheduled = lab.wait_for(
            lambda m, new=new: (
                m.get("type") == "restart" and m.get("phase") == "scheduled" and m["revision"] == new
            )
        )
        confirmed = lab.wait_for_phase("confirmed", "failed", "refused")
        assert (confirmed.message["phase"], confirmed.message["revision"]) == ("confirmed", new), lab.why(
            confirmed
        )
        lab.wait_for_processes(new, workers)
        # The new code serves a request that started after the confirmation.
        load.wait_for(lambda o, new=new, at=confirmed.at: o.start > at and o.revision == new)
        done.append((new, committed_at, scheduled, confirmed))
    assert load.snapshot(), "no request was made"
    return done


def check_served(outcomes: list[Outcome], done: list[Done]) -> None:
    """After each confirmation, only the new code answers; before it, 409s say a restart comes."""
    refused: list[Outcome] = []
    for index, (new, _, scheduled, confirmed) in enumerate(done):
        until = done[index + 1][1] if index + 1 < len(done) else float("inf")  # the next commit
        after = [o for o in outcomes if confirmed.at < o.start and o.end < until and o.status]
        assert after, "no request after the confirmation"
        assert {(o.status, o.revision) for o in after} == {(200, new)}
        refused += [o for o in outcomes if o.status == 409 and scheduled.at < o.start < confirmed.at]
    assert refused, "no 409 while a restart was coming"
    for outcome in refused:
        assert outcome.payload["restart_scheduled"] is True, outcome.payload
        assert outcome.payload["retry_after"] >= 1
        assert outcome.retry_after == str(outcome.payload["retry_after"])


def test_r5_r7_gunicorn_graceful_reload_loses_no_request() -> None:
    workers = 4
    with Lab("gunicorn", workers=workers) as lab, Load(lab.port, ["/api/work", "/slow?0.05"]) as load:
        done = run_commits(lab, load, workers)
    outcomes = load.snapshot()
    assert [o for o in outcomes if o.error] == []  # not one connection error
    assert [o for o in outcomes if o.status and o.status >= 500] == []  # not one 5xx
    check_served(outcomes, done)


def test_r5_r7_supervisord_stop_and_start_cuts_no_accepted_request() -> None:
    with Lab("supervisord", workers=2, policy="settle = 0.5\n") as lab:
        with Load(lab.port, ["/api/work", "/slow?0.2"]) as load:
            done = run_commits(lab, load, 2)
        outcomes = load.snapshot()
        lines = list(lab.lines)
    # The old server finishes every request it began to answer (a graceful stop).
    assert [o for o in outcomes if o.cut] == []
    assert [o for o in outcomes if o.status and o.status >= 500] == []
    check_served(outcomes, done)
    # While no server listens, connections are refused; those the kernel had queued
    # for the old one when it stopped listening are reset before any response. Both
    # happen only inside the window announced (retry_after) by the daemon's phases,
    # which every 409 relays.
    unserved = [o for o in outcomes if o.unserved]
    assert {o.error for o in unserved} <= {
        "ConnectionRefusedError",
        "ConnectionResetError",
        "RemoteDisconnected",
    }
    announced = sorted(
        (line.at, line.at + line.message["retry_after"])
        for line in lines
        if line.message.get("type") == "restart" and line.message.get("retry_after") is not None
    )
    announced += sorted(
        (o.end, o.end + o.payload["retry_after"])
        for o in outcomes
        if o.status == 409 and o.payload.get("restart_scheduled")
    )
    for outcome in unserved:  # when it failed: a queued connection is reset late
        assert any(start <= outcome.end <= end for start, end in announced), (
            f"unserved at {outcome.end} outside every announced window"
        )


def test_r5_status_socket_shows_who_runs_which_revision() -> None:
    with Lab("gunicorn", workers=2) as lab:
        loaded = lab.head()
        out = subprocess.run(
            [sys.executable, "-m", "stalewatch", "status", "--socket", str(lab.socket)],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert f"servers: 2 on {loaded[:7]} (pids " in out
        assert "restart: idle" in out


# -- issue 15 on real servers -----------------------------------------------------------------


@pytest.mark.slow
def test_r7_every_409_while_the_min_interval_runs_says_when_the_new_code_answers() -> None:
    """Issue 15 item 3: the 409s said `retry_after: 2` while 28 s of min-interval were left."""
    with Lab("gunicorn", workers=2, policy="settle = 0.2\nmin_interval = 4\n") as lab:
        with Load(lab.port, ["/api/work"]) as load:
            lab.commit("first")
            assert lab.wait_for_phase("confirmed", "failed").message["phase"] == "confirmed"
            second = lab.commit("second, within the interval")
            waiting = lab.wait_for(
                lambda m: m.get("type") == "restart" and (m.get("reason") or "").startswith("min-interval")
            )
            confirmed = lab.wait_for_phase("confirmed", "failed")
            assert confirmed.message["revision"] == second
            lab.wait_for_processes(second, 2)
            answered = load.wait_for(lambda o: o.revision == second)
        outcomes = load.snapshot()
    told = [o for o in outcomes if o.status == 409 and waiting.at < o.start < confirmed.at]
    assert told, "no 409 while the interval ran"
    for outcome in told:
        # What the client was told to wait covers the wait: the new code answered by then
        # (a whole-second Retry-After, rounded up, and the measure's own noise of 0.5 s).
        assert outcome.end + int(outcome.retry_after or 0) + 0.5 >= answered.start, outcome.payload


@pytest.mark.slow
def test_r6_r10_a_client_registering_old_code_over_and_over_restarts_gunicorn_at_most_max_attempts() -> None:
    """Issue 15 item 5 against a real server: the lie is bounded, the server keeps serving."""
    with Lab("gunicorn", workers=2, policy="settle = 0.2\nmax_attempts = 2\n") as lab:
        loaded = lab.head()
        with Load(lab.port, ["/api/work"]) as load:
            new = lab.commit("an update")
            assert lab.wait_for_phase("confirmed").message["revision"] == new
            lab.wait_for_processes(new, 2)
            outcomes = []
            for _ in range(4):
                with socket.socket(socket.AF_UNIX) as liar:
                    liar.connect(str(lab.socket))
                    register = {"type": "register", "checkout": str(lab.checkout), "revision": loaded}
                    liar.sendall(json.dumps(register).encode() + b"\n")
                    outcome = lab.wait_for_phase("restarting", "refused")
                    outcomes.append(outcome.message["phase"])
                if outcomes[-1] == "refused":
                    break
                lab.wait_for_phase("confirmed", "failed")
        assert outcomes == ["restarting", "refused"], outcomes  # the update's own restart was the first
        assert [o for o in load.snapshot() if o.error or (o.status or 0) >= 500] == []


PLAIN = """\
import json, os, socket, subprocess

REVISION = subprocess.run(
    ["git", "rev-parse", "HEAD"], cwd=os.path.dirname(os.path.abspath(__file__)),
    capture_output=True, text=True, check=True,
).stdout.strip()


def app(environ, start_response):
    body = json.dumps({"revision": REVISION, "pid": os.getpid()}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
"""

READY = """\
import os, socket

def post_worker_init(worker):
    with socket.socket(socket.AF_UNIX) as gate:
        gate.connect(os.environ["GATE"])
        gate.sendall(b"up")
"""


def test_r10_a_daemon_started_after_the_move_restarts_gunicorn_still_on_the_old_code(
    tmp_path: Path,
) -> None:
    """Issue 15 item 4 on a real gunicorn whose app does not register: the daemon tells
    what its workers run from their start time and HEAD's reflog."""

    def commit_at(when: float, message: str) -> str:
        env = {**GIT_ENV, "GIT_COMMITTER_DATE": f"@{int(when)} +0000"}
        for args in (["add", "app.py"], ["commit", "-q", "-m", message]):
            subprocess.run(["git", *args], cwd=repo.path, env=env, check=True, timeout=30)
        return repo.head()

    repo = make_repo(tmp_path / "checkout", initial=False)
    repo.write("app.py", PLAIN)
    now = time.time()
    loaded = commit_at(now - 100, "the app")
    with short_dir() as workdir:
        gate = Gate(workdir / "ready.sock")
        (workdir / "conf.py").write_text(READY)
        port, pidfile = free_port(), workdir / "gunicorn.pid"
        argv = [
            str(Path(sys.executable).parent / "gunicorn"), "--config", str(workdir / "conf.py"),
            "--workers", "2", "--bind", f"127.0.0.1:{port}", "--chdir", str(repo.path),
            "--pid", str(pidfile), "app:app",
        ]  # fmt: skip
        with (workdir / "server.log").open("wb") as log:
            server = subprocess.Popen(
                argv,
                stdout=log,
                stderr=log,
                env={**os.environ, "GATE": str(gate.path)},
                start_new_session=True,
            )
        try:
            gate.entered()
            gate.entered()  # both workers imported the app
            assert request(port, "/").revision == loaded
            with (repo.path / "app.py").open("a") as out:
                out.write("# an update\n")
            moved = commit_at(now + 100, "an update, after the workers started")
            cfg = config(workdir, repo, action=None, pidfile=pidfile, signal="HUP", settle=0.2)
            with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
                greet(sub)
                seen = phases(sub, "confirmed", "failed", "refused")
                assert (seen[-1]["phase"], seen[-1]["revision"]) == ("confirmed", moved), seen
                gate.entered()
                gate.entered()  # HUP: two new workers
                assert request(port, "/").revision == moved
                assert "the server started when HEAD was " + loaded[:7] in daemon.log_text()
        finally:
            stop_group(server.pid)
            server.wait(timeout=30)
            gate.close()


def test_r4_a_server_the_action_starts_in_the_background_keeps_its_output(git_repo: Repo) -> None:
    """Issue 15 item 6: `sh -c './serve &'`; here the example server, its log piped through
    `tee` (into a FIFO the test reads) as a service script would; the action's end must
    cut neither the server nor its log."""
    example = Path(__file__).resolve().parents[2] / "scripts" / "example_wsgi.py"
    with short_dir() as workdir:
        port, fifo, group = free_port(), workdir / "serve.log", workdir / "group"
        os.mkfifo(fifo)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        serve = (
            f"echo $$ > {group}; {sys.executable} {example} {git_repo.path} --port {port}"
            f" --daemon {workdir / 'd.sock'} 2>&1 | tee -a {fifo} &"
        )
        cfg = config(workdir, git_repo, action=["sh", "-c", serve])
        try:
            with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
                greet(sub)
                new = git_repo.commit()
                assert phases(sub, "confirmed", "failed")[-1]["phase"] == "confirmed"
                log = _until(reader, b"serving ", b"")  # it listens
                for number in range(8):  # 16 KiB lines: more than a pipe holds, after the action's end
                    answer = request(port, f"/{number}{'x' * 16384}")
                    assert (answer.status, answer.error) == (200, None), answer
                    log += _read_available(reader)
                marker = f"/marker-{new}"
                assert request(port, marker).status == 200
                _until(reader, marker.encode(), log)  # tee still writes: it was not killed
        finally:
            os.close(reader)
            if group.exists():
                stop_group(int(group.read_text()))


WAIT_LINE = 10.0


def _until(fd: int, wanted: bytes, log: bytes) -> bytes:
    """Read the FIFO until ``wanted`` is in what was read (with ``log``, read before)."""
    deadline = time.monotonic() + WAIT_LINE
    while wanted not in log:
        assert time.monotonic() < deadline, f"{wanted!r} never came: the log stopped"
        log += _read_available(fd, wait=deadline - time.monotonic())
    return log


def _read_available(fd: int, wait: float = 0.0) -> bytes:
    """What the FIFO holds now (waiting up to ``wait`` s for something)."""
    ready, _, _ = select.select([fd], [], [], max(0.0, wait))
    data = b""
    while ready:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    return data
