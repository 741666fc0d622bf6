"""sd_notify without libsystemd, and the daemon's READY/STATUS/WATCHDOG/STOPPING."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch.server import supervision
from stalewatch.server.config import CheckoutConfig, DaemonConfig
from stalewatch.server.listening import listen
from stalewatch.server.loop import DaemonServer
from tests.support.daemons import Notifications, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def test_notify_sends_one_datagram(workdir: Path) -> None:
    notes = Notifications(workdir / "n")
    try:
        assert supervision.notify("READY=1\nSTATUS=ok", {"NOTIFY_SOCKET": str(notes.path)})
        assert notes.wait_for(lambda m: True) == "READY=1\nSTATUS=ok"
    finally:
        notes.close()


def test_notify_abstract_namespace() -> None:
    name = f"stalewatch-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert supervision.notify("WATCHDOG=1", {"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(100) == b"WATCHDOG=1"


def test_notify_outside_systemd_is_a_no_op(workdir: Path) -> None:
    assert not supervision.notify("READY=1", {})
    assert not supervision.notify("READY=1", {"NOTIFY_SOCKET": str(workdir / "nobody")})  # logged, no raise


def test_watchdog_interval() -> None:
    assert supervision.watchdog_interval({}) is None
    assert supervision.watchdog_interval({"WATCHDOG_USEC": "2000000"}) == 1.0
    assert (
        supervision.watchdog_interval({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}) == 1.0
    )
    assert supervision.watchdog_interval({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}) is None
    assert supervision.watchdog_interval({"WATCHDOG_USEC": "junk"}) is None


def test_daemon_under_a_fake_notify_socket(workdir: Path, git_repo: Repo) -> None:
    env = {"WATCHDOG_USEC": "200000"}  # ping every 0.1 s
    config = workdir / "c.toml"
    config.write_text(f'[[checkout]]\npath = "{git_repo.path}"\n')
    with start_daemon(workdir, "--config", str(config), env=env) as daemon:
        ready = daemon.notes.received[-1].split("\n")
        assert "READY=1" in ready
        assert "STATUS=1 checkout (1 current); 0 clients" in ready
        assert f"MAINPID={daemon.proc.pid}" in ready
        daemon.notes.wait_for(lambda m: m == "WATCHDOG=1")
        daemon.notes.wait_for(lambda m: m == "WATCHDOG=1")
        with Subscriber(daemon.socket) as sub:
            greet(sub)
            daemon.notes.wait_for(lambda m: m == "STATUS=1 checkout (1 current); 1 client")
            git_repo.commit()
            sub.next("event")
            daemon.notes.wait_for(lambda m: m == "STATUS=1 checkout (1 stale); 1 client")
        daemon.signal(signal.SIGHUP)
        reloading = daemon.notes.wait_for(lambda m: m.startswith("RELOADING=1"))
        assert reloading.split("\n")[1].startswith("MONOTONIC_USEC=")
        daemon.notes.wait_for(lambda m: m.startswith("READY=1"))
        assert daemon.stop() == 0
        daemon.notes.wait_for(lambda m: m == "STOPPING=1")


def test_watchdog_proof_requires_live_watchers(workdir: Path, git_repo: Repo) -> None:
    """WATCHDOG=1 is sent only while every watcher thread re-verifies on time."""
    sock, lock = listen(workdir / "s.sock")
    settings = DaemonConfig(checkouts=(CheckoutConfig(git_repo.path),))
    server = DaemonServer(settings)
    thread = threading.Thread(target=server.serve, args=(sock,), name="test-daemon-serve")
    try:
        thread.start()
        with Subscriber(workdir / "s.sock") as sub:
            _, (snap,) = greet(sub)  # served at once, even before the watcher runs
            trusted = snap["trusted"]
            while not trusted:  # then a health line says when it does
                trusted = sub.next("health", skip=("ping",))["trusted"]
        assert server.systemd.alive() is None  # the watcher has started and beaten once
        entry = next(iter(server.entries.values()))
        assert entry.source.beat is not None
        entry.source.beat -= 3600  # as if its thread had been wedged for an hour
        problem = server.systemd.alive()
        assert problem is not None and str(git_repo.path.resolve()) in problem
    finally:
        server.stop()
        thread.join(timeout=5)
        sock.close()
        os.close(lock)
    assert not thread.is_alive()
