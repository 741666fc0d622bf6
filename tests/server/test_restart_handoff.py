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
        assert lab.master() == old_master and lab.master(".2") is None
        after = load.wait_for(lambda o: o.start > refused.at)
        assert after.status == 409 and after.payload["restart_scheduled"] is False  # fail closed
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
        try:
            fd = os.pidfd_open(new_master)
        except ProcessLookupError:
            pass  # gone already
        else:
            try:
                assert select.select([fd], [], [], WAIT)[0], "the new master did not stop"
            finally:
                os.close(fd)
        assert lab.master() == old_master
        since = time.time()
        after = load.wait_for(lambda o: o.start > since)
        assert after.status == 409  # only the old master's workers answer: stale, failing closed
    assert problems(load.snapshot()) == []
