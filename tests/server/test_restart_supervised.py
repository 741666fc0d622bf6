"""gunicorn under supervisord (issue 28): every restart ends with the one master it knows.

The handoff (``USR2``) retires the master supervisord started: supervisord then starts
gunicorn again, which cannot bind (``FATAL Exited too quickly``), and the new master runs
unsupervised. The daemon refuses that combination (at start, on reload, before each
restart); ``HUP`` keeps the master, and loses nothing under load.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from lab_load import Outcome
from restart_lab import Lab, Load

pytestmark = [pytest.mark.real_server, pytest.mark.slow]


def problems(outcomes: list[Outcome]) -> list[Outcome]:
    """Requests refused, reset, cut off or answered 5xx."""
    return [o for o in outcomes if o.error or (o.status or 0) >= 500]


def supervised_master(lab: Lab) -> int:
    """``supervisorctl pid web``, checked to be the lab's one master, up (STARTING for its
    first second, supervisord's ``startsecs``; never BACKOFF, EXITED or FATAL)."""
    pid = int(lab.supervisorctl("pid", "web"))
    assert lab.supervisorctl("status", "web").split()[1] in ("STARTING", "RUNNING")
    assert lab.masters() == [pid]
    return pid


def test_a_handoff_under_supervisord_is_refused_and_its_one_master_serves_on() -> None:
    """The daemon started before gunicorn: the refusal comes before the first handoff."""
    with Lab("supervisord-handoff", workers=2) as lab, Load(lab.port, ["/api/work", "/slow?0.05"]) as load:
        before = supervised_master(lab)
        new = lab.commit("an update")
        outcome = lab.wait_for_phase("confirmed", "failed", "refused")
        message = outcome.message
        assert (message["phase"], message["revision"]) == ("refused", new), message
        assert "supervisord" in message["reason"] and 'signal = "HUP"' in message["reason"]
        assert '"supervisorctl", "restart", "web"' in message["reason"]  # its program's name
        assert lab.master(".2") is None  # no USR2 was sent
        load.wait_for(lambda o: o.start > outcome.at and o.status == 409)  # stale, said so
        assert supervised_master(lab) == before
    assert problems(load.snapshot()) == []


def test_the_daemon_refuses_a_handoff_at_start_when_supervisord_runs_the_master() -> None:
    with Lab("supervisord-handoff", workers=1) as lab:
        config = lab.write_config()
        done = subprocess.run(
            [sys.executable, "-m", "stalewatch", "daemon", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        master = supervised_master(lab)
        assert f"checkout[1].restart.handoff: the master (pid {master}) runs under supervisord" in done.stderr
        assert 'Instead: signal = "HUP" without handoff' in done.stderr


def test_a_reload_onto_a_handoff_under_supervisord_is_refused_and_hup_goes_on() -> None:
    with Lab("supervisord-hup", workers=1) as lab:
        master = supervised_master(lab)
        lab.supervisor = "supervisord-handoff"  # its recipe: USR2 and the handoff
        lab.write_config()
        lab.reload()
        line = lab.wait_for_log("runs under supervisord")
        assert "checkout[1].restart.handoff" in line
        new = lab.commit("an update")  # the running policy (HUP) restarts it
        outcome = lab.wait_for_phase("confirmed", "failed", "refused")
        assert (outcome.message["phase"], outcome.message["revision"]) == ("confirmed", new)
        lab.wait_for_processes(new, 1)
        assert supervised_master(lab) == master


def test_hup_under_supervisord_keeps_the_master_and_loses_no_request() -> None:
    with Lab("supervisord-hup", workers=2) as lab:
        master = supervised_master(lab)
        with Load(lab.port, ["/api/work", "/slow?0.05"]) as load:
            for number in range(2):
                new = lab.commit(f"update {number}")
                outcome = lab.wait_for_phase("confirmed", "failed", "refused")
                assert (outcome.message["phase"], outcome.message["revision"]) == ("confirmed", new)
                lab.wait_for_processes(new, 2)
                load.wait_for(lambda o, new=new, at=outcome.at: o.start > at and o.revision == new)
                assert supervised_master(lab) == master
        # supervisord still drives it: a stop and a start through it work.
        assert "stopped" in lab.supervisorctl("stop", "web")
        assert lab.masters() == []
        lab.wait_for(lambda m: m.get("type") == "processes" and not m.get("processes"))
        assert "started" in lab.supervisorctl("start", "web")
        lab.wait_for(lambda m: m.get("type") == "processes" and len(m.get("processes") or []) == 2)
        supervised_master(lab)
    assert problems(load.snapshot()) == []
