"""Issue 15 with a real daemon: drain, truthful announcements, what runs, no loop, actions.

The servers here are raw protocol clients (:class:`~tests.support.restarts.RawServer`):
they register the revision and the work in flight the test says, as the WSGI and ASGI
barriers would. The real servers (gunicorn, supervisord) are in
test_restart_servers.py.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.children import Child, python_child
from tests.support.daemons import WAIT, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo, make_repo
from tests.support.restarts import RawServer, config, names, phases, phases_since, runs


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def restart_lines(sub: Subscriber, until: Any, timeout: float = WAIT) -> list[dict[str, Any]]:
    """Restart lines up to and including the first for which ``until(line)`` holds."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not seen or not until(seen[-1]):
        message = sub.next(timeout=max(0.1, deadline - time.monotonic()), skip=())
        if message["type"] == "restart":
            seen.append(message)
    return seen


# -- drain (R8) ------------------------------------------------------------------------------


def test_r8_work_in_flight_holds_the_restart_until_it_is_done(workdir: Path, git_repo: Repo) -> None:
    """Issue 15 item 1: a 40 s agent turn was cut off 4 s after the pull."""
    with (
        start_daemon(workdir, "--config", str(config(workdir, git_repo, drain_poll=0.2))) as daemon,
        Subscriber(daemon.socket) as sub,
        RawServer(daemon.socket, git_repo.path) as old,
    ):
        greet(sub)
        old.register(git_repo.head(), inflight=2)  # two requests in flight
        new = git_repo.commit()
        draining = restart_lines(sub, lambda m: (m["reason"] or "").startswith("drain"))[-1]
        assert (draining["phase"], draining["reason"], draining["inflight"]) == (
            "waiting",
            "drain: 2 in flight",
            2,
        )
        assert draining["retry_after"] >= 0.2 and draining["revision"] == new
        old.inflight(1)
        assert restart_lines(sub, lambda m: m["inflight"] == 1)[-1]["reason"] == "drain: 1 in flight"
        assert runs(workdir) == 0  # nothing cut off
        old.inflight(0)
        assert phases(sub, "restarting")[-1]["revision"] == new
        old.close()  # the supervisor stopped the old server; the new one comes up
        with RawServer(daemon.socket, git_repo.path) as fresh:
            fresh.register(new)
            assert phases(sub, "confirmed", "failed")[-1]["phase"] == "confirmed"
        assert runs(workdir) == 1


# slow (quick: a real daemon's run of test_restart_machine.py's
# test_r8_a_chatty_server_is_told_at_most_once_per_drain_poll)
@pytest.mark.slow
def test_r8_a_chatty_server_costs_each_client_one_line_per_drain_poll(workdir: Path, git_repo: Repo) -> None:
    poll = 0.5
    cfg = config(workdir, git_repo, drain_poll=poll)
    with (
        start_daemon(workdir, "--config", str(cfg)) as daemon,
        Subscriber(daemon.socket) as sub,
        RawServer(daemon.socket, git_repo.path) as chatty,
    ):
        greet(sub)
        chatty.register(git_repo.head(), inflight=1)
        git_repo.commit()
        restart_lines(sub, lambda m: m["inflight"] == 1)
        began = time.monotonic()
        for count in range(2, 502):  # every request in and out, as a busy barrier reports
            chatty.inflight(count)
        chatty.inflight(500)
        told = restart_lines(sub, lambda m: m["inflight"] == 500)
        took = time.monotonic() - began
        assert len(told) <= took / poll + 2, (len(told), took)
        chatty.inflight(0)
        assert phases(sub, "restarting")[-1]["phase"] == "restarting"


# slow (quick: a real daemon's run of test_restart_machine.py's
# test_r8_the_drain_bound_refuses_by_default_and_stands)
@pytest.mark.slow
def test_r8_the_drain_bound_refuses_by_default_and_the_refusal_stands(workdir: Path, git_repo: Repo) -> None:
    cfg = config(workdir, git_repo, drain_timeout=0.5)
    with (
        start_daemon(workdir, "--config", str(cfg)) as daemon,
        Subscriber(daemon.socket) as sub,
        RawServer(daemon.socket, git_repo.path) as busy,
    ):
        greet(sub)
        busy.register(git_repo.head(), inflight=1)
        git_repo.commit()
        refused = phases(sub, "refused", "restarting")[-1]
        assert (refused["phase"], refused["reason"]) == (
            "refused",
            "drain-timeout: 1 still in flight after 0.5 s",
        )
        busy.inflight(0)  # too late: this revision is given up until another or a reload
        sub.next("ping", skip=("health", "processes"))
        sub.next("ping", skip=("health", "processes"))
        assert runs(workdir) == 0


# slow (quick: a real daemon's run of test_restart_machine.py's
# test_r8_r10_a_daemon_just_started_gives_its_servers_time_to_register_again)
@pytest.mark.slow
def test_r8_a_daemon_just_started_waits_for_its_servers_to_register_again(
    workdir: Path, git_repo: Repo
) -> None:
    """A daemon restarted by its supervisor has no registration yet: its servers are
    reconnecting (backing off up to 2 s). A commit meanwhile must not take that silence
    for nothing in flight, or it cuts off the chat turn of a server a moment late."""
    old_revision = git_repo.head()
    cfg = config(workdir, git_repo, reconnect_grace=4, drain_poll=0.2)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        new = git_repo.commit()
        silence = restart_lines(sub, lambda m: (m["reason"] or "").startswith("drain"))[-1]
        assert silence["reason"] == "drain: 0 in flight (the daemon just started: servers may still register)"
        assert silence["revision"] == new and runs(workdir) == 0
        with RawServer(daemon.socket, git_repo.path) as late:  # reconnected, a turn in flight
            late.register(old_revision, inflight=1)
            held = restart_lines(sub, lambda m: m["inflight"] == 1)[-1]
            assert held["reason"] == "drain: 1 in flight" and runs(workdir) == 0
            late.inflight(0)
            assert phases(sub, "restarting")[-1]["revision"] == new
        with RawServer(daemon.socket, git_repo.path) as fresh:  # the supervisor's new server
            fresh.register(new)
            assert phases(sub, "confirmed", "failed")[-1]["phase"] == "confirmed"
        assert runs(workdir) == 1


# -- no client can loop it (R6, R10) --------------------------------------------------------


def test_r10_a_revision_the_checkout_never_had_is_refused_and_restarts_nothing(
    workdir: Path, git_repo: Repo
) -> None:
    """Issue 15 item 5, as reported: a bogus revision, then HEAD on a new connection."""
    with (
        start_daemon(workdir, "--config", str(config(workdir, git_repo))) as daemon,
        Subscriber(daemon.socket) as sub,
    ):
        greet(sub)
        for _ in range(3):
            with RawServer(daemon.socket, git_repo.path) as liar:
                liar.register("f" * 40)
                refused = liar.next("refused", skip=("ping", "health", "processes", "restart"))
                assert refused["request"] == "register" and "was never HEAD" in refused["reason"]
            with RawServer(daemon.socket, git_repo.path) as honest:
                honest.register(git_repo.head())
                assert honest.next("processes", skip=("ping", "health", "restart"))["processes"]
        for _ in range(2):
            sub.next("ping", skip=("health", "processes"))
        assert runs(workdir) == 0
        assert "registration refused" in daemon.log_text()


# slow (quick: a real daemon's run of test_restart_machine.py's
# test_r6_r10_a_client_registering_an_old_revision_gets_at_most_max_attempts_actions)
@pytest.mark.slow
def test_r6_r10_registering_old_code_over_and_over_gets_at_most_max_attempts_actions(
    workdir: Path, git_repo: Repo
) -> None:
    """The exploit with a revision the checkout did have: each round confirms, then lies again."""
    old = git_repo.head()
    new = git_repo.commit()  # HEAD's reflog names both
    cfg = config(workdir, git_repo, max_attempts=3)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        outcomes = []
        for _ in range(6):
            with RawServer(daemon.socket, git_repo.path) as liar:
                liar.register(old)
                outcomes.append(phases(sub, "restarting", "refused")[-1]["phase"])
            if outcomes[-1] == "refused":
                break
            with RawServer(daemon.socket, git_repo.path) as honest:
                honest.register(new)  # confirms, as a restarted server would
                assert phases(sub, "confirmed", "failed")[-1]["phase"] == "confirmed"
        assert outcomes == ["restarting"] * 3 + ["refused"], outcomes
        assert runs(workdir) == 3


# -- never start a stopped server (R10; the Hermes WebUI bug) ----------------------------------


def test_r10_servers_that_registered_and_stopped_are_never_started(workdir: Path, git_repo: Repo) -> None:
    cfg = config(workdir, git_repo, settle=WAIT)  # long enough to act within
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        with RawServer(daemon.socket, git_repo.path) as webui:
            webui.register(git_repo.head())
            moved = git_repo.commit()  # an update...
            assert phases(sub, "waiting")[-1]["revision"] == moved
        with RawServer(daemon.socket, git_repo.path) as webui:  # ...its own restart (Update button)
            webui.register(moved)
            assert phases(sub, "idle")[-1]["phase"] == "idle"
        # Stopped by its user: nothing runs old code. Another update must not start it.
        git_repo.commit()
        for _ in range(3):
            message = sub.next("ping", "restart", "processes", "event", skip=("health",))
            assert message["type"] != "restart", message
        assert runs(workdir) == 0


# -- truthful announcements (R7) --------------------------------------------------------------------


# slow (quick: a real daemon's run of test_restart_machine.py's
# test_r7_retry_after_covers_the_min_interval_left and
# test_r7_every_phase_carries_the_estimate_and_the_earliest_next_action)
@pytest.mark.slow
def test_r7_retry_after_covers_the_min_interval_and_every_phase_says_when(
    workdir: Path, git_repo: Repo
) -> None:
    """Issue 15 item 3: `min-interval: 28 s left` while the 409s said `retry_after: 2`."""
    cfg = config(workdir, git_repo, min_interval=3.0, settle=0.2)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        _, (snap,) = greet(sub)
        assert snap["restart"]["phase"] == "idle" and snap["restart"]["estimate"] > 0.2
        git_repo.commit("first")
        first = phases(sub, "confirmed")
        assert all(m["estimate"] is not None for m in first)
        assert first[-1]["earliest"] == pytest.approx(first[-2]["at"] + 3.0, abs=0.2)  # restarting, then
        second = git_repo.commit("second")
        waiting = phases(sub, "waiting")
        while not waiting[-1]["reason"].startswith("min-interval"):
            waiting = phases(sub, "waiting")
        told = waiting[-1]
        left = float(told["reason"].split()[1])
        assert told["retry_after"] >= left - 1 and told["earliest"] > told["at"]
        confirmed = phases(sub, "confirmed")[-1]
        assert confirmed["revision"] == second
        assert confirmed["at"] <= told["at"] + told["retry_after"] + 0.5  # what was told held
        assert runs(workdir) == 2


# -- actions like hooks (R4) ---------------------------------------------------------------------------

CHILD = """
import os, select, socket, sys
try:
    select.select([os.pidfd_open(int(sys.argv[2]))], [], [], 30)  # the action (its shell) exits
except ProcessLookupError:
    pass  # it has already
for number in range(256):  # 256 KiB after the action's end: more than a pipe holds
    sys.stdout.write(f"{number:04d}" + "x" * 1019 + "\\n")
    sys.stdout.flush()
with socket.socket(socket.AF_UNIX) as report:
    report.connect(sys.argv[1])
    report.sendall(b"alive")
"""


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="os.pidfd_open needs Linux >= 5.3")
def test_r4_a_background_child_of_the_action_keeps_writing_its_output(workdir: Path, git_repo: Repo) -> None:
    """Issue 15 item 6: `sh -c './serve &'`: the child died of SIGPIPE on its first write."""
    script = workdir / "serve.py"
    script.write_text(CHILD)
    report = workdir / "report.sock"
    action = ["sh", "-c", f"{sys.executable} {script} {report} $$ &"]
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(report))
        listener.listen(1)
        listener.settimeout(WAIT)
        with (
            start_daemon(workdir, "--config", str(config(workdir, git_repo, action=action))) as daemon,
            Subscriber(daemon.socket) as sub,
        ):
            greet(sub)
            git_repo.commit()
            assert phases(sub, "confirmed", "failed")[-1]["phase"] == "confirmed"
            connection, _ = listener.accept()
            with connection:
                connection.settimeout(WAIT)
                assert connection.recv(16) == b"alive"  # 256 KiB written after the action ended


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="os.pidfd_open needs Linux >= 5.3")
def test_r4_a_background_child_of_the_pid_command_keeps_writing_its_output(
    workdir: Path, git_repo: Repo
) -> None:
    """The ``pid_command`` runs as an action does: what it leaves behind is drained, not cut."""
    script = workdir / "child.py"
    script.write_text(CHILD)
    report = workdir / "report.sock"
    pid_command = ["sh", "-c", f"{sys.executable} {script} {report} $$ & echo 0"]
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(report))
        listener.listen(1)
        listener.settimeout(WAIT)
        cfg = config(workdir, git_repo, action=["true"], pid_command=pid_command)
        with start_daemon(workdir, "--config", str(cfg)):
            connection, _ = listener.accept()  # asked at start: what runs (R10)
            with connection:
                connection.settimeout(WAIT)
                assert connection.recv(16) == b"alive"  # 256 KiB written after it ended


# -- know what runs (R10) -------------------------------------------------------------------------------

SERVER = """
import os, signal, sys
def told(signum, frame):
    print(signal.Signals(signum).name, flush=True)
signal.signal(signal.SIGHUP, told)
signal.signal(signal.SIGUSR1, told)
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(f"{os.getpid()}\\n")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
print("ready", flush=True)
sys.stdin.read()
"""


@contextmanager
def pid_server(workdir: Path) -> Iterator[Child]:
    """A server that writes its pidfile and says which signals it gets (it never registers)."""
    pidfile = workdir / "server.pid"
    code = f"import sys; sys.argv[1:] = [{str(pidfile)!r}]\n" + SERVER
    with python_child(code, cwd=workdir, env=dict(os.environ), stderr=workdir / "server.err") as child:
        assert child.line().strip() == "ready"
        yield child


def test_r10_a_daemon_started_after_the_move_restarts_a_server_still_on_old_code(workdir: Path) -> None:
    """Issue 15 item 4: it took HEAD as loaded and reported `current` for good."""
    repo = make_repo(workdir / "checkout", initial=False)
    now = time.time()
    repo.commit("loaded", at=now - 100)
    with pid_server(workdir) as server:
        moved = repo.commit("the update", at=now + 100)  # after the server started
        cfg = config(workdir, repo, pidfile=workdir / "server.pid", action=None, signal="HUP")
        with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
            _, (snapshot,) = greet(sub)
            seen = phases_since(snapshot, sub, "confirmed", "failed", "refused")
            assert seen[-1]["phase"] == "confirmed", names(seen)
            assert {m["revision"] for m in seen} == {moved}
            assert server.line().strip() == "SIGHUP"


def test_r10_a_daemon_started_after_the_move_leaves_a_server_on_head_alone(workdir: Path) -> None:
    repo = make_repo(workdir / "checkout", initial=False)
    now = time.time()
    repo.commit("old", at=now - 200)
    head = repo.commit("the update, before the server started", at=now - 100)
    with pid_server(workdir) as server:
        cfg = config(workdir, repo, pidfile=workdir / "server.pid", action=None, signal="HUP")
        with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
            _, (snapshot,) = greet(sub)
            idle = phases_since(snapshot, sub, "idle", "scheduled")[-1]
            assert (idle["phase"], idle["reason"]) == ("idle", f"the server started when HEAD was {head[:7]}")
            newer = repo.commit("a later update", at=now + 100)  # now it runs old code
            assert phases(sub, "confirmed", "failed")[-1]["revision"] == newer
            assert server.line().strip() == "SIGHUP"  # once, for the later update only
            os.kill(server.proc.pid, 10)
            assert server.line().strip() == "SIGUSR1"
