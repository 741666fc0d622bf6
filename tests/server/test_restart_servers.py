"""Automatic restart end to end: real gunicorn and supervisord, a real daemon, load, commits.

Each server runs a WSGI app from a git checkout (scripts/restart_lab.py): its guard is
fed by the daemon, registers the revision it loaded, and answers /api/* with 409 once
stale. A few threads keep sending requests while commits land; every outcome is
checked afterwards against the daemon's phases.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from restart_lab import Lab, Line, Load, Outcome

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
        assert (confirmed.message["phase"], confirmed.message["revision"]) == ("confirmed", new), confirmed
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
