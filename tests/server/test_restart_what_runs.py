"""R10 with a real daemon, however it learns what runs (issue 29 items 1 and 2).

A server that does not register is a real ``sleep`` process the ``pid_command`` names;
the reflog's times are set through the committer date (git stamps HEAD's reflog entry
with it), so a start "within the second of a move" is arranged, not waited for.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stalewatch.core.procs import read_proc
from stalewatch.core.status import Event
from stalewatch.server.checkout import Checkout, EventSeen
from stalewatch.server.config import CheckoutConfig
from tests.support.daemons import DaemonProcess, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo, make_repo
from tests.support.restarts import config, names, phases, phases_since, runs


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


@contextmanager
def sleep_server() -> Iterator[subprocess.Popen[bytes]]:
    """A server that never registers: ``sleep``, in a session of its own, killed at the end."""
    server = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        yield server
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)  # its own group: nothing else of ours
        server.wait(timeout=10)


def test_r10_a_server_started_within_the_second_of_an_older_move_is_restarted_after_a_later_one(
    workdir: Path,
) -> None:
    """Issue 29 item 1: the start falls in move A's second, B came seconds later; it said
    `cannot tell` and never restarted a server that runs A or the commit before, not B."""
    repo = make_repo(workdir / "checkout", initial=False)
    with sleep_server() as server:
        proc = read_proc(server.pid)
        assert proc is not None
        before = repo.commit("before", at=proc.start - 100)
        moved = repo.commit("A: the server started within its second", at=proc.start)
        head = repo.commit("B: seconds after the server started", at=proc.start + 3)
        cfg = config(workdir, repo, pid_command=["echo", str(server.pid)])
        with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
            _, (snapshot,) = greet(sub)
            seen = phases_since(snapshot, sub, "confirmed", "failed", "refused")
            assert (seen[-1]["phase"], seen[-1]["revision"]) == ("confirmed", head), names(seen)
            assert runs(workdir) == 1
            # What it loaded is said as it is known: one of two, and not HEAD's.
            assert f"the server runs {before[:7]} or {moved[:7]}, not {head[:7]}" in daemon.log_text()


def _without_restart(cfg: Path) -> None:
    """The configuration without its ``[checkout.restart]`` table (the operator's edit)."""
    cfg.write_text(cfg.read_text().split("[checkout.restart]")[0])


def _reload(daemon: DaemonProcess) -> None:
    daemon.signal(signal.SIGHUP)
    daemon.notes.wait_for(lambda m: m.startswith("RELOADING=1"))
    daemon.notes.wait_for(lambda m: m.startswith("READY=1"))


@pytest.mark.parametrize("before", ["removed", "never", "changed"])
def test_r10_a_restart_table_added_by_sighup_keeps_what_the_servers_run(
    workdir: Path, git_repo: Repo, before: str
) -> None:
    """Issue 29 item 2: the daemon started on A (its servers, which cannot be asked, are
    presumed on A), HEAD moved to B; the table removed and added back by SIGHUP (or
    added for the first time) presumed B, and never restarted; one changed restarted,
    but logged that it presumed B."""
    loaded = git_repo.head()
    hold = workdir / "hold"
    hold.touch()  # the restart waits on it: the table goes before anything restarts
    cfg = config(workdir, git_repo, hold_while=str(hold))
    if before == "never":
        _without_restart(cfg)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        moved = git_repo.commit()
        while before != "never" and not phases(sub, "waiting")[-1]["reason"].startswith("hold"):
            pass  # the settle, then the hold
        if before == "removed":
            _without_restart(cfg)
            _reload(daemon)
            assert phases(sub, "idle")[-1]["reason"] == "no restart policy"
        config(workdir, git_repo)  # the table back, or changed: without the hold
        _reload(daemon)
        seen = phases(sub, "confirmed", "failed", "refused")
        assert (seen[-1]["phase"], seen[-1]["revision"]) == ("confirmed", moved), names(seen)
        assert runs(workdir) == 1
        assert f"presumed to be {loaded[:7]}" in daemon.log_text()
        assert f"presumed to be {moved[:7]}" not in daemon.log_text()


def test_a_revision_is_known_by_the_time_its_event_line_goes_out(git_repo: Repo) -> None:
    """A server that reads an event line and registers its revision is believed (R10).

    An event is delivered after the refresh lock is released, so another thread's read
    may already have applied the next move when the watcher hands B's line over. With
    no reflog to say B was HEAD (core.logAllRefUpdates=false), only the checkout's own
    record does: it must hold B before the line goes out.
    """
    repo = git_repo
    repo.git("config", "core.logAllRefUpdates", "false")
    shutil.rmtree(repo.path / ".git/logs", ignore_errors=True)
    a = repo.git("rev-parse", "HEAD").strip()
    b = repo.git("commit-tree", "-p", a, "-m", "b", f"{a}^{{tree}}").strip()
    c = repo.git("commit-tree", "-p", b, "-m", "c", f"{a}^{{tree}}").strip()
    known_at_post: list[bool] = []
    checkout: Checkout

    def post(message: object) -> None:
        if isinstance(message, EventSeen):
            known_at_post.append(checkout.knows(message.event.current_revision))

    checkout = Checkout(CheckoutConfig(path=Path(repo.path)), post)
    ref = repo.path / ".git/refs/heads/main"
    ref.write_text(b + "\n")
    events: list[Event] = []
    unsubscribe = checkout.guard.subscribe(events.append)
    checkout.guard.refresh()  # B applied (this thread)
    ref.write_text(c + "\n")
    checkout.guard.refresh()  # C applied by "another" strict check before B's delivery
    unsubscribe()
    event_b = next(e for e in events if e.current_revision == b)
    checkout._on_event(event_b)  # the watcher thread delivers B now
    assert known_at_post == [True]
