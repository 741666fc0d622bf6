"""The daemon client: a Guard fed by a daemon's socket (C9 while disconnected)."""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stalewatch import Daemon, Guard, StaleError
from stalewatch.client.daemon import DaemonWatch
from stalewatch.core.status import Event
from stalewatch.git.refs import GitDirs, find_git_dirs
from stalewatch.watching.source import OnChange, OnHealth
from tests.support.daemons import WAIT, short_dir, start_daemon
from tests.support.repos import Repo, make_repo


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


class Observed:
    """A Daemon source whose health reports and re-resolutions the test can wait on."""

    def __init__(self, path: Path, **options: Any) -> None:
        self.daemon = Daemon(path, max_backoff=0.2, **options)
        self.health: queue.SimpleQueue[tuple[bool, str]] = queue.SimpleQueue()
        self.changes: queue.SimpleQueue[float] = queue.SimpleQueue()

    def watch(self, dirs: GitDirs, on_change: OnChange, on_health: OnHealth) -> DaemonWatch:
        def changed() -> object:
            self.changes.put(time.monotonic())
            return on_change()

        def health(trusted: bool, mode: str) -> None:
            on_health(trusted, mode)
            self.health.put((trusted, mode))

        return self.daemon.watch(dirs, changed, health)

    def wait_health(self, trusted: bool, timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            got = self.health.get(timeout=max(0.0, deadline - time.monotonic()))
            if got[0] is trusted:
                assert got[1] == ("daemon" if trusted else got[1])
                return


def _events(guard: Guard) -> queue.SimpleQueue[Event]:
    events: queue.SimpleQueue[Event] = queue.SimpleQueue()
    guard.subscribe(events.put)
    return events


def test_guard_flips_on_daemon_event(workdir: Path, git_repo: Repo) -> None:
    with start_daemon(workdir, str(git_repo.path)) as daemon:
        source = Observed(daemon.socket)
        guard = Guard.for_checkout(git_repo.path, source=source)
        events = _events(guard)
        with guard:
            source.wait_health(True)
            snap = guard.snapshot()
            assert (snap.trusted, snap.mode) == (True, "daemon")
            guard.check()
            new = git_repo.commit()
            event = events.get(timeout=WAIT)
            assert (event.status.value, event.current_revision) == ("stale", new)
            assert guard.snapshot().trusted  # decided from the flag, still trusted
            with pytest.raises(StaleError):
                guard.check()


def test_dead_daemon_falls_back_then_resubscribes(workdir: Path, git_repo: Repo) -> None:
    """C9: a dead daemon never lets a stale process through; a new one is picked up."""
    loaded = git_repo.head()
    source = Observed(workdir / "d.sock")
    with start_daemon(workdir, str(git_repo.path)) as first:
        guard = Guard.for_checkout(git_repo.path, source=source)
        with guard:
            source.wait_health(True)
            first.kill()
            source.wait_health(False)
            assert not guard.snapshot().trusted
            moved = git_repo.commit("while the daemon is down")
            with pytest.raises(StaleError) as caught:
                guard.check()  # a synchronous re-read catches it
            assert caught.value.current_revision == moved

            git_repo.git("reset", "-q", "--hard", loaded)
            guard.check()  # back to current, still without a daemon

            with start_daemon(workdir, str(git_repo.path)):
                source.wait_health(True)
                events = _events(guard)
                again = git_repo.commit("with the new daemon")
                assert events.get(timeout=WAIT).current_revision == again
                # The new daemon loaded `loaded` too, but each client compares
                # against its own loaded revision.
                assert guard.loaded_revision == loaded
                with pytest.raises(StaleError):
                    guard.check()


def test_unwatched_checkout_stays_untrusted(
    workdir: Path, git_repo: Repo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other = make_repo(tmp_path / "other")
    with start_daemon(workdir, str(git_repo.path)) as daemon:
        source = Observed(daemon.socket)
        guard = Guard.for_checkout(other.path, source=source)
        with caplog.at_level(logging.WARNING, logger="stalewatch.client"), guard:
            source.wait_health(False)
            assert "does not watch" in caplog.text
            other.commit()
            with pytest.raises(StaleError):
                guard.check()
            assert not guard.snapshot().trusted


class FakeDaemon:
    """A socket the test speaks the protocol on by hand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        self.listener.settimeout(WAIT)
        self.conns: list[socket.socket] = []

    def accept(self) -> socket.socket:
        conn, _ = self.listener.accept()
        self.conns.append(conn)
        return conn

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        self.listener.close()


def _send(conn: socket.socket, *messages: dict[str, Any]) -> None:
    conn.sendall(b"".join(json.dumps(m).encode() + b"\n" for m in messages))


def _hello(checkout: str, keepalive: float = 5.0, protocol: int = 1) -> dict[str, Any]:
    return {"type": "hello", "protocol": protocol, "keepalive": keepalive, "checkouts": [checkout]}


def _snapshot(checkout: str, trusted: bool) -> dict[str, Any]:
    return {
        "type": "snapshot",
        "checkout": checkout,
        "status": "current",
        "trusted": trusted,
        "mode": "native",
    }


@pytest.fixture
def fake(workdir: Path) -> Iterator[FakeDaemon]:
    server = FakeDaemon(workdir / "fake.sock")
    try:
        yield server
    finally:
        server.close()


def test_wedged_daemon_is_noticed_by_missing_pings(fake: FakeDaemon, git_repo: Repo) -> None:
    key = str(git_repo.path.resolve())
    source = Observed(fake.path)
    with Guard.for_checkout(git_repo.path, source=source):
        conn = fake.accept()
        _send(conn, _hello(key, keepalive=0.1), _snapshot(key, True))
        source.wait_health(True)
        started = time.monotonic()
        source.wait_health(False)  # no line for 3 x 0.1 s
        assert 0.25 < time.monotonic() - started < 2.0
        fake.accept()  # and it reconnects


def test_trust_follows_the_daemons_own_watcher(fake: FakeDaemon, git_repo: Repo) -> None:
    key = str(git_repo.path.resolve())
    source = Observed(fake.path, verify_interval=600)  # no periodic re-reads here
    with Guard.for_checkout(git_repo.path, source=source) as guard:
        conn = fake.accept()
        _send(conn, _hello(key), _snapshot(key, False))
        _send(conn, {"type": "ping"})
        _send(conn, {"type": "health", "checkout": key, "trusted": True, "mode": "native"})
        source.wait_health(True)
        assert source.health.empty()  # never trusted before the daemon's watcher was
        assert source.changes.qsize() == 1  # re-resolved once before trusting
        source.changes.get_nowait()
        _send(conn, {"type": "event", "checkout": "/some/other/checkout"})
        _send(conn, {"type": "event", "checkout": key})
        source.changes.get(timeout=WAIT)  # only the event can cause this
        assert source.changes.empty()
        _send(conn, {"type": "health", "checkout": key, "trusted": False, "mode": "polling"})
        source.wait_health(False)
        _send(conn, {"type": "health", "checkout": key, "trusted": True, "mode": "native"})
        source.wait_health(True)
        _send(conn, {"type": "removed", "checkout": key})
        source.wait_health(False)
        assert not guard.snapshot().trusted


def test_other_protocol_versions_are_refused(fake: FakeDaemon, git_repo: Repo) -> None:
    key = str(git_repo.path.resolve())
    source = Observed(fake.path)
    with Guard.for_checkout(git_repo.path, source=source) as guard:
        conn = fake.accept()
        _send(conn, _hello(key, protocol=99), _snapshot(key, True))
        source.wait_health(False)
        fake.accept()  # it hung up and tries again
        assert not guard.snapshot().trusted


def test_periodic_reverification_while_connected(fake: FakeDaemon, git_repo: Repo) -> None:
    key = str(git_repo.path.resolve())
    source = Observed(fake.path, verify_interval=0.05)
    with Guard.for_checkout(git_repo.path, source=source):
        conn = fake.accept()
        _send(conn, _hello(key), _snapshot(key, True))
        source.wait_health(True)
        first = source.changes.get(timeout=WAIT)
        ticks = [source.changes.get(timeout=WAIT) for _ in range(3)]  # no event sent
        assert ticks[-1] > first


def test_stop_is_prompt_and_idempotent(fake: FakeDaemon, git_repo: Repo) -> None:
    key = str(git_repo.path.resolve())
    dirs = Guard.for_checkout(git_repo.path).binding.dirs
    assert dirs is not None
    Daemon(fake.path).watch(dirs, lambda: None, lambda trusted, mode: None).stop()  # never started
    watch = Daemon(fake.path).watch(dirs, lambda: None, lambda trusted, mode: None)
    watch.start()
    conn = fake.accept()
    _send(conn, _hello(key), _snapshot(key, True))
    started = time.monotonic()
    watch.stop()
    watch.stop()
    assert time.monotonic() - started < 1.0
    with contextlib.suppress(ConnectionResetError):  # hung up without reading what it got
        assert conn.recv(100) == b""  # it hung up


def test_no_daemon_at_all_still_blocks(workdir: Path, git_repo: Repo) -> None:
    source = Observed(workdir / "nobody.sock")
    with Guard.for_checkout(git_repo.path, source=source) as guard:
        source.wait_health(False)
        git_repo.commit()
        with pytest.raises(StaleError):
            guard.check()


def test_an_unexpected_client_error_is_survived(
    fake: FakeDaemon, git_repo: Repo, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    key = str(git_repo.path.resolve())
    real = DaemonWatch._session
    failures = iter([True])

    def flaky(self: DaemonWatch, sock: socket.socket) -> bool:
        if next(failures, False):
            raise ValueError("a bug in the client")
        return real(self, sock)

    monkeypatch.setattr(DaemonWatch, "_session", flaky)
    source = Observed(fake.path)
    with Guard.for_checkout(git_repo.path, source=source) as guard:
        fake.accept()  # the first session fails at once
        conn = fake.accept()  # and the client reconnects instead of dying
        _send(conn, _hello(key), _snapshot(key, True))
        source.wait_health(True)
        assert guard.snapshot().trusted
    assert "failed; reconnecting" in caplog.text


def test_r7_a_process_registers_only_once_it_applied_what_the_daemon_said_of_its_checkout(
    fake: FakeDaemon, git_repo: Repo
) -> None:
    """Whoever hears the daemon announce this process (its `processes` line) can count
    on the process knowing the restart state its snapshot carried."""
    key = str(git_repo.path.resolve())
    guard = Guard.for_checkout(git_repo.path, loaded_revision=git_repo.head(), source=Daemon(fake.path))
    conn: list[socket.socket] = []
    pending: queue.SimpleQueue[bytes] = queue.SimpleQueue()

    def told(state: object) -> None:
        # What the process had sent by the time it applied the snapshot's restart state.
        try:
            pending.put(conn[0].recv(4096, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except BlockingIOError:
            pending.put(b"")

    guard.subscribe_restart(told)
    with guard:
        conn.append(fake.accept())
        hello = {**_hello(key), "features": ["register"]}
        idle = {"phase": "idle", "attempt": 0, "at": 0.0}
        _send(conn[0], hello, {**_snapshot(key, True), "restart": idle})
        assert pending.get(timeout=WAIT) == b""  # nothing yet: not registered before
        conn[0].settimeout(WAIT)
        line = json.loads(conn[0].recv(4096).split(b"\n")[0])
        assert (line["type"], line["checkout"], line["revision"]) == ("register", key, git_repo.head())


def test_an_unknown_watch_option_is_refused_as_a_keyword_argument_would_be(tmp_path: Path) -> None:
    dirs = find_git_dirs(make_repo(tmp_path / "repo").path)
    assert dirs is not None
    with pytest.raises(TypeError, match="bogus"):
        Daemon(tmp_path / "no.sock").watch(dirs, lambda: None, lambda trusted, mode: None, bogus=1)  # type: ignore[call-arg]
