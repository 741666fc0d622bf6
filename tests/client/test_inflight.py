"""A server's work in flight reaches the daemon (R8): registration, then ``inflight`` lines.

Against a real daemon (the count in its ``processes``), and against a socket the test
speaks the protocol on by hand, to see exactly which lines the client sends and when.
Ordering, never sleeping: the client handles the daemon's lines in order, so once it
has re-resolved for a second ``event`` line, everything it had to send for the lines
before it is on the socket.
"""

from __future__ import annotations

import itertools
import json
import queue
import select
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stalewatch import Daemon, Guard, StaleError
from stalewatch.client.connection import read_status
from stalewatch.client.daemon import DaemonWatch
from stalewatch.git.refs import GitDirs
from stalewatch.watching.source import OnChange, OnHealth, OnRestart, Workload
from tests.support.daemons import WAIT, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


# -- against a real daemon ------------------------------------------------------------------


def restart_config(workdir: Path, repo: Repo, hold: Path) -> Path:
    """A restart policy whose restart waits while ``hold`` exists (``waiting: hold``)."""
    file = workdir / "c.toml"
    action = json.dumps([sys.executable, "-c", "pass"])
    file.write_text(
        f'keepalive = 0.5\n[[checkout]]\npath = "{repo.path}"\n[checkout.restart]\n'
        f'action = {action}\nsettle = 0.05\nmin_interval = 0\nhold_while = "{hold}"\n'
    )
    file.chmod(0o600)
    return file


def counts(path: Path) -> list[int]:
    """The work in flight of each server registered with the daemon, from its snapshot."""
    _, (snapshot,) = read_status(path)
    return [p["inflight"] for p in snapshot["processes"]]


def wait_counts(path: Path, pace: Subscriber, expected: list[int]) -> None:
    """Until the daemon lists ``expected``; between looks, wait for its next line (a ping)."""
    deadline = time.monotonic() + WAIT
    while (seen := counts(path)) != expected:
        assert time.monotonic() < deadline, f"the daemon lists {seen}, not {expected}"
        pace.next(skip=())


def test_r8_the_registration_carries_the_work_in_flight(workdir: Path, git_repo: Repo) -> None:
    with start_daemon(workdir, str(git_repo.path)) as daemon, Subscriber(daemon.socket) as sub:
        hello, _ = greet(sub)
        assert "inflight" in hello["features"]
        guard = Guard.for_checkout(git_repo.path, source=Daemon(daemon.socket))
        remove = guard.count_work(lambda: 3)
        with guard.work(), guard.work(), guard:
            (process,) = sub.next("processes")["processes"]
            assert (process["revision"], process["inflight"]) == (git_repo.head(), 2 + 3)
        remove()


def test_r8_changes_reach_the_daemon_while_its_restart_is_coming(workdir: Path, git_repo: Repo) -> None:
    hold = workdir / "updating"
    hold.touch()  # the update "still runs": the restart is coming and waits
    config = restart_config(workdir, git_repo, hold)
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        streams: list[str] = []
        guard = Guard.for_checkout(git_repo.path, source=Daemon(daemon.socket))
        guard.count_work(lambda: len(streams))
        unit = guard.work()
        unit.__enter__()  # one request in flight since before the commit (and the registration)
        with guard:
            assert [p["inflight"] for p in sub.next("processes")["processes"]] == [1]
            git_repo.commit("update")
            while not (sub.next("restart", skip=("ping", "health", "event")).get("reason") or "").startswith(
                "hold"
            ):
                pass
            streams += ["chat-1", "chat-2"]  # an outside count: read only now it matters
            wait_counts(daemon.socket, sub, [3])
            unit.__exit__(None, None, None)  # the request ends
            streams.clear()
            wait_counts(daemon.socket, sub, [0])


def test_r8_a_stale_process_reports_before_a_polling_daemon_has_seen_the_commit(
    workdir: Path, git_repo: Repo
) -> None:
    # The daemon polls once a minute: the process, re-reading HEAD on its own, is first.
    slow = {"STALEWATCH_POLL": "1", "STALEWATCH_POLL_INTERVAL": "60"}
    hold = workdir / "updating"
    config = restart_config(workdir, git_repo, hold)
    with (
        start_daemon(workdir, "--config", str(config), env=slow) as daemon,
        Subscriber(daemon.socket) as sub,
    ):
        greet(sub)
        guard = Guard.for_checkout(git_repo.path, source=Daemon(daemon.socket))
        with guard.work(), guard:
            assert [p["inflight"] for p in sub.next("processes")["processes"]] == [1]
            with guard.work():
                git_repo.commit("update")
                with pytest.raises(StaleError):
                    guard.check()  # the polling source is not trusted: the check re-reads
                wait_counts(daemon.socket, sub, [2])
            _, (snapshot,) = read_status(daemon.socket)
            assert snapshot["restart"]["phase"] == "idle"  # the daemon has not seen it yet
            assert snapshot["current_revision"] != git_repo.head()


# -- against a daemon spoken by hand ----------------------------------------------------------


class Peer:
    """One accepted connection: lines the client sent, lines sent to it."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.buffer = b""

    def send(self, *messages: dict[str, Any]) -> None:
        self.conn.sendall(b"".join(json.dumps(m).encode() + b"\n" for m in messages))

    def line(self, timeout: float = WAIT) -> dict[str, Any] | None:
        """The client's next line; ``None`` once it closed the connection."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, f"no line from the client within {timeout} s"
            if select.select([self.conn], [], [], left)[0]:
                data = self.conn.recv(65536)
                if not data:
                    return None
                self.buffer += data
        raw, self.buffer = self.buffer.split(b"\n", 1)
        return dict(json.loads(raw))

    def rest(self) -> list[dict[str, Any]]:
        """Close our side, then every line the client had sent before it saw that."""
        self.conn.shutdown(socket.SHUT_WR)
        found = []
        while (line := self.line()) is not None:
            found.append(line)
        return found


class Hand:
    """A daemon socket the test speaks the protocol on, and a guard's source that lets the
    test wait until the client has handled every line sent before (see the module)."""

    def __init__(self, path: Path, checkout: Path) -> None:
        self.key = str(checkout.resolve())
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        self.listener.settimeout(WAIT)
        self.daemon = Daemon(path, max_backoff=0.1, verify_interval=600)
        self.changes: queue.SimpleQueue[None] = queue.SimpleQueue()
        self.peers: list[Peer] = []

    def watch(
        self,
        dirs: GitDirs,
        on_change: OnChange,
        on_health: OnHealth,
        *,
        loaded_revision: str | None = None,
        on_restart: OnRestart | None = None,
        work: Workload | None = None,
    ) -> DaemonWatch:
        def changed() -> object:
            result = on_change()
            self.changes.put(None)
            return result

        return self.daemon.watch(
            dirs, changed, on_health, loaded_revision=loaded_revision, on_restart=on_restart, work=work
        )

    def accept(self, features: list[str]) -> Peer:
        """The client's next connection, greeted: hello (with ``features``), a snapshot."""
        conn, _ = self.listener.accept()
        peer = Peer(conn)
        self.peers.append(peer)
        hello = {"type": "hello", "protocol": 1, "keepalive": 5.0, "checkouts": [self.key]}
        hello["features"] = features
        snapshot = {"type": "snapshot", "checkout": self.key, "status": "current", "trusted": True}
        peer.send(hello, {**snapshot, "mode": "native", "restart": {"phase": "idle"}})
        return peer

    def restart(self, peer: Peer, phase: str) -> None:
        peer.send({"type": "restart", "checkout": self.key, "phase": phase, "reason": None, "at": 1.0})

    def handled(self, peer: Peer) -> None:
        """Until the client handled every line sent so far and looked at its count once more."""
        while not self.changes.empty():
            self.changes.get()
        for _ in range(2):  # the second re-resolution comes after the look that follows the first
            peer.send({"type": "event", "checkout": self.key, "status": "current"})
            self.changes.get(timeout=WAIT)

    def close(self) -> None:
        for peer in self.peers:
            peer.conn.close()
        self.listener.close()


@pytest.fixture
def hand(workdir: Path, git_repo: Repo) -> Iterator[Hand]:
    server = Hand(workdir / "hand.sock", git_repo.path)
    try:
        yield server
    finally:
        server.close()


def inflight_lines(lines: list[dict[str, Any]]) -> list[int]:
    return [line["inflight"] for line in lines if line["type"] == "inflight"]


class Streams:
    """An outside counter (as Hermes' active streams) that says each time it is read."""

    def __init__(self) -> None:
        self.count = 0
        self.reads: queue.SimpleQueue[tuple[float, int]] = queue.SimpleQueue()

    def __call__(self) -> int:
        count = self.count
        self.reads.put((time.monotonic(), count))
        return count

    def read(self, count: int) -> float:
        """Until the client read ``count`` (the look that may tell it); when it read it."""
        while True:
            at, seen = self.reads.get(timeout=WAIT)
            if seen == count:
                return at

    def unread(self) -> bool:
        return self.reads.empty()


def test_r8_nothing_while_current_then_the_count_at_once_when_a_restart_is_coming(
    hand: Hand, git_repo: Repo
) -> None:
    guard = Guard.for_checkout(git_repo.path, source=hand)
    streams = Streams()
    guard.count_work(streams)
    with guard.work(), guard.work(), guard:
        peer = hand.accept(["register", "inflight"])
        register = peer.line()
        assert register == {
            "type": "register",
            "checkout": hand.key,
            "revision": git_repo.head(),
            "inflight": 2,
        }
        streams.read(0)  # once, for the registration
        streams.count = 1  # 3, while current: neither read nor told
        with guard.work():
            hand.handled(peer)
            assert streams.unread()
            hand.restart(peer, "scheduled")
            assert peer.line() == {"type": "inflight", "checkout": hand.key, "inflight": 4}  # at once
            streams.count = 0
            assert peer.line() == {"type": "inflight", "checkout": hand.key, "inflight": 3}
        assert peer.line() == {"type": "inflight", "checkout": hand.key, "inflight": 2}
        hand.restart(peer, "confirmed")  # not coming any more: at most one last look
        hand.handled(peer)
        peer.rest()
        again = hand.accept(["register", "inflight"])  # the client reconnects: the count afresh
        assert again.line() == register


def test_r8_a_daemon_without_the_inflight_feature_gets_no_inflight_line(hand: Hand, git_repo: Repo) -> None:
    guard = Guard.for_checkout(git_repo.path, source=hand)
    streams = Streams()
    guard.count_work(streams)
    with guard.work(), guard:
        peer = hand.accept(["register"])
        assert peer.line() == {"type": "register", "checkout": hand.key, "revision": git_repo.head()}
        hand.restart(peer, "scheduled")
        with guard.work():
            hand.handled(peer)
        assert peer.rest() == []
        assert streams.unread()  # nor was the application's counter called


def test_r8_no_count_after_the_daemon_refused_the_registration(
    hand: Hand, git_repo: Repo, caplog: pytest.LogCaptureFixture
) -> None:
    guard = Guard.for_checkout(git_repo.path, source=hand)
    with guard:
        peer = hand.accept(["register", "inflight"])
        assert peer.line()["type"] == "register"
        reason = "a revision this checkout never had"
        peer.send({"type": "refused", "request": "register", "checkout": hand.key, "reason": reason})
        hand.restart(peer, "scheduled")
        with guard.work():
            hand.handled(peer)
        assert peer.rest() == []
    assert "refused this process's registration" in caplog.text and reason in caplog.text


def test_r8_while_a_restart_is_coming_the_count_is_read_at_most_every_tenth_of_a_second(
    hand: Hand, git_repo: Repo
) -> None:
    guard = Guard.for_checkout(git_repo.path, source=hand)
    streams = Streams()
    guard.count_work(streams)
    with guard:
        peer = hand.accept(["register", "inflight"])
        peer.line()
        streams.read(0)
        hand.restart(peer, "scheduled")
        reads = [streams.read(0) for _ in range(6)]
        gaps = [b - a for a, b in itertools.pairwise(reads)]
        assert min(gaps) >= 0.09, gaps  # a lower bound: a loaded machine only stretches it
        hand.restart(peer, "idle")
        hand.handled(peer)
        assert inflight_lines(peer.rest()) == [0]  # told once when it began to matter, then unchanged
