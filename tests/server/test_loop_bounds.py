"""The daemon's loop never stalls (issue 17): a connection flood, a huge reload.

A real daemon process, a real attacker process, an honest client. Assertions are about
bounded behaviour with margins wide enough for a loaded machine, and narrow enough to
fail when the stall is back: a flood used to hold every ping until it ended, a reload
to hold SIGTERM until every new checkout was bound.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.daemons import WAIT, DaemonProcess, LineReader, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo, make_repo

# A client that connects in a loop: connect and close at once, or ("hold") keep up to
# 200 connections open and never read them. It says "flooding" after 100 connections.
FLOOD = r"""
import socket, sys
path, hold, held, n = sys.argv[1], sys.argv[2] == "hold", [], 0
while True:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
    except OSError:
        s.close()
        continue
    n += 1
    if n == 100:
        print("flooding", flush=True)
    if hold:
        held.append(s)
        if len(held) > 200:
            held.pop(0).close()
    else:
        s.close()
"""
PROMPT = 2.0  # seconds: what a ping or an event may take under the flood (it took the flood's length)
WATCHDOG = {"WATCHDOG_USEC": "400000"}  # WATCHDOG=1 every 0.2 s while the daemon shows proof of life


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


@contextmanager
def flooding(daemon: DaemonProcess, mode: str) -> Iterator[subprocess.Popen[bytes]]:
    """An attacker process flooding ``daemon``'s socket, killed (by its pid) at the end."""
    attacker = subprocess.Popen(
        [sys.executable, "-c", FLOOD, str(daemon.socket), mode],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert attacker.stdout is not None
    try:
        assert LineReader(attacker.stdout).line() == "flooding"
        yield attacker
    finally:
        attacker.kill()
        attacker.wait()
        attacker.stdout.close()


def ping_round_trip(sub: Subscriber, number: int) -> float:
    """Seconds from a ping to its pong (events and snapshots in between are skipped)."""
    sent = time.monotonic()
    sub.send(b'{"type":"ping","id":%d}\n' % number)
    while (message := sub.next(skip=("ping", "health", "event", "snapshot")))["type"] != "pong":
        pass
    assert message["id"] == number
    return time.monotonic() - sent


def watchdog_pings(daemon: DaemonProcess, since: float) -> int:
    return sum(1 for when, text in list(daemon.notes.arrivals) if when >= since and text == "WATCHDOG=1")


def sigterm_took(daemon: DaemonProcess) -> float:
    began = time.monotonic()
    daemon.signal(signal.SIGTERM)
    assert daemon.proc.wait(timeout=30) == 0
    return time.monotonic() - began


def _under_a_flood(workdir: Path, repos: list[Repo], mode: str) -> None:
    config = workdir / "c.toml"
    config.write_text("".join(f'[[checkout]]\npath = "{repo.path}"\n' for repo in repos))
    with (
        start_daemon(workdir, "--config", str(config), env=WATCHDOG) as daemon,
        Subscriber(daemon.socket) as sub,
    ):
        greet(sub)
        with flooding(daemon, mode):
            began = time.monotonic()
            for number in range(10):
                assert ping_round_trip(sub, number) < PROMPT
            new = repos[0].commit()
            moved = time.monotonic()
            event = sub.next("event", skip=("ping", "health", "pong"))
            assert (event["current_revision"], time.monotonic() - moved < PROMPT) == (new, True)
            # Past the 3 s a stalled loop may go unnoticed: the watchdog is still told.
            pause = threading.Event()
            while time.monotonic() - began < 3.5:
                assert ping_round_trip(sub, 99) < PROMPT
                pause.wait(0.1)  # between two pings, not instead of a condition
            assert watchdog_pings(daemon, time.monotonic() - 1.0) >= 2
            assert sigterm_took(daemon) < PROMPT  # while the flood goes on
    assert "Traceback" not in daemon.log_text()


# slow (quick: test_a_flood_of_clients_that_never_read_delays_nobody makes the same checks under the other
# flood)
@pytest.mark.slow
def test_a_connect_close_flood_delays_no_ping_event_watchdog_or_sigterm(
    workdir: Path, git_repo: Repo
) -> None:
    _under_a_flood(workdir, [git_repo], "close")


def test_a_flood_of_clients_that_never_read_delays_nobody(workdir: Path, git_repo: Repo) -> None:
    _under_a_flood(workdir, [git_repo], "hold")


@pytest.mark.slow
def test_a_flood_with_a_thousand_checkouts_delays_nobody(workdir: Path, git_repo: Repo) -> None:
    """Each new connection's greeting is a thousand and one lines: kept, not encoded anew.

    One real repository (its commits move), and 999 checkouts in the smallest layout
    git itself accepts (``HEAD``, ``refs/heads/main`` naming a commit, ``objects/``):
    copying a thousand whole repositories costs a slow disk a minute.
    """
    head = git_repo.head()
    checkouts = [git_repo]
    for n in range(999):
        git_dir = workdir / "repos" / f"c{n:04d}" / ".git"
        (git_dir / "refs" / "heads").mkdir(parents=True)
        (git_dir / "objects").mkdir()
        (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
        (git_dir / "refs" / "heads" / "main").write_text(head + "\n")
        checkouts.append(Repo(git_dir.parent))
    _under_a_flood(workdir, checkouts, "hold")


GATED_GIT = """#!/bin/sh
# git, except that `ls-files` first waits until the test opens the gate (a FIFO): a
# binding as slow as the test wants, on a real git.
case " $* " in *" ls-files "*) echo $$ > "$GATE.pid"; read -r _ < "$GATE" ;; esac
exec {git} "$@"
"""


class Gate:
    """A ``git`` whose ``ls-files`` waits at a FIFO until :meth:`open` (see GATED_GIT)."""

    def __init__(self, workdir: Path) -> None:
        real = shutil.which("git")
        assert real is not None
        bin_dir = workdir / "bin"
        bin_dir.mkdir()
        wrapper = bin_dir / "git"
        wrapper.write_text(GATED_GIT.format(git=real))
        wrapper.chmod(0o755)
        self.fifo = workdir / "gate"
        os.mkfifo(self.fifo)
        self.pidfile = workdir / "gate.pid"
        self.env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "GATE": str(self.fifo)}

    def reached(self, daemon: DaemonProcess) -> None:
        """Until a git waits at the gate (the binding got that far)."""
        pause = threading.Event()
        deadline = time.monotonic() + WAIT
        while not self.pidfile.exists():
            assert daemon.proc.poll() is None and time.monotonic() < deadline, "no git at the gate"
            pause.wait(0.02)  # another process's progress

    def open(self) -> None:
        """Let the waiting git through (and wait until it went, by its pid)."""
        if not self.pidfile.exists():
            return
        pid = int(self.pidfile.read_text())
        pause = threading.Event()
        deadline = time.monotonic() + WAIT
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            with contextlib.suppress(OSError):  # ENXIO: not at the FIFO yet
                os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
            pause.wait(0.02)  # another process finishing


@contextmanager
def gated_git(workdir: Path) -> Iterator[Gate]:
    """A gate, opened at the end whatever happened (no git left waiting)."""
    gate = Gate(workdir)
    try:
        yield gate
    finally:
        gate.open()


def test_a_reload_is_bound_off_the_loop_and_sigterm_cuts_it_short(workdir: Path, git_repo: Repo) -> None:
    """While a new checkout's binding waits on git, pings and a staying checkout's
    events are served, and SIGTERM ends the daemon without waiting for the binding."""
    other = make_repo(workdir / "other")
    config = workdir / "c.toml"
    config.write_text(f'[[checkout]]\npath = "{git_repo.path}"\n')
    with (
        gated_git(workdir) as gate,
        start_daemon(workdir, "--config", str(config), env=gate.env) as daemon,
        Subscriber(daemon.socket) as sub,
    ):
        greet(sub)
        config.write_text(config.read_text() + f'[[checkout]]\npath = "{other.path / "module.py"}"\n')
        daemon.signal(signal.SIGHUP)
        gate.reached(daemon)  # the binding waits on git
        assert ping_round_trip(sub, 1) < PROMPT
        new = git_repo.commit()
        assert sub.next("event", skip=("ping", "health", "pong"))["current_revision"] == new
        assert sigterm_took(daemon) < PROMPT
        log = daemon.log_text()
    assert "configuration reloaded" not in log
    assert "Traceback" not in log


def test_a_reload_applies_a_binding_that_waited_and_serves_meanwhile(workdir: Path, git_repo: Repo) -> None:
    """The same, to the end: once git answers, the new checkout is announced."""
    other = make_repo(workdir / "other")
    config = workdir / "c.toml"
    config.write_text(f'[[checkout]]\npath = "{git_repo.path}"\n')
    with (
        gated_git(workdir) as gate,
        start_daemon(workdir, "--config", str(config), env=gate.env) as daemon,
        Subscriber(daemon.socket) as sub,
    ):
        greet(sub)
        config.write_text(config.read_text() + f'[[checkout]]\npath = "{other.path / "module.py"}"\n')
        daemon.signal(signal.SIGHUP)
        gate.reached(daemon)
        assert ping_round_trip(sub, 1) < PROMPT
        gate.open()
        snapshot = sub.next("snapshot", skip=("ping", "health", "pong"))
        assert snapshot["checkout"] == str(other.path)
        daemon.notes.wait_for(lambda m: "READY=1" in m.split("\n"))
        assert "configuration reloaded: 2 checkouts" in daemon.log_text()


def minimal_checkouts(root: Path, head: str, n: int) -> list[Path]:
    """``n`` checkouts in the smallest layout git itself accepts (HEAD, the branch, objects/)."""
    paths = []
    for number in range(n):
        git_dir = root / f"c{number:05d}" / ".git"
        (git_dir / "refs" / "heads").mkdir(parents=True)
        (git_dir / "objects").mkdir()
        (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
        (git_dir / "refs" / "heads" / "main").write_text(head + "\n")
        paths.append(git_dir.parent)
    return paths


def rss_kib(daemon: DaemonProcess) -> int:
    status = Path(f"/proc/{daemon.proc.pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])


def reloaded(daemon: DaemonProcess) -> None:
    """Until the reload the daemon was just sent is over (sd_notify: RELOADING=1, then READY=1)."""
    daemon.notes.wait_for(lambda m: "RELOADING=1" in m.split("\n"), timeout=120)
    daemon.notes.wait_for(lambda m: "READY=1" in m.split("\n"), timeout=120)


@pytest.mark.slow
@pytest.mark.timeout(240)  # three thousand checkouts made and removed on a slow disk
@pytest.mark.parametrize("moment", ["binding", "applying"])
def test_sigterm_during_a_large_reload_is_obeyed_at_once(workdir: Path, git_repo: Repo, moment: str) -> None:
    """Issue 17 item 2: 10,001 ``[[checkout]]`` tables and SIGHUP; SIGTERM sent 1 s in was
    obeyed 8.8-13.5 s later. Here 3,001 (``scripts/attacks.py reload`` measures 10,001):
    SIGTERM while the new checkouts are bound (off the loop), or while they are applied
    a few a turn; a staying checkout's events and pings flow meanwhile."""
    repos = minimal_checkouts(workdir / "repos", git_repo.head(), 3_000)
    config = workdir / "c.toml"
    config.write_text(f'[[checkout]]\npath = "{git_repo.path}"\n')
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        config.write_text(config.read_text() + "".join(f'[[checkout]]\npath = "{p}"\n' for p in repos))
        daemon.signal(signal.SIGHUP)
        if moment == "binding":
            # Told as the SIGHUP is taken, right before the reload thread starts binding.
            daemon.notes.wait_for(lambda m: "RELOADING=1" in m.split("\n"))
        else:
            snapshot = sub.next("snapshot", skip=("ping", "health", "pong", "event"), timeout=120)
            assert snapshot["checkout"] != str(git_repo.path.resolve())  # a new one: applying
        assert ping_round_trip(sub, 1) < PROMPT
        new = git_repo.commit()
        assert sub.next("event", skip=("ping", "health", "pong", "snapshot"))["current_revision"] == new
        assert sigterm_took(daemon) < 1.0 + 0.5  # a second, and a margin for a loaded machine
    assert "Traceback" not in daemon.log_text()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_memory_comes_back_after_a_reload_drops_two_thousand_checkouts(workdir: Path, git_repo: Repo) -> None:
    """Issue 17 item 2: RSS stayed at 240 MB after going back from 10,001 checkouts to one.

    The stopped checkouts must be freed at once (the scheduler's timer heap held every
    stopped watcher until its next verification was due, minutes at that size, and by
    then they were frozen out of the collector's sight). The daemon runs on glibc's
    malloc here (``PYTHONMALLOC=malloc``), so freed objects show in RSS: Python's own
    allocator keeps its 1 MiB arenas while any object in them lives (and reuses them
    for the next growth), which RSS cannot tell apart from objects kept alive.
    """
    repos = minimal_checkouts(workdir / "repos", git_repo.head(), 2_000)
    config = workdir / "c.toml"
    one = f'[[checkout]]\npath = "{git_repo.path}"\n'
    config.write_text(one)
    malloc = {"PYTHONMALLOC": "malloc"}
    with start_daemon(workdir, "--config", str(config), env=malloc) as daemon:
        at_one = rss_kib(daemon)
        config.write_text(one + "".join(f'[[checkout]]\npath = "{p}"\n' for p in repos))
        daemon.signal(signal.SIGHUP)
        reloaded(daemon)
        grown = rss_kib(daemon) - at_one
        assert grown > 8_000, grown  # two thousand checkouts cost memory (else this proves nothing)
        config.write_text(one)
        daemon.signal(signal.SIGHUP)
        reloaded(daemon)
        kept = rss_kib(daemon) - at_one
        assert kept < grown / 2, (at_one, grown, kept)
    assert "Traceback" not in daemon.log_text()
