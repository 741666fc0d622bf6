"""The barriers count guarded requests as work in flight (R8), on real wsgiref and uvicorn.

A request is held open inside the application until the test releases it (events,
never a sleep); the count is read through the guard, and waited for through a
condition the guard's unit of work notifies when a unit ends.
"""

from __future__ import annotations

import asyncio
import http.client
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Any
from wsgiref.types import StartResponse, WSGIEnvironment

import pytest

from stalewatch import Guard
from stalewatch.sse import EventStream
from stalewatch.web import ASGIBarrier, Receive, Scope, Send, WSGIBarrier
from tests.support.recorder import Recorder
from tests.support.repos import Repo
from tests.support.web import TIMEOUT, SSEReader, request, route_asgi, route_wsgi, serve

KINDS = ["wsgi", pytest.param("asgi", marks=pytest.mark.real_server)]  # uvicorn: a real server


class Counting:
    """Stands for ``guard.work()``: the guard's own unit, and a condition told when one ends."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.unit = guard.work()
        self.ended = threading.Condition()

    def __enter__(self) -> None:
        self.unit.__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.unit.__exit__(kind, exc, tb)
        with self.ended:
            self.ended.notify_all()

    def settles_at(self, count: int) -> bool:
        """Whether the guard's work in flight comes to ``count`` (within the timeout)."""
        with self.ended:
            return self.ended.wait_for(lambda: self.guard.inflight() == count, TIMEOUT)


class Gate:
    """Holds a request inside the application until released; says when one is inside."""

    def __init__(self) -> None:
        self.inside = threading.Semaphore(0)
        self._open = threading.Event()
        self._loops: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._lock = threading.Lock()

    def wait(self) -> None:  # a WSGI thread
        self.inside.release()
        assert self._open.wait(TIMEOUT), "never released"

    async def wait_async(self) -> None:  # on uvicorn's loop
        opened = asyncio.Event()
        with self._lock:
            self._loops.append((asyncio.get_running_loop(), opened))
            if self._open.is_set():
                opened.set()
        self.inside.release()
        await asyncio.wait_for(opened.wait(), TIMEOUT)

    def entered(self) -> None:
        assert self.inside.acquire(timeout=TIMEOUT), "no request came in"

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()  # whatever happened: nothing stays held past the test

    def release(self) -> None:
        with self._lock:
            self._open.set()
            for loop, opened in self._loops:
                loop.call_soon_threadsafe(opened.set)


def held_wsgi(gate: Gate) -> Any:
    """``/hold`` streams its body: one chunk, then the rest once the gate opens."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterator[bytes]:
        if environ["PATH_INFO"].endswith("/fail"):
            raise RuntimeError("the application failed")
        start_response("200 OK", [("Content-Type", "text/plain")])
        return body(environ["PATH_INFO"].endswith("/hold"))

    def body(hold: bool) -> Iterator[bytes]:
        yield b"first "
        if hold:
            gate.wait()
        yield b"last"

    return app


def held_asgi(gate: Gate) -> Any:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"].endswith("/fail"):
            raise RuntimeError("the application failed")
        headers = [(b"content-type", b"text/plain")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"first ", "more_body": True})
        if scope["path"].endswith("/hold"):
            await gate.wait_async()
        await send({"type": "http.response.body", "body": b"last"})

    return app


@pytest.fixture
def guard(git_repo: Repo) -> Iterator[Guard]:
    with Guard.for_checkout(git_repo.path) as running:
        assert running.wait_ready(TIMEOUT)
        yield running


@pytest.fixture
def counting(guard: Guard, monkeypatch: pytest.MonkeyPatch) -> Counting:
    counting = Counting(guard)
    monkeypatch.setattr(guard, "work", lambda: counting)  # before any barrier asks for it
    return counting


def servers(counting: Counting, gate: Gate, **extra: Any) -> tuple[Any, Any]:
    """The held application behind a barrier guarding ``/api``, in both forms."""
    guard = counting.guard
    wsgi: Any = WSGIBarrier(held_wsgi(gate), guard, routes=["/api"])
    asgi: Any = ASGIBarrier(held_asgi(gate), guard, routes=["/api"])
    if "stream" in extra:
        stream: EventStream = extra["stream"]
        wsgi = WSGIBarrier(route_wsgi({"/api/events": stream.wsgi}, held_wsgi(gate)), guard, routes=["/api"])
        asgi = ASGIBarrier(route_asgi({"/api/events": stream.asgi}, held_asgi(gate)), guard, routes=["/api"])
    return wsgi, asgi


class Held:
    """A request made on a thread of its own, held by the gate; its answer once released."""

    def __init__(self, port: int, path: str) -> None:
        self.port = port
        self.path = path
        self.answer: tuple[int, bytes] | None = None
        self.thread = threading.Thread(target=self._run, name="test-held-request")
        self.thread.start()

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            conn.request("POST", self.path)
            response = conn.getresponse()
            self.answer = (response.status, response.read())
        except OSError:  # cut off: no answer, which the test reports
            self.answer = None
        finally:
            conn.close()

    def result(self) -> tuple[int, bytes] | None:
        self.thread.join(TIMEOUT)
        return self.answer


@pytest.mark.parametrize("kind", KINDS)
def test_r8_a_guarded_request_is_in_flight_until_its_response_has_ended(
    kind: str, counting: Counting
) -> None:
    gate = Gate()
    with serve(kind, *servers(counting, gate)) as port, gate:
        held = Held(port, "/api/hold")
        gate.entered()
        # The application returned its response (WSGI) and sent its first chunk: the
        # request still runs until its last byte, and counts.
        assert counting.guard.inflight() == 1
        gate.release()
        assert held.result() == (200, b"first last")
        assert counting.settles_at(0)
        assert request(port, "POST", "/api/quick")[:3:2] == (200, b"first last")
        assert counting.settles_at(0)


@pytest.mark.parametrize("kind", KINDS)
def test_r8_a_409_counts_nothing_and_a_request_from_before_the_commit_keeps_counting(
    kind: str, counting: Counting, git_repo: Repo
) -> None:
    gate = Gate()
    recorder = Recorder(counting.guard)
    with serve(kind, *servers(counting, gate)) as port, gate:
        held = Held(port, "/api/hold")
        gate.entered()
        git_repo.commit("update")
        recorder.wait_for("stale")
        for _ in range(5):  # new guarded requests are refused: the count can only fall
            assert request(port, "POST", "/api/new")[0] == 409
            assert counting.settles_at(1)
        assert request(port, "GET", "/health")[0] == 200  # not guarded: never counted
        assert counting.settles_at(1)
        gate.release()
        assert held.result() == (200, b"first last")
        assert counting.settles_at(0)


@pytest.mark.parametrize("kind", KINDS)
def test_r8_requests_outside_the_guarded_routes_are_not_counted(kind: str, counting: Counting) -> None:
    gate = Gate()
    with serve(kind, *servers(counting, gate)) as port, gate:
        held = Held(port, "/other/hold")
        gate.entered()
        assert counting.guard.inflight() == 0
        gate.release()
        assert held.result() == (200, b"first last")


@pytest.mark.parametrize("kind", KINDS)
def test_r8_a_failing_application_ends_its_unit(kind: str, counting: Counting) -> None:
    with serve(kind, *servers(counting, Gate())) as port:
        assert request(port, "POST", "/api/fail")[0] == 500
        assert counting.settles_at(0)


@pytest.mark.parametrize("kind", KINDS)
def test_r8_an_event_stream_behind_the_barrier_is_not_work_in_flight(kind: str, counting: Counting) -> None:
    stream = EventStream(counting.guard, keepalive=30)
    try:
        with serve(kind, *servers(counting, Gate(), stream=stream)) as port:
            reader = SSEReader(port, "/api/events")
            try:
                assert reader.message()["data"]["type"] == "snapshot"
                assert counting.guard.inflight() == 0  # ended when the stream's response began
            finally:
                stream.close()
                reader.close()
            assert stream.wait_for_clients(0, TIMEOUT)
    finally:
        stream.close()
