"""stalewatch.sse: Server-Sent Events read from real wsgiref and uvicorn servers."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from stalewatch import Event, Guard
from stalewatch.sse import KEEPALIVE, EventStream, format_message
from tests.support.repos import Repo
from tests.support.web import SSEReader, echo_asgi, echo_wsgi, request, route_asgi, route_wsgi, serve

KINDS = ["wsgi", pytest.param("asgi", marks=pytest.mark.real_server)]  # uvicorn: a real server


@pytest.fixture
def guard(git_repo: Repo) -> Iterator[Guard]:
    with Guard.for_file(git_repo.path / "module.py") as running:
        yield running


@contextmanager
def serve_stream(kind: str, stream: EventStream) -> Iterator[int]:
    """Serve ``stream`` at /events (and an echo app elsewhere); close it before stopping."""
    wsgi = route_wsgi({"/events": stream.wsgi}, echo_wsgi)
    asgi = route_asgi({"/events": stream.asgi}, echo_asgi)
    with serve(kind, wsgi, asgi) as port:
        try:
            yield port
        finally:
            stream.close()  # a server waits for open responses before it stops
            assert stream.wait_for_clients(0, 10)


class LiveSubscriptions:
    """Wraps ``guard.subscribe`` to count subscriptions not yet unsubscribed."""

    def __init__(self, guard: Guard, monkeypatch: pytest.MonkeyPatch) -> None:
        self.live = 0
        self._subscribe = guard.subscribe
        monkeypatch.setattr(guard, "subscribe", self)

    def __call__(self, callback: Callable[[Event], object]) -> Callable[[], None]:
        unsubscribe = self._subscribe(callback)
        self.live += 1

        def counted() -> None:
            self.live -= 1
            unsubscribe()

        return counted


def is_keepalive(lines: list[str]) -> bool:
    return lines == [KEEPALIVE.decode().strip()]


@pytest.mark.parametrize("kind", KINDS)
def test_a_commit_reaches_the_browser_as_an_event(kind: str, git_repo: Repo, guard: Guard) -> None:
    loaded = git_repo.head()
    stream = EventStream(guard, keepalive=30)
    with serve_stream(kind, stream) as port:
        reader = SSEReader(port)
        try:
            assert reader.response.status == 200
            assert reader.response.getheader("Content-Type") == "text/event-stream; charset=utf-8"
            assert reader.response.getheader("Cache-Control") == "no-cache"
            assert reader.block() == ["retry: 3000"]
            first = reader.message()
            assert first["event"] == "current"
            assert first["data"]["type"] == "snapshot"
            assert first["data"]["loaded_revision"] == loaded
            assert first["id"] == str(first["data"]["generation"])
            assert stream.clients == 1

            new = git_repo.commit("update")
            stale = reader.message()
            assert stale["event"] == "stale"
            data = stale["data"]
            assert (data["type"], data["status"], data["previous_status"]) == ("event", "stale", "current")
            assert (data["loaded_revision"], data["current_revision"]) == (loaded, new)
            assert data["generation"] == first["data"]["generation"] + 1
            assert stale["id"] == str(data["generation"])

            git_repo.git("reset", "-q", "--hard", loaded)  # C8: and back, in order
            back = reader.message()
            assert (back["event"], back["data"]["generation"]) == ("current", data["generation"] + 1)

            stream.close()  # the server side ends the stream cleanly
            with pytest.raises(EOFError):
                reader.block()
        finally:
            reader.close()


@pytest.mark.parametrize("kind", KINDS)
def test_an_idle_stream_sends_keepalive_comments(kind: str, guard: Guard) -> None:
    stream = EventStream(guard, keepalive=0.05)
    with serve_stream(kind, stream) as port:
        reader = SSEReader(port)
        try:
            reader.message()
            assert is_keepalive(reader.block())
            assert is_keepalive(reader.block())
        finally:
            reader.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_client_that_disconnects_is_unsubscribed(
    kind: str, git_repo: Repo, guard: Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    subscriptions = LiveSubscriptions(guard, monkeypatch)
    # A WSGI server notices a gone client only when it writes: keep-alives do that.
    stream = EventStream(guard, keepalive=0.05)
    with serve_stream(kind, stream) as port:
        reader = SSEReader(port)
        reader.message()
        assert stream.wait_for_clients(1, 10)
        assert subscriptions.live == 1
        reader.close()
        assert stream.wait_for_clients(0, 10)
        assert subscriptions.live == 0
        git_repo.commit("update")  # delivering to nobody is fine
        assert guard.refresh().status.value == "stale"
        assert request(port, "GET", "/still-serving")[0] == 200


@pytest.mark.parametrize("kind", KINDS)
def test_only_get_and_head_are_served(kind: str, guard: Guard) -> None:
    stream = EventStream(guard)
    with serve_stream(kind, stream) as port:
        status, headers, _ = request(port, "POST", "/events", b"x")
        assert (status, headers["allow"]) == (405, "GET, HEAD")
        status, headers, body = request(port, "HEAD", "/events")
        assert (status, headers["content-type"], body) == (200, "text/event-stream; charset=utf-8", b"")
        assert stream.clients == 0


def test_a_slow_client_is_resynced_with_a_snapshot(git_repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    # No watcher: each refresh() is one event, so the queue overflows deterministically.
    guard = Guard.for_file(git_repo.path / "module.py")
    subscriptions = LiveSubscriptions(guard, monkeypatch)
    stream = EventStream(guard, queue_size=2, keepalive=30)
    statuses: list[str] = []
    body = stream.wsgi({"REQUEST_METHOD": "GET"}, lambda status, headers: statuses.append(status))  # type: ignore[arg-type]
    assert statuses == ["200 OK"]
    try:
        assert next(body).startswith(b"retry: 3000\n\nevent: current\n")
        assert stream.clients == 1
        loaded = git_repo.head()
        for n in range(3):  # stale, current, stale: three events for a queue of two
            git_repo.git("reset", "-q", "--hard", loaded) if n % 2 else git_repo.commit(f"c{n}")
            guard.refresh()
        chunk = next(body).decode()
        blocks = [b for b in chunk.split("\n\n") if b]
        assert len(blocks) == 1  # the snapshot replaces the lost events
        data = json.loads(blocks[0].split("data: ", 1)[1])
        snap = guard.snapshot()
        assert (data["type"], data["status"], data["generation"]) == ("snapshot", "stale", snap.generation)
        assert data["current_revision"] == git_repo.head()
    finally:
        body.close()  # type: ignore[attr-defined]
    assert (stream.clients, subscriptions.live) == (0, 0)  # closing the iterator unsubscribed


def test_format_message_is_one_data_line() -> None:
    data: dict[str, Any] = {"error": "line one\nline two", "n": 1}
    message = format_message("stale", data, id=7)
    assert message == b'event: stale\nid: 7\ndata: {"error":"line one\\nline two","n":1}\n\n'
    assert format_message("current", {}) == b"event: current\ndata: {}\n\n"
    with pytest.raises(ValueError, match="keepalive"):
        EventStream(Guard.__new__(Guard), keepalive=0)
