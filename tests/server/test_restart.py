"""Automatic restart (R1-R7) with a real daemon: every refusal path, the lock, bounds.

The restart action here is a small command that records each run in a file; the
supervised servers of the end-to-end tests are in test_restart_servers.py.
"""

from __future__ import annotations

import errno
import fcntl
import os
import queue
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stalewatch import Daemon, Guard, StaleError
from stalewatch.core.phases import RestartPhase, RestartState
from stalewatch.server import commands
from stalewatch.server.restart.executor import Restarter
from stalewatch.server.restart.inputs import Head
from stalewatch.server.restart.policy import RestartPolicy
from stalewatch.web import stale_payload
from tests.support.daemons import WAIT, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo
from tests.support.restarts import RECORD, SKIP, config, names, phases, runs


def after_start(seen: list[dict[str, Any]]) -> list[str]:
    """The phases' names, but the drain a daemon just started waits while its servers may
    still register (R8: 3 s, whether it shows depends on how long the start took)."""
    waits = [m for m in seen if m["phase"] == "waiting" and m["reason"].startswith("drain: 0 in flight")]
    assert all("the daemon just started" in m["reason"] for m in waits), waits
    return [n for n, m in zip(names(seen), seen, strict=True) if m not in waits]


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def test_r4_r7_a_commit_is_restarted_through_the_action_and_every_phase_is_told(
    workdir: Path, git_repo: Repo
) -> None:
    with (
        start_daemon(workdir, "--config", str(config(workdir, git_repo))) as daemon,
        Subscriber(daemon.socket) as sub,
    ):
        _, (snap,) = greet(sub)
        assert snap["restart"]["phase"] == "idle" and snap["processes"] == []
        new = git_repo.commit()
        seen = phases(sub, "confirmed", "failed", "refused")
        assert after_start(seen) == ["scheduled", "waiting: settle", "restarting", "confirmed"]
        assert {m["revision"] for m in seen} == {new}
        assert all(m["retry_after"] > 0 for m in seen if m["phase"] != "confirmed")
        assert seen[-1]["retry_after"] is None
        assert runs(workdir) == 1
        # The daemon adopted the new revision: it is current again, generations go on.
        event = sub.next("event", skip=("ping", "health", "restart", "processes"))
        assert (event["status"], event["loaded_revision"]) == ("current", new)
        out = subprocess.run(
            [sys.executable, "-m", "stalewatch", "status", "--socket", str(daemon.socket)],
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=True,
        ).stdout
        assert f"restart: confirmed onto {new[:7]}" in out


def test_r6_a_burst_of_commits_restarts_once_onto_the_last(workdir: Path, git_repo: Repo) -> None:
    cfg = config(workdir, git_repo, settle=0.5)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        last = [git_repo.commit(f"burst {i}") for i in range(5)][-1]
        seen = phases(sub, "confirmed", "failed")
        assert (seen[-1]["phase"], seen[-1]["revision"]) == ("confirmed", last)
        assert [m["phase"] for m in seen].count("restarting") == 1
        assert runs(workdir) == 1


def _marker(path: Path, pid: int, started: float) -> None:
    path.write_text(f"{pid}\n{started}\n")


def test_r1_a_live_update_holds_the_restart_until_its_marker_goes(workdir: Path, git_repo: Repo) -> None:
    marker = workdir / ".hermes-update-in-progress"
    _marker(marker, os.getpid(), time.time())  # a live updater: this process
    cfg = config(workdir, git_repo, update_marker=marker)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        git_repo.commit()
        seen = phases(sub, "waiting", timeout=WAIT)
        while not seen[-1]["reason"].startswith("update-running"):
            seen = phases(sub, "waiting")
        assert str(os.getpid()) in seen[-1]["reason"] and runs(workdir) == 0
        marker.unlink()  # the update ended
        assert phases(sub, "confirmed", "failed")[-1]["phase"] == "confirmed"
        assert runs(workdir) == 1


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# Each kind is judged in test_restart_markers.py; the daemon's path is the same for all, so
# one runs in the quick loop and the rest are slow.
@pytest.mark.parametrize(
    "kind",
    [
        "dead-pid",
        *(pytest.param(k, marks=pytest.mark.slow) for k in ("over-age", "malformed", "fifo", "symlink")),
    ],
)
def test_r1_an_update_that_did_not_end_cleanly_refuses_with_the_reason(
    workdir: Path, git_repo: Repo, kind: str
) -> None:
    marker = workdir / ".hermes-update-in-progress"
    if kind == "dead-pid":
        _marker(marker, _dead_pid(), time.time())
    elif kind == "over-age":
        _marker(marker, os.getpid(), time.time() - 7200)
    elif kind == "malformed":
        marker.write_text("not a pid\n")
    elif kind == "fifo":
        os.mkfifo(marker)
    else:
        _marker(workdir / "elsewhere", os.getpid(), time.time())
        marker.symlink_to(workdir / "elsewhere")
    expected = {
        "dead-pid": "not running",
        "over-age": "old",
        "malformed": "malformed",
        "fifo": "not a regular file",
        "symlink": "symlink",
    }[kind]
    cfg = config(workdir, git_repo, update_marker=marker, update_marker_max_age=600)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        git_repo.commit()
        refused = phases(sub, "refused", "confirmed")[-1]
        assert refused["phase"] == "refused", refused
        assert refused["reason"].startswith("update-marker") and expected in refused["reason"]
        assert runs(workdir) == 0


# slow (quick: a real daemon's run of test_restart_machine.py's
# test_r1_a_refusing_marker_refuses_and_the_refusal_lifts_when_it_goes)
@pytest.mark.slow
def test_r1_a_recovery_marker_refuses_incomplete_and_the_refusal_lifts_when_it_goes(
    workdir: Path, git_repo: Repo
) -> None:
    incomplete = git_repo.path / ".update-incomplete"
    incomplete.touch()
    cfg = config(workdir, git_repo, incomplete_markers=[incomplete])
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        git_repo.commit()
        refused = phases(sub, "refused")[-1]
        assert refused["reason"].startswith("incomplete") and runs(workdir) == 0
        incomplete.unlink()  # recovered by hand (or by the next update)
        assert phases(sub, "confirmed", "failed")[-1]["phase"] == "confirmed"
        assert runs(workdir) == 1


def test_r2_a_commit_that_fails_verification_is_refused_and_the_old_server_keeps_answering_409(
    workdir: Path, git_repo: Repo
) -> None:
    git_repo.write("app.py", "VALUE = 1\n")
    git_repo.git("add", "app.py")
    git_repo.git("commit", "-q", "-m", "app")
    cfg = config(workdir, git_repo, verify=[sys.executable, "-c", "import app"])
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        # A server process: fed by the daemon, so it learns about the restart too.
        server = Guard.for_checkout(git_repo.path, source=Daemon(daemon.socket))
        with server:
            assert server.wait_ready(WAIT)
            git_repo.write("app.py", "def broken(:\n")  # a syntax error lands
            git_repo.git("commit", "-q", "-am", "broken")
            seen = phases(sub, "refused", "confirmed")
            assert names(seen)[-2:] == ["verifying", "refused: verify-failed"]
            assert "SyntaxError" in seen[-1]["reason"]
            assert runs(workdir) == 0  # never restarted onto broken code
            deadline = time.monotonic() + WAIT
            while (
                server.snapshot().restart is None
                or server.snapshot().restart.phase is not RestartPhase.REFUSED
            ):
                assert time.monotonic() < deadline, server.snapshot()
                sub.next(skip=())  # let the client catch up: wait on the daemon's next line
            with pytest.raises(StaleError) as caught:
                server.check()  # fail closed: the old server keeps refusing
            payload = stale_payload(caught.value)
            assert payload["restart_scheduled"] is False
            assert payload["restart_reason"].startswith("verify-failed")


def test_r3_an_updater_holding_the_lock_makes_the_restart_wait(workdir: Path, git_repo: Repo) -> None:
    lock = workdir / "update.lock"
    cfg = config(workdir, git_repo, lock=lock, verify=[sys.executable, "-c", "pass"])
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        with lock.open("w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # as `flock LOCK hermes update` does
            git_repo.commit()
            seen = phases(sub, "waiting")
            while not seen[-1]["reason"].startswith("lock"):
                seen += phases(sub, "waiting")
            assert "verifying" in [m["phase"] for m in seen]  # the lock is taken after the probe
            assert runs(workdir) == 0
        assert phases(sub, "confirmed", "failed")[-1]["phase"] == "confirmed"
        assert runs(workdir) == 1


# slow (quick: test_restart_machine.py's test_r6_a_failed_action_is_retried_after_the_interval_then_given_up
# decides it; test_r6_a_failed_attempt_waits_out_the_interval_without_holding_the_lock runs a real daemon)
@pytest.mark.slow
def test_r6_a_failing_action_is_reported_and_not_retried_in_a_tight_loop(
    workdir: Path, git_repo: Repo
) -> None:
    failing = [sys.executable, "-c", RECORD + "; sys.exit(3)", str(workdir / "runs")]
    cfg = config(workdir, git_repo, action=failing, max_attempts=2, min_interval=0.3)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        git_repo.commit()
        seen = phases(sub, "failed")
        assert "action exited 3" in seen[-1]["reason"]
        while "attempt 2 of 2" not in (seen[-1]["reason"] or ""):
            seen = phases(sub, "failed")
        assert runs(workdir) == 2
        for _ in range(3):  # three keepalive periods later, still two runs
            sub.next("ping", skip=("health",))
        assert runs(workdir) == 2


def test_r5_a_restart_not_confirmed_in_time_fails(workdir: Path, git_repo: Repo) -> None:
    cfg = config(
        workdir, git_repo, confirm=[sys.executable, "-c", "raise SystemExit(1)"], confirm_timeout=0.5
    )
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        git_repo.commit()
        failed = phases(sub, "failed", "confirmed")[-1]
        assert failed["phase"] == "failed" and failed["reason"].startswith("not-confirmed")


def test_r5_registered_servers_still_on_the_old_revision_fail_the_confirmation(
    workdir: Path, git_repo: Repo
) -> None:
    cfg = config(workdir, git_repo, confirm_timeout=0.5, max_attempts=1)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        loaded = git_repo.head()
        server = Guard.for_checkout(git_repo.path, source=Daemon(daemon.socket))
        with server:  # a server the action does not restart: it stays on the old code
            line = sub.next("processes", skip=SKIP[:-2])
            assert [p["revision"] for p in line["processes"]] == [loaded]
            assert line["processes"][0]["pid"] == os.getpid()  # the kernel's word, not the client's
            git_repo.commit()
            failed = phases(sub, "failed", "confirmed")[-1]
            assert failed["phase"] == "failed"
            assert f"{loaded[:7]}: pids [{os.getpid()}]" in failed["reason"]


def test_r6_a_newer_commit_during_verification_starts_over_onto_it(workdir: Path, git_repo: Repo) -> None:
    gate = workdir / "gate"
    os.mkfifo(gate)  # the probe blocks until the test writes: the commit lands meanwhile
    probe = [sys.executable, "-c", f"open({str(gate)!r}).read()"]
    cfg = config(workdir, git_repo, verify=probe, verify_timeout=WAIT)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        first = git_repo.commit("first")
        assert phases(sub, "verifying")[-1]["revision"] == first
        second = git_repo.commit("second")
        with gate.open("w") as opened:
            opened.write("go")  # the first probe ends; its result is for an old target
        seen = phases(sub, "verifying")
        assert seen[-1]["revision"] == second
        with gate.open("w") as opened:
            opened.write("go")
        again = phases(sub, "verifying")[-1]  # once more, right before the action (R9)
        assert (again["revision"], again["reason"]) == (second, "before the action")
        with gate.open("w") as opened:
            opened.write("go")
        confirmed = phases(sub, "confirmed", "failed")[-1]
        assert (confirmed["phase"], confirmed["revision"]) == ("confirmed", second)
        assert runs(workdir) == 1  # never restarted onto the first


def test_r5_with_a_probe_a_lazy_server_is_confirmed_once_no_registered_server_runs_old_code(
    workdir: Path, git_repo: Repo
) -> None:
    """A server that loads its code lazily (Hermes WebUI: on the first chat) registers late."""
    cfg = config(workdir, git_repo, confirm=[sys.executable, "-c", "pass"], confirm_timeout=WAIT)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        old = Guard.for_checkout(git_repo.path, source=Daemon(daemon.socket))  # registered, old code
        old.start()
        try:
            assert sub.next("processes", skip=SKIP[:-2])["processes"]
            git_repo.commit()
            assert phases(sub, "restarting")[-1]["phase"] == "restarting"
            sub.next("ping", skip=("health", "restart", "processes"))  # the probe passes meanwhile...
        finally:
            old.stop()  # ...but the old server runs until it goes away
        seen = []
        while not seen or seen[-1].get("phase") not in ("confirmed", "failed"):
            seen.append(sub.next("processes", "restart", skip=("ping", "health", "event", "pong")))
        assert seen[-1]["phase"] == "confirmed"
        gone = next(i for i, m in enumerate(seen) if m["type"] == "processes" and not m["processes"])
        assert gone < len(seen) - 1  # confirmed only after the old server left


def test_r6_a_give_up_stands_for_its_revision_when_head_leaves_and_comes_back(
    workdir: Path, git_repo: Repo
) -> None:
    """Else a HEAD that flaps (an updater's checkout dance) would re-arm every bound."""
    probes = workdir / "probes"
    failing = [sys.executable, "-c", RECORD + "; sys.exit(1)", str(probes)]
    cfg = config(workdir, git_repo, verify=failing)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        loaded = git_repo.head()
        broken = git_repo.commit("broken")
        assert names(phases(sub, "refused"))[-1] == "refused: verify-failed"
        git_repo.git("reset", "-q", "--hard", loaded)
        assert phases(sub, "idle")[-1]["phase"] == "idle"
        git_repo.git("reset", "-q", "--hard", broken)
        again = phases(sub, "refused", "verifying", "scheduled")
        assert names(again) == ["refused: verify-failed"], names(again)  # at once, as it stood
        assert again[-1]["revision"] == broken
        assert len(probes.read_text().splitlines()) == 1  # the probe did not run again


def test_r6_a_failed_attempt_waits_out_the_interval_without_holding_the_lock(
    workdir: Path, git_repo: Repo
) -> None:
    """An updater must be able to take the lock while the daemon waits to retry (R3)."""
    lock = workdir / "update.lock"
    failing = [sys.executable, "-c", "raise SystemExit(3)"]
    cfg = config(workdir, git_repo, action=failing, lock=lock, max_attempts=2, min_interval=WAIT)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        git_repo.commit()
        assert phases(sub, "failed")[-1]["reason"] == "action exited 3"
        seen = phases(sub, "waiting", "restarting")
        while seen[-1]["phase"] == "waiting" and not seen[-1]["reason"].startswith("min-interval"):
            seen = phases(sub, "waiting", "restarting")
        assert seen[-1]["phase"] == "waiting", names(seen)
        with lock.open("w") as updater:
            fcntl.flock(updater, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the daemon held it


def test_r3_the_lock_is_free_when_a_failed_attempt_is_told(workdir: Path, git_repo: Repo) -> None:
    """The phase is told once the lock is released, not before: an updater that takes it
    on `failed` (or on `waiting` for the next attempt) finds it free. The release was a
    job queued behind the phases, and under load a client could win that race."""
    loaded = git_repo.head()
    target = git_repo.commit()
    lock = workdir / "update.lock"
    policy = RestartPolicy(
        action=(sys.executable, "-c", "raise SystemExit(3)"),
        settle=0.0,
        min_interval=60.0,
        lock=lock,
        max_attempts=2,
    )
    told: queue.SimpleQueue[tuple[RestartState, bool]] = queue.SimpleQueue()

    def publish(state: RestartState) -> None:
        # On the restart's own thread, as the phase is told: is the lock free right now?
        free = True
        if state.phase in (RestartPhase.FAILED, RestartPhase.WAITING):
            with lock.open("a") as updater:
                try:
                    fcntl.flock(updater, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    free = False
                else:
                    fcntl.flock(updater, fcntl.LOCK_UN)
        told.put((state, free))

    guard = Guard.for_path(git_repo.path, loaded_revision=loaded)
    restarter = Restarter("checkout", git_repo.path, policy, guard=guard, publish=publish)
    try:
        restarter.start()
        restarter.feed(Head(time.monotonic(), target))
        seen = [told.get(timeout=WAIT)]
        while seen[-1][0].phase is not RestartPhase.WAITING or "min-interval" not in (
            seen[-1][0].reason or ""
        ):
            seen.append(told.get(timeout=WAIT))
        phases_told = [(state.phase.value, state.reason) for state, _ in seen]
        assert RestartPhase.RESTARTING in [state.phase for state, _ in seen], phases_told
        failed = [free for state, free in seen if state.phase is RestartPhase.FAILED]
        assert failed == [True], phases_told
        assert seen[-1][1], phases_told  # waiting for the next attempt: free
    finally:
        restarter.stop()


def test_r5_servers_that_loaded_a_newer_commit_during_the_restart_are_verified_too(
    workdir: Path, git_repo: Repo
) -> None:
    """The probe passed for the target; the servers came up on what landed meanwhile."""
    verify = [sys.executable, "-c", "import sys; sys.exit('broken' in open('module.py').read())"]
    cfg = config(workdir, git_repo, verify=verify, confirm_timeout=WAIT)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        old = Guard.for_checkout(git_repo.path, source=Daemon(daemon.socket))
        old.start()
        try:
            assert sub.next("processes", skip=SKIP[:-2])["processes"]
            target = git_repo.commit("good")
            assert phases(sub, "restarting")[-1]["revision"] == target
        finally:
            old.stop()  # the action's work: the old server goes...
        newer = git_repo.commit("broken")
        with Guard.for_checkout(
            git_repo.path, source=Daemon(daemon.socket)
        ) as new:  # ...a new one loads this
            assert new.snapshot().loaded_revision == newer
            outcome = phases(sub, "confirmed", "failed")[-1]
        assert outcome["phase"] == "failed", outcome
        assert outcome["revision"] == newer
        assert outcome["reason"].startswith(f"verify-failed: the servers loaded {newer[:12]}")


def test_stopping_the_daemon_during_confirmation_does_not_report_a_failure(
    workdir: Path, git_repo: Repo
) -> None:
    cfg = config(
        workdir, git_repo, confirm=[sys.executable, "-c", "raise SystemExit(1)"], confirm_timeout=WAIT
    )
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        git_repo.commit()
        assert phases(sub, "restarting")[-1]["phase"] == "restarting"
        daemon.signal(signal.SIGTERM)
        rest = [m for m in sub.rest() if m["type"] == "restart"]
        assert [m["phase"] for m in rest] == [], rest
        assert daemon.proc.wait(WAIT) == 0
    assert ": failed" not in daemon.log_text()  # nor in the journal: an alert would fire


def test_r6_a_reload_while_the_probe_runs_judges_again_under_the_new_policy(
    workdir: Path, git_repo: Repo
) -> None:
    """The operator fixes a hanging probe and reloads: the old probe's failure is moot."""
    gate = workdir / "gate"
    os.mkfifo(gate)  # the probe blocks until the test writes, then fails unless told "ok"
    gated = [sys.executable, "-c", f"import sys; sys.exit(open({str(gate)!r}).read() != 'ok')"]
    cfg = config(workdir, git_repo, verify=gated, verify_timeout=WAIT)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        git_repo.commit()
        assert phases(sub, "verifying")[-1]["phase"] == "verifying"
        config(workdir, git_repo, verify=[sys.executable, "-c", "pass"])
        daemon.signal(signal.SIGHUP)
        daemon.notes.wait_for(lambda m: m.startswith("RELOADING=1"))
        daemon.notes.wait_for(lambda m: m.startswith("READY=1"))
        with gate.open("w") as opened:
            opened.write("fail")  # the probe of the old policy fails now
        seen = phases(sub, "confirmed", "failed", "refused")
        assert after_start(seen)[-4:] == [
            "verifying",
            "verifying: before the action",
            "restarting",
            "confirmed",
        ], names(seen)
        assert runs(workdir) == 1


def test_r6_r10_a_confirmed_restart_counts_against_the_bound_of_its_revision(
    workdir: Path, git_repo: Repo
) -> None:
    """Else a client registering old code after each confirmation restarts for ever (item 5)."""
    cfg = config(workdir, git_repo, max_attempts=1, confirm_timeout=0.5)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        late = Guard.for_checkout(git_repo.path, source=Daemon(daemon.socket))  # on the old code
        new = git_repo.commit()
        assert phases(sub, "confirmed", "failed")[-1]["phase"] == "confirmed"
        with late:  # registers only now: a server on old code, so a restart is wanted again
            seen = phases(sub, "refused", "failed", "restarting")
        assert (seen[-1]["phase"], seen[-1]["revision"]) == ("refused", new), names(seen)
        assert seen[-1]["reason"].startswith("max-attempts")
        assert runs(workdir) == 1


def test_r6_servers_restarted_by_hand_onto_a_refused_revision_end_the_refusal(
    workdir: Path, git_repo: Repo
) -> None:
    cfg = config(workdir, git_repo, verify=[sys.executable, "-c", "raise SystemExit(1)"])
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        git_repo.commit()
        assert names(phases(sub, "refused"))[-1] == "refused: verify-failed"
        with Guard.for_checkout(git_repo.path, source=Daemon(daemon.socket)):  # loads the new code
            assert phases(sub, "idle", "scheduled", "verifying")[-1]["phase"] == "idle"
        assert runs(workdir) == 0


# slow (quick: test_restart_machine.py's
# test_r5_a_newer_commit_the_new_servers_loaded_is_verified_before_confirming reads HEAD;
# test_r5_servers_that_loaded_a_newer_commit_during_the_restart_are_verified_too runs a real daemon)
@pytest.mark.slow
def test_r5_servers_on_a_commit_the_watcher_has_yet_to_see_are_confirmed_by_reading_head(
    workdir: Path, git_repo: Repo
) -> None:
    """A polling watcher (no inotify here) learns of a commit up to a poll later."""
    slow = {"STALEWATCH_POLL": "1", "STALEWATCH_POLL_INTERVAL": "2"}
    cfg = config(workdir, git_repo, confirm_timeout=WAIT)
    with start_daemon(workdir, "--config", str(cfg), env=slow) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        old = Guard.for_checkout(git_repo.path, source=Daemon(daemon.socket))
        old.start()
        try:
            assert sub.next("processes", skip=SKIP[:-2])["processes"]
            git_repo.commit("target")
            assert phases(sub, "restarting")[-1]["phase"] == "restarting"
        finally:
            old.stop()
        newer = git_repo.commit("landed during the restart")
        with Guard.for_checkout(git_repo.path, source=Daemon(daemon.socket)):  # loads it, registers
            started = time.monotonic()
            outcome = phases(sub, "confirmed", "failed")[-1]
            waited = time.monotonic() - started
        assert (outcome["phase"], outcome["revision"]) == ("confirmed", newer), outcome
        # Without reading HEAD, only the confirm timeout's last look would have seen it.
        assert waited < WAIT / 2, waited


def test_r3_an_error_carrying_out_the_action_is_its_answer_and_the_lock_is_released(
    workdir: Path, git_repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review of issue 15: the action's process started, then waiting for it failed with
    EMFILE (outside commands.run's ``except OSError``): the answer was lost and the machine
    waited for ever holding the lock, so an updater's ``flock`` blocked for ever. (Raised
    here before any process starts: the fault, without a process left behind.)"""
    loaded = git_repo.head()
    target = git_repo.commit()
    lock = workdir / "update.lock"
    policy = RestartPolicy(action=("true",), settle=0.0, min_interval=0.0, lock=lock, max_attempts=1)

    def out_of_descriptors(*args: object, **kwargs: object) -> commands.Outcome:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(commands, "run", out_of_descriptors)
    told: queue.SimpleQueue[RestartState] = queue.SimpleQueue()
    guard = Guard.for_path(git_repo.path, loaded_revision=loaded)
    restarter = Restarter("checkout", git_repo.path, policy, guard=guard, publish=told.put)
    try:
        restarter.start()
        restarter.feed(Head(time.monotonic(), target))  # what the daemon's watcher tells
        seen = [told.get(timeout=WAIT)]
        while seen[-1].phase not in (RestartPhase.FAILED, RestartPhase.CONFIRMED):
            seen.append(told.get(timeout=WAIT))
        failed = seen[-1]
        assert (failed.phase, failed.revision) == (RestartPhase.FAILED, target), seen
        assert failed.reason is not None and "action failed: OSError" in failed.reason
        assert "Too many open files" in failed.reason
        assert RestartPhase.RESTARTING in [s.phase for s in seen]
        with lock.open("w") as updater:  # released (on the worker, after the phase): never held for ever
            fcntl.flock(updater, fcntl.LOCK_EX)  # as `flock LOCK update` waits
    finally:
        restarter.stop()
