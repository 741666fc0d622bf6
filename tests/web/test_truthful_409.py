"""Truthful 409s (R7): a server that sees a commit before a polling daemon says a restart is pending.

A daemon that polls (``STALEWATCH_POLL=1``, or no inotify instance left) learns of a
commit up to a poll after the servers, whose guards re-read HEAD on every check. The
daemon is frozen (SIGSTOP) across the commit so the window is certain, not a race; its
restart policy shows in its snapshot's ``restart``.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stalewatch import Daemon, Guard
from stalewatch.web import WSGIBarrier
from tests.support.daemons import DaemonProcess, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo
from tests.support.web import echo_wsgi, request, serve_wsgi

POLL = {"STALEWATCH_POLL": "1", "STALEWATCH_POLL_INTERVAL": "0.2"}
SKIP = ("ping", "health", "event", "snapshot", "processes")


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def config(workdir: Path, repo: Repo) -> Path:
    """A restart policy whose action only records that it ran (no server restarts here)."""
    file = workdir / "c.toml"
    action = json.dumps([sys.executable, "-c", "pass"])
    file.write_text(
        f'keepalive = 5\n[[checkout]]\npath = "{repo.path}"\n[checkout.restart]\n'
        f"action = {action}\nsettle = 0.05\nmin_interval = 0\nconfirm_timeout = 2\n"
    )
    file.chmod(0o600)
    return file


Refusal = tuple[dict[str, Any], dict[str, str]]
"""A 409's payload and headers."""


def refused_while_frozen(daemon: DaemonProcess, repo: Repo, port: int) -> Refusal:
    """Commit while the daemon cannot see it; the 409 a guarded request gets meanwhile."""
    daemon.signal(signal.SIGSTOP)
    try:
        repo.commit("update")
        status, headers, body = request(port, "POST", "/api/chat")
    finally:
        daemon.signal(signal.SIGCONT)
    assert status == 409, body
    return json.loads(body), headers


def assert_pending(payload: dict[str, Any], headers: dict[str, str]) -> None:
    assert payload["restart_scheduled"] is True and payload["retryable"] is True, payload
    assert payload["restart_phase"] == "scheduled", payload
    assert "restart_reason" not in payload, payload
    assert isinstance(payload["retry_after"], int) and payload["retry_after"] >= 1, payload
    assert headers["retry-after"] == str(payload["retry_after"])


def serving(daemon: DaemonProcess, repo: Repo) -> tuple[Guard, WSGIBarrier]:
    guard = Guard.for_checkout(repo.path, source=Daemon(daemon.socket))
    return guard, WSGIBarrier(echo_wsgi, guard, routes=["/api"])


def test_r7_before_a_polling_daemon_saw_the_first_commit_the_409_says_a_restart_is_pending(
    workdir: Path, git_repo: Repo
) -> None:
    cfg = config(workdir, git_repo)
    with start_daemon(workdir, "--config", str(cfg), env=POLL) as daemon, Subscriber(daemon.socket) as sub:
        _, (snap,) = greet(sub)
        assert snap["restart"]["phase"] == "idle"  # a policy, nothing to do yet
        guard, app = serving(daemon, git_repo)
        with guard, serve_wsgi(app) as port:
            assert sub.next("processes", skip=("ping", "health"))["processes"]
            assert request(port, "POST", "/api/chat")[0] == 200
            payload, headers = refused_while_frozen(daemon, git_repo, port)
            # Not "no automatic restart is configured": the daemon's policy will see it.
            assert_pending(payload, headers)


# slow (quick: test_restart_machine.py's test_r10_a_confirmed_restart_is_what_runs_afterwards decides it;
# test_r7_before_a_polling_daemon_saw_the_first_commit_the_409_says_a_restart_is_pending renders it)
@pytest.mark.slow
def test_r7_after_a_confirmed_restart_a_new_commit_is_not_confirmed(workdir: Path, git_repo: Repo) -> None:
    cfg = config(workdir, git_repo)
    with start_daemon(workdir, "--config", str(cfg), env=POLL) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        loaded = git_repo.commit("first update")  # no server registered: confirmed by the action
        while (line := sub.next("restart", skip=SKIP))["phase"] not in ("confirmed", "failed"):
            pass
        assert (line["phase"], line["revision"]) == ("confirmed", loaded)
        guard, app = serving(daemon, git_repo)  # a server started on the confirmed revision
        with guard, serve_wsgi(app) as port:
            assert sub.next("processes", skip=SKIP[:3])["processes"][0]["revision"] == loaded
            assert request(port, "POST", "/api/chat")[0] == 200
            payload, headers = refused_while_frozen(daemon, git_repo, port)
            assert_pending(payload, headers)  # not "confirmed": that was the revision it runs


@pytest.mark.real_server
@pytest.mark.slow
def test_r7_under_load_in_polling_mode_every_409_says_the_restart_is_coming(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's measurement, as a test: real gunicorn (HUP), a polling daemon and polling
    workers, requests all along three commits; it counted 162 of 818 409s saying "no
    automatic restart is configured" or "confirmed"."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from restart_lab import Lab, Load

    monkeypatch.setenv("STALEWATCH_POLL", "1")  # the daemon and every worker poll (1 s)
    with Lab("gunicorn", workers=2) as lab, Load(lab.port, ["/api/work"]) as load:
        for number in range(3):
            new = lab.commit(f"commit {number}")
            confirmed = lab.wait_for_phase("confirmed", "failed", "refused")
            assert (confirmed.message["phase"], confirmed.message["revision"]) == ("confirmed", new)
            lab.wait_for_processes(new, 2)
            load.wait_for(lambda o, new=new: o.revision == new)
    refused = [o for o in load.snapshot() if o.status == 409]
    assert refused, "no 409 at all: the load missed every restart"
    coming = ("scheduled", "waiting", "verifying", "restarting")
    wrong = [
        o.payload
        for o in refused
        if o.payload.get("restart_scheduled") is not True or o.payload.get("restart_phase") not in coming
    ]
    assert wrong == [], f"{len(wrong)} of {len(refused)} 409s: {wrong[:3]}"
    for outcome in refused:
        assert outcome.payload["retry_after"] >= 1, outcome.payload
        assert outcome.retry_after == str(outcome.payload["retry_after"])
