"""Hostile and unlucky clients against a real daemon: each costs only itself (issue 12)."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch.server import connections
from stalewatch.server.config import CheckoutConfig, DaemonConfig
from stalewatch.server.listening import listen
from stalewatch.server.loop import DaemonServer
from tests.support.daemons import WAIT, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo, make_repo


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


# Lines Python's json accepts but the protocol cannot hold: each once stopped the daemon
# (the pong echoes `id`, and encode() refuses non-finite numbers; deep nesting raises
# RecursionError, not ValueError).
HOSTILE = {
    "nan": b'{"type":"ping","id":NaN}\n',
    "infinity": b'{"type":"ping","id":-Infinity}\n',
    "overflowing float": b'{"type":"ping","id":1e999}\n',
    "deep nesting": b'{"type":"ping","id":' + b"[" * 1500 + b"]" * 1500 + b"}\n",
    "deep objects": b'{"type":"ping","id":' + b'{"a":' * 600 + b"1" + b"}" * 600 + b"}\n",
    "huge integer": b'{"type":"ping","id":' + b"9" * 4000 + b"}\n",
    "nul in type": b'{"type":"ping\\u0000"}\n',
    "type not a string": b'{"type":["ping"]}\n',
    "not utf-8": b'{"type":"ping","id":"\xff\xfe"}\n',
}


def test_lines_json_accepts_but_the_protocol_cannot_hold_cost_only_their_client(
    workdir: Path, git_repo: Repo
) -> None:
    with start_daemon(workdir, str(git_repo.path)) as daemon, Subscriber(daemon.socket) as good:
        greet(good)
        for name, line in HOSTILE.items():
            with Subscriber(daemon.socket) as bad:
                greet(bad)
                bad.send(line)
                rest = [m for m in bad.rest() if m["type"] != "ping"]
                assert [m["type"] for m in rest] == ["error"], name
                assert rest[-1]["reason"] == "bad-request", name
            assert daemon.proc.poll() is None, f"{name} stopped the daemon:\n{daemon.log_text()}"
        good.send(b'{"type":"ping","id":[1,{"a":-2.5e3}]}\n')  # nested, finite: echoed
        assert good.next("pong")["id"] == [1, {"a": -2500.0}]
        # A lone surrogate is how a non-UTF-8 path travels: echoed as the same escape.
        good.send(b'{"type":"ping","id":"\\udcff\\ud800"}\n')
        assert good.next("pong")["id"] == "\udcff\ud800"
        new = git_repo.commit()
        assert good.next("event")["current_revision"] == new
    assert "Traceback" not in daemon.log_text()


def test_an_unexpected_error_in_one_clients_handling_drops_only_that_client(
    workdir: Path, git_repo: Repo, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The second line of defence: a bug one client's input triggers is that client's alone."""
    real = connections.parse_request

    def buggy(line: bytes) -> object:
        if b"boom" in line:
            raise RuntimeError("a bug the protocol checks did not catch")
        return real(line)

    monkeypatch.setattr(connections, "parse_request", buggy)
    sock, lock = listen(workdir / "s.sock")
    server = DaemonServer(DaemonConfig(checkouts=(CheckoutConfig(git_repo.path),)))
    thread = threading.Thread(target=server.serve, args=(sock,), name="test-daemon-serve")
    try:
        thread.start()
        with Subscriber(workdir / "s.sock") as good, Subscriber(workdir / "s.sock") as bad:
            greet(good)
            greet(bad)
            bad.send(b'{"type":"ping","id":"boom"}\n')
            assert [m for m in bad.rest() if m["type"] not in ("ping", "health")] == []  # closed
            assert thread.is_alive()
            good.send(b'{"type":"ping","id":1}\n')
            assert good.next("pong")["id"] == 1
            new = git_repo.commit()
            assert good.next("event")["current_revision"] == new
    finally:
        server.stop()
        thread.join(timeout=WAIT)
        sock.close()
        os.close(lock)
    assert not thread.is_alive()
    assert "after an unexpected error" in caplog.text


def test_a_client_queue_smaller_than_the_greeting_does_not_drop_every_client(
    workdir: Path, tmp_path: Path
) -> None:
    repos = [make_repo(tmp_path / f"r{n}") for n in range(3)]
    config = workdir / "c.toml"
    config.write_text(
        "client_queue = 1\n" + "".join(f'[[checkout]]\npath = "{repo.path}"\n' for repo in repos)
    )
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        _, snapshots = greet(sub)  # hello + 3 snapshots: four lines against a queue of one
        assert len(snapshots) == 3
        new = repos[1].commit()
        assert sub.next("event")["current_revision"] == new
    assert "dropping client" not in daemon.log_text()


def test_a_client_that_half_closes_keeps_receiving_events(workdir: Path, git_repo: Repo) -> None:
    with start_daemon(workdir, str(git_repo.path)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        sub.sock.shutdown(socket.SHUT_WR)  # as `stalewatch-client <&-` or `nc -N` does
        for n in range(2):
            new = git_repo.commit(f"after half-close {n}")
            assert sub.next("event")["current_revision"] == new
        daemon.notes.wait_for(lambda m: m.endswith("; 1 client"))
        sub.close()  # now the whole connection: noticed without any write to it
        daemon.notes.wait_for(lambda m: m.endswith("; 0 clients"))


def _connect_when_listening(path: Path, timeout: float = WAIT) -> socket.socket:
    """Connect as soon as the daemon's socket accepts (retrying while it is not bound)."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if time.monotonic() > deadline:
                raise
            threading.Event().wait(delay)  # the daemon is still starting: back off
            delay = min(delay * 2, 0.1)
        else:
            return sock


def test_polling_daemon_answers_at_once_and_reports_ready(workdir: Path, git_repo: Repo) -> None:
    """In polling mode the watcher is never trusted: the daemon must not wait for trust."""
    env = {"STALEWATCH_POLL": "1"}
    with start_daemon(workdir, str(git_repo.path), env=env, wait_ready=False) as daemon:
        with contextlib.closing(_connect_when_listening(daemon.socket)) as raw:
            connected = time.monotonic()
            sub = Subscriber.__new__(Subscriber)  # a Subscriber on the socket connected above
            sub.sock, sub.buffer = raw, b""
            _, (snap,) = greet(sub)
            waited = time.monotonic() - connected
            assert waited < 2.5, f"first client answered after {waited:.1f} s"  # was 5 s
            assert snap["trusted"] is False
        ready = daemon.notes.wait_for(lambda m: "READY=1" in m.split("\n"))
        assert "STATUS=1 checkout (1 current)" in ready
    assert "not running yet" not in daemon.log_text()


def test_sigterm_while_watchers_start_in_polling_mode_is_prompt(workdir: Path, git_repo: Repo) -> None:
    env = {"STALEWATCH_POLL": "1"}
    with start_daemon(workdir, str(git_repo.path), env=env, wait_ready=False) as daemon:
        _connect_when_listening(daemon.socket).close()
        started = time.monotonic()
        daemon.signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=WAIT) == 0
        took = time.monotonic() - started
        assert took < 2.5, f"SIGTERM took {took:.1f} s"  # was up to 5 s


def _fd_count(pid: int) -> int:
    return sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())


def test_running_out_of_file_descriptors_pauses_accepting_instead_of_spinning(
    workdir: Path, git_repo: Repo
) -> None:
    config = workdir / "c.toml"
    config.write_text(f'keepalive = 0.05\n[[checkout]]\npath = "{git_repo.path}"\n')
    with start_daemon(workdir, "--config", str(config)) as daemon:
        pid = daemon.proc.pid
        with Subscriber(daemon.socket) as watcher:
            greet(watcher)
            # Two more descriptors: two clients fit, the third waits in the backlog.
            limit = _fd_count(pid) + 2
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
            extra: list[Subscriber] = []
            try:
                for _ in range(5):
                    extra.append(Subscriber(daemon.socket))
                for sub in extra[:2]:
                    greet(sub)
                # Twenty keepalive intervals: a spinning loop would log thousands of lines.
                for _ in range(20):
                    watcher.next("ping", skip=("health",))
                warnings = daemon.log_text().count("cannot accept clients")
                assert warnings == 1, f"{warnings} warnings"
                for sub in extra[:2]:
                    sub.close()
                greet(extra[2])  # served once descriptors are free again
            finally:
                for sub in extra:
                    sub.close()
            new = git_repo.commit()
            assert watcher.next("event")["current_revision"] == new


def _peak_rss_kb(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith("VmHWM:")))


def test_pings_with_long_ids_cannot_multiply_what_the_daemon_holds(workdir: Path, git_repo: Repo) -> None:
    """Twenty clients pipelining 4 KiB pings unread: the daemon holds a bounded, small amount."""
    with start_daemon(workdir, str(git_repo.path)) as daemon, Subscriber(daemon.socket) as good:
        greet(good)
        before = _peak_rss_kb(daemon.proc.pid)
        ping = b'{"type":"ping","id":"' + b"i" * 4000 + b'"}\n'
        floods = [Subscriber(daemon.socket) for _ in range(20)]

        def flood(sub: Subscriber) -> None:
            sub.sock.settimeout(WAIT)
            with contextlib.suppress(OSError):  # dropped, reset, or (unfixed) still queueing
                sub.sock.sendall(ping * 1100)  # past the bound of 1024 lines (+ the greeting)

        senders = [threading.Thread(target=flood, args=(s,), name="test-flood") for s in floods]
        try:
            for sender in senders:
                sender.start()
            for sender in senders:
                sender.join(WAIT + 5)
            good.send(b'{"type":"ping","id":"done"}\n')
            assert good.next("pong")["id"] == "done"  # the daemon has read as far as it will
            grown = _peak_rss_kb(daemon.proc.pid) - before
            assert grown < 20_000, f"peak RSS grew by {grown} kB"  # was ~80 MB: 1024 pongs x 4 KiB x 20
        finally:
            for sub in floods:
                sub.close()
        good.send(b'{"type":"ping","id":"' + b"x" * 300 + b'"}\n')
        assert next(m for m in good.rest() if m["type"] == "error")["reason"] == "bad-request"


def _register(checkout: Path, revision: str) -> bytes:
    return f'{{"type":"register","checkout":"{checkout}","revision":"{revision}"}}\n'.encode()


def test_a_connection_registers_once_a_repeat_is_ignored_and_another_claim_is_refused(
    workdir: Path, git_repo: Repo
) -> None:
    """A client flooding registrations would wake the restart sequence on every line."""
    head = git_repo.head()
    other = "f" * len(head)
    with start_daemon(workdir, str(git_repo.path)) as daemon, Subscriber(daemon.socket) as watcher:
        greet(watcher)
        with Subscriber(daemon.socket) as server:
            greet(server)
            server.send(_register(git_repo.path, head) * 200)
            server.send(b'{"type":"ping","id":"after"}\n')
            assert server.next("pong", skip=("ping", "health", "processes"))["id"] == "after"  # all read
            server.send(_register(git_repo.path, other))
            error = next(m for m in server.rest() if m["type"] == "error")
            assert error["reason"] == "bad-request"
            assert "already registered" in error["detail"]
        # The watcher saw the one registration come and go: not 200 changes, no `other`.
        tables = [watcher.next("processes")["processes"]]
        while tables[-1]:
            tables.append(watcher.next("processes")["processes"])
        assert [[p["revision"] for p in t] for t in tables] == [[head], []]
        assert daemon.proc.poll() is None


def test_r8_a_registered_server_reports_its_work_in_flight_and_nobody_else_can(
    workdir: Path, git_repo: Repo
) -> None:
    """The count reaches the registry (shown in a new client's snapshot); an `inflight`
    line before a registration, for another checkout, or out of range is a bad request."""
    head = git_repo.head()
    with start_daemon(workdir, str(git_repo.path)) as daemon:
        with Subscriber(daemon.socket) as server:
            greet(server)
            server.send(_register(git_repo.path, head).replace(b"}\n", b',"inflight":2}\n'))
            server.send(f'{{"type":"inflight","checkout":"{git_repo.path}","inflight":5}}\n'.encode())
            server.send(b'{"type":"ping","id":"read"}\n')
            assert server.next("pong", skip=("ping", "health", "processes"))["id"] == "read"
            with Subscriber(daemon.socket) as viewer:
                _, (snapshot,) = greet(viewer)
                assert [(p["revision"], p["inflight"]) for p in snapshot["processes"]] == [(head, 5)]
            server.send(b'{"type":"inflight","checkout":"/elsewhere","inflight":1}\n')
            error = next(m for m in server.rest() if m["type"] == "error")
            assert error["reason"] == "bad-request" and "registration" in error["detail"]
        for line in (
            f'{{"type":"inflight","checkout":"{git_repo.path}","inflight":1}}\n'.encode(),  # unregistered
            _register(git_repo.path, head).replace(b"}\n", b',"inflight":-1}\n'),
            _register(git_repo.path, head).replace(b"}\n", b',"inflight":true}\n'),
        ):
            with Subscriber(daemon.socket) as stranger:
                greet(stranger)
                stranger.send(line)
                error = next(m for m in stranger.rest() if m["type"] == "error")
                assert error["reason"] == "bad-request", line
        assert daemon.proc.poll() is None
