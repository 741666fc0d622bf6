"""The metrics endpoint under hostile scrapes: nothing a client does holds it or hurts the daemon.

``MetricsServer`` is tested with real TCP sockets on loopback (a slow client, garbage,
a flood of idle connections, a collector that raises, any bytes), then a real
daemon is put through the same while it keeps serving its socket clients.
"""

from __future__ import annotations

import errno
import gzip
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.registry import Collector

from stalewatch.core.errors import MetricsError
from stalewatch.metrics.server import MAX_CONNECTIONS, MAX_REQUEST, MetricsServer
from tests.support.daemons import WAIT, Subscriber, greet, short_dir, start_daemon
from tests.support.metrics import get, metrics_url, samples, scrape, value, write_config
from tests.support.properties import budget
from tests.support.repos import Repo

BUDGET = budget(150)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    Gauge("stalewatch_test_value", "A value for the test.", registry=registry).set(42)
    return registry


@contextmanager
def serving(registry: Collector | None = None, timeout: float = 5.0) -> Iterator[MetricsServer]:
    server = MetricsServer("127.0.0.1", 0, registry or _registry(), request_timeout=timeout)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _raw(server: MetricsServer, data: bytes, timeout: float = WAIT) -> bytes:
    """Send ``data`` on a fresh connection; everything until the server closes it."""
    with socket.create_connection(server.address, timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_scrape_gets_the_exposition_and_only_one_thread_serves(workdir: Path) -> None:
    before = {t.name for t in threading.enumerate()}
    with serving() as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/metrics")
        status, headers, body = get(server.url, {"Accept-Encoding": "gzip"})
        assert status == 200 and headers["content-encoding"] == "gzip"
        assert value(samples(gzip.decompress(body).decode()), "stalewatch_test_value") == 42
        status, headers, body = get(server.url, {"Accept": "application/openmetrics-text; version=1.0.0"})
        assert headers["content-type"].startswith("application/openmetrics-text")
        assert body.endswith(b"# EOF\n")
        new = {t.name for t in threading.enumerate()} - before
        assert new == {"stalewatch-metrics-http"}
        assert server.scrapes == 2
        address = server.address
    # Stopped: the thread is gone and the port is free again.
    assert "stalewatch-metrics-http" not in {t.name for t in threading.enumerate()}
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(address)


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"200"),
        (b"HEAD /metrics HTTP/1.0\r\n\r\n", b"200"),
        (b"GET / HTTP/1.1\r\n\r\n", b"200"),
        (b"GET /metrics?name[]=x HTTP/1.1\r\n\r\n", b"200"),
        (b"GET /other HTTP/1.1\r\n\r\n", b"404"),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", b"405"),
        (b"garbage\r\n\r\n", b"400"),
        (b"GET /metrics\r\n\r\n", b"400"),
        (b"\xff\xfe\x00 \x01 HTTP/9\r\n\r\n", b"405"),
        (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * MAX_REQUEST + b"\r\n\r\n", b"431"),
    ],
)
def test_each_request_gets_an_answer_and_a_closed_connection(request_bytes: bytes, status: bytes) -> None:
    with serving() as server:
        answer = _raw(server, request_bytes)
        assert answer.startswith(b"HTTP/1.1 " + status + b" "), answer[:100]
        assert b"\r\nConnection: close\r\n" in answer
        if request_bytes.startswith(b"HEAD"):
            assert answer.endswith(b"\r\n\r\n")  # headers only
        assert _raw(server, b"GET /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 200 ")


def test_a_slow_client_holds_nothing_and_is_closed_at_its_deadline() -> None:
    with serving(timeout=2.0) as server:
        slow = socket.create_connection(server.address, timeout=WAIT)
        try:
            slow.sendall(b"GET /metr")  # and never the rest
            assert scrape(server.url)  # served meanwhile...
            slow.setblocking(False)
            with pytest.raises(BlockingIOError):
                slow.recv(100)  # ...while the slow one is still open: it held nothing
            slow.setblocking(True)
            assert slow.recv(100) == b""  # then closed at its deadline, without an answer
        finally:
            slow.close()


def test_a_flood_of_idle_connections_closes_the_oldest_not_the_scrape() -> None:
    with serving() as server:
        idle = [socket.create_connection(server.address, timeout=WAIT) for _ in range(3 * MAX_CONNECTIONS)]
        try:
            assert value(samples(scrape(server.url)), "stalewatch_test_value") == 42
            closed = sum(1 for sock in idle[:MAX_CONNECTIONS] if sock.recv(1) == b"")
            assert closed == MAX_CONNECTIONS  # the oldest made room
        finally:
            for sock in idle:
                sock.close()


class _Held(Collector):
    """A collector that holds the server's thread in a scrape until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def collect(self) -> Iterator[object]:  # type: ignore[override]
        self.entered.set()
        self.release.wait(WAIT)
        yield from _registry().collect()


def test_a_scrape_that_waited_behind_a_burst_of_slowloris_is_answered() -> None:
    """Every place taken by an incomplete request; while the server is busy, an honest
    scrape queues, then a burst of newcomers: the scrape is answered, not replaced."""
    held = _Held()
    with serving(held) as server:
        partial = b"GET /metrics HTTP/1.1\r\nX-Slow: "
        idle = [socket.create_connection(server.address, timeout=WAIT) for _ in range(MAX_CONNECTIONS - 1)]
        burst: list[socket.socket] = []
        try:
            for sock in idle:
                sock.sendall(partial)
            busy = threading.Thread(target=get, args=(server.url,), name="test-held-scrape")
            busy.start()
            assert held.entered.wait(WAIT)  # the server's one thread is in a scrape now
            honest = socket.create_connection(server.address, timeout=WAIT)
            honest.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            for _ in range(3 * MAX_CONNECTIONS):  # queued behind it, all at once
                sock = socket.create_connection(server.address, timeout=WAIT)
                sock.sendall(partial)
                burst.append(sock)
            held.release.set()
            busy.join(WAIT)
            response = b""
            while chunk := honest.recv(65536):
                response += chunk
            assert response.startswith(b"HTTP/1.1 200 OK"), response[:200]
            assert b"stalewatch_test_value 42.0" in response
            # The burst replaced the idle requests, oldest first (past their grace).
            gone = threading.Event()
            deadline = time.monotonic() + WAIT
            while sum(1 for sock in idle if _closed(sock)) < len(idle):
                assert time.monotonic() < deadline, "the idle requests were never replaced"
                gone.wait(0.02)  # the server replaces them as their grace ends
        finally:
            honest.close()
            for sock in idle + burst:
                sock.close()


def _closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_a_client_that_resets_mid_response_costs_only_itself() -> None:
    with serving() as server:
        for _ in range(20):
            sock = socket.create_connection(server.address, timeout=WAIT)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            sock.close()  # RST
        assert scrape(server.url)


class _Broken(Collector):
    def __init__(self) -> None:
        self.calls = 0

    def collect(self) -> Iterator[object]:  # type: ignore[override]
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a bug in a collector")
        yield from _registry().collect()


def test_a_collector_that_raises_is_a_500_and_the_next_scrape_works(caplog: pytest.LogCaptureFixture) -> None:
    broken = _Broken()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(broken)
    with serving(registry) as server:
        status, _, body = get(server.url)
        assert status == 500 and b"logged" in body
        assert value(samples(scrape(server.url)), "stalewatch_test_value") == 42
    assert "collecting metrics failed" in caplog.text


@BUDGET
@given(st.binary(max_size=MAX_REQUEST + 100))
def test_any_request_head_gets_a_well_formed_response(head: bytes) -> None:
    server = MetricsServer("127.0.0.1", 0, _registry())  # _respond needs no socket
    response = server._respond(head)
    assert response.startswith(b"HTTP/1.1 ")
    status_line, _, rest = response.partition(b"\r\n")
    assert int(status_line.split()[1]) in (200, 400, 404, 405, 431)
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert f"Content-Length: {len(body)}".encode() in headers or b"HEAD" in head.split(b" ")[0]


def test_any_bytes_on_a_real_socket_never_stop_the_server() -> None:
    payloads = [b"", b"\r\n\r\n", b"\x00" * 9000, b"GET " + b"/" * 5000 + b" HTTP/1.1\r\n\r\n"]
    payloads += [bytes((n * 37 + k) % 256 for k in range(n * 97 % 600)) + b"\r\n\r\n" for n in range(40)]
    with serving(timeout=0.3) as server:
        for payload in payloads:
            with socket.create_connection(server.address, timeout=WAIT) as sock:
                try:
                    sock.sendall(payload)
                    sock.shutdown(socket.SHUT_WR)
                    while sock.recv(65536):
                        pass
                except ConnectionResetError:
                    pass  # closed with unread input: the kernel resets; fine
        assert scrape(server.url)


def test_hostile_scrapes_never_hurt_the_daemon(workdir: Path, git_repo: Repo) -> None:
    config = write_config(
        workdir / "c.toml", f'metrics_address = "127.0.0.1:0"\n[[checkout]]\npath = "{git_repo.path}"\n'
    )
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        url = metrics_url(daemon)
        host, port = url.removeprefix("http://").removesuffix("/metrics").rsplit(":", 1)
        address = (host, int(port))
        hostile = [socket.create_connection(address, timeout=WAIT) for _ in range(40)]  # idle flood
        try:
            for sock in hostile[:5]:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"z" * 20000)  # oversized
            for sock in hostile[5:10]:
                sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # TLS to a plain port
            new = git_repo.commit()
            assert sub.next("event")["current_revision"] == new  # the socket loop never waited
            found = samples(scrape(url))
            assert value(found, "stalewatch_stale", checkout=str(git_repo.path.resolve())) == 1
        finally:
            for sock in hostile:
                sock.close()
        assert scrape(url)
        assert daemon.proc.poll() is None
        daemon.signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=WAIT) == 0
    assert "Traceback" not in daemon.log_text()


@pytest.mark.parametrize("accept", ["application/openmetrics-text; version=abc", "text/plain; version=zz"])
def test_an_accept_header_the_library_chokes_on_gets_the_text_format(
    accept: str, caplog: pytest.LogCaptureFixture
) -> None:
    with serving() as server:
        status, headers, body = get(server.url, {"Accept": accept})
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert value(samples(body.decode()), "stalewatch_test_value") == 42
    assert "unexpected error" not in caplog.text


def test_an_address_in_use_says_the_system_reason_alone() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(MetricsError) as refused:
            MetricsServer("127.0.0.1", port, _registry()).bind()
    reason = os.strerror(errno.EADDRINUSE)  # the daemon's line, as before: no Python repr after it
    assert str(refused.value) == f"metrics_address: cannot listen on 127.0.0.1:{port}: {reason}"
    with pytest.raises(MetricsError) as refused:  # a scope no interface has: the lookup's own words
        MetricsServer("fe80::1%stalewatch-none", 0, _registry()).bind()
    assert "Unknown error" not in str(refused.value)


def test_an_ipv6_address_is_served_where_the_platform_has_no_dual_stack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # OpenBSD, or a kernel without IPv4-mapped sockets: socket.create_server refuses
    # dualstack_ipv6 there with a ValueError; an IPv6 address still binds, IPv6 only.
    monkeypatch.setattr(socket, "has_dualstack_ipv6", lambda: False)
    server = MetricsServer("::1", 0, _registry())
    server.start()
    try:
        status, _, body = get(server.url)
        assert status == 200 and b"stalewatch_test_value 42.0" in body
    finally:
        server.stop()
