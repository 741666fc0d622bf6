"""The gunicorn handoff (R9) on a real gunicorn: USR2, a new master beside the old.

Issue 15, item 2: code that failed to import landed while the action ran; gunicorn's
HUP left a master with no worker, and 3,746 connections were refused. With
``handoff = true`` the old master serves until new workers registered on the target,
and a new master whose workers never come up is left to halt, or stopped, while the
old one serves on (failing closed with 409s).
"""

from __future__ import annotations

import json
import os
import select
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from lab_load import Outcome, request
from restart_lab import APP, WAIT, Lab, Load

pytestmark = [pytest.mark.real_server, pytest.mark.slow]

PARSE = json.dumps([sys.executable, "-c", "import ast; ast.parse(open('app.py').read())"])
BROKEN = APP.replace("def inner(environ, start_response):", "def inner(environ, start_response:")
SILENT = APP.replace('source=Daemon(os.environ["STALEWATCH_SOCKET"])', "source=None")  # never registers


def problems(outcomes: list[Outcome]) -> list[Outcome]:
    """Requests refused, reset, cut off or answered 5xx: what a handoff must never cause."""
    return [o for o in outcomes if o.error or (o.status or 0) >= 500]


def test_r9_a_handoff_loses_no_request_and_a_request_in_flight_finishes_on_the_old_code() -> None:
    with (
        Lab("gunicorn-handoff", workers=2, threads=4) as lab,
        Load(lab.port, ["/api/work", "/slow?0.05"]) as load,
    ):
        old_master = lab.master()
        loaded = lab.head()
        held: dict[str, Outcome] = {}
        thread = threading.Thread(
            target=lambda: held.update(o=request(lab.port, "/api/hold")), name="test-held"
        )
        thread.start()
        try:
            lab.gate.entered()
            new = lab.commit("an update")
            draining = lab.wait_for(
                lambda m: m.get("type") == "restart" and (m.get("reason") or "").startswith("drain")
            )
            assert (draining.message["inflight"], draining.message["revision"]) == (1, new)
        finally:
            lab.gate.release()
            thread.join(WAIT)
        assert (held["o"].status, held["o"].revision) == (200, loaded)  # finished, on the old code
        confirmed = lab.wait_for_phase("confirmed", "failed", "refused")
        assert (confirmed.message["phase"], confirmed.message["revision"]) == ("confirmed", new), confirmed
        lab.wait_for_processes(new, 2)  # the old workers finished and left
        load.wait_for(lambda o: o.revision == new and o.start > confirmed.at)
        # Again: the new master took over the pidfile; the next handoff starts from it.
        newer = lab.commit("another update")
        again = lab.wait_for_phase("confirmed", "failed", "refused")
        assert (again.message["phase"], again.message["revision"]) == ("confirmed", newer), again
        lab.wait_for_processes(newer, 2)
        assert lab.master() not in (None, old_master)
    outcomes = load.snapshot()
    assert problems(outcomes) == []
    assert {o.status for o in outcomes} <= {200, 409}


def _wait_gone(pid: int) -> None:
    """Until ``pid`` (a gunicorn master the daemon stopped) has exited (its pidfd, never a sleep)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # gone already
    try:
        assert select.select([fd], [], [], WAIT)[0], f"the new master {pid} did not stop"
    finally:
        os.close(fd)


def test_r9_a_commit_that_breaks_the_import_during_the_handoff_leaves_the_old_master_serving() -> None:
    policy = f"settle = 0.2\nconfirm_timeout = 5\nmax_attempts = 1\nverify = {PARSE}\n"
    with Lab("gunicorn-handoff", workers=2, policy=policy) as lab, Load(lab.port, ["/api/work"]) as load:
        old_master = lab.master()
        with lab.holding_handoff():
            target = lab.commit("a good update")
            lab.handoff_gate.entered()  # USR2 was sent: the new master waits before its workers import
            broken = lab.commit("an updater without the lock breaks it", app=BROKEN)
        failed = lab.wait_for_phase("failed", "confirmed")
        assert (failed.message["phase"], failed.message["revision"]) == ("failed", target), failed
        assert failed.message["reason"].startswith("not-confirmed")
        assert failed.message["reason"].endswith("the old servers still serve (attempt 1 of 1)")
        refused = lab.wait_for_phase("refused", "restarting")  # the broken commit: never acted on
        assert (refused.message["revision"], refused.message["reason"][:13]) == (broken, "verify-failed")
        new_master = lab.master(".2")
        if new_master is not None:  # told failed; its stop is carried out just after
            assert new_master != old_master
            _wait_gone(new_master)  # a master killed before its workers booted may leave
            # its <pidfile>.2 behind: the daemon ignores one naming no running process
        assert lab.master() == old_master

        # Fail closed: from the refusal on, only 409s, and once the workers heard it
        # (a line after the daemon's `at`), they say no restart is coming.
        def told(o: Outcome) -> bool:
            return o.start > refused.at and (o.status != 409 or o.payload.get("restart_scheduled") is False)

        after = load.wait_for(told)
        assert after.status == 409 and after.payload["restart_scheduled"] is False
    outcomes = load.snapshot()
    assert problems(outcomes) == []
    assert {o.status for o in outcomes} == {200, 409}


def test_r9_new_servers_that_never_register_are_stopped_and_the_old_master_serves_on() -> None:
    policy = "settle = 0.2\nconfirm_timeout = 4\nmax_attempts = 1\n"
    with Lab("gunicorn-handoff", workers=2, policy=policy) as lab, Load(lab.port, ["/api/work"]) as load:
        old_master = lab.master()
        lab.commit("an update whose servers never register", app=SILENT)
        failed = lab.wait_for_phase("failed", "confirmed")
        assert failed.message["phase"] == "failed", failed
        assert failed.message["reason"].endswith("the old servers still serve (attempt 1 of 1)")
        stopping = lab.wait_for_log("stopping the new master")  # carried out after it was told
        assert "sent SIGTERM to pid" in stopping, stopping
        new_master = int(stopping.split("sent SIGTERM to pid ")[1].split(";")[0])
        assert new_master != old_master
        _wait_gone(new_master)
        assert lab.master() == old_master
        since = time.time()
        after = load.wait_for(lambda o: o.start > since)
        assert after.status == 409  # only the old master's workers answer: stale, failing closed
    assert problems(load.snapshot()) == []


def test_r9_two_commits_while_the_retired_old_master_finishes_unseen_work_never_refuse_a_connection() -> None:
    """Review of issue 15: after a confirmed handoff the retired old master finishes a long
    unguarded response (``graceful_timeout``) and ``<pidfile>.2`` stays until it exits.
    Its worker, still registered past ``confirm_timeout``, made the same revision wanted
    again; the next action found the ``.2`` pending, failed, and the abort stopped the new
    master, all that served: every connection refused. Now the old servers count for
    nothing while they leave, and the next commit waits for the handoff under way."""
    policy = "settle = 0.2\nconfirm_timeout = 6\n"  # shorter than graceful_timeout (30)
    with Lab("gunicorn-handoff", workers=2, policy=policy) as lab, Load(lab.port, ["/api/work"]) as load:
        held: dict[str, Outcome] = {}
        thread = threading.Thread(target=lambda: held.update(o=request(lab.port, "/hold")), name="test-held")
        thread.start()
        try:
            lab.gate.entered()  # an old worker is at it: the restart cannot see it (not guarded)
            first = lab.commit("an update")
            confirmed = lab.wait_for_phase("confirmed", "failed", "refused")
            assert (confirmed.message["phase"], confirmed.message["revision"]) == ("confirmed", first), (
                lab.why(confirmed)
            )
            assert lab.master(".2") is not None  # the old master still finishes the response
            # Past confirm_timeout with the old worker still registered: nothing is wanted.
            with pytest.raises(TimeoutError):
                lab.wait_for(lambda m: m.get("type") == "restart" and m.get("phase") != "confirmed", 7.0)
            second = lab.commit("another update")
            waiting = lab.wait_for(
                lambda m: m.get("type") == "restart" and (m.get("reason") or "").startswith("handoff:")
            )
            assert (waiting.message["phase"], waiting.message["revision"]) == ("waiting", second), waiting
            assert lab.master(".2") is not None
        finally:
            lab.gate.release()
            thread.join(WAIT)
        assert held["o"].status == 200  # finished, on the old code
        again = lab.wait_for_phase("confirmed", "failed", "refused")
        assert (again.message["phase"], again.message["revision"]) == ("confirmed", second), again.message
        lab.wait_for_processes(second, 2)
        load.wait_for(lambda o: o.revision == second)
    outcomes = load.snapshot()
    assert problems(outcomes) == []
    assert {o.status for o in outcomes} <= {200, 409}
