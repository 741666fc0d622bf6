"""stalewatch.web: route barriers, against real wsgiref and uvicorn servers on loopback."""

from __future__ import annotations

import asyncio
import json
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stalewatch import Event, Guard, StaleError, Status
from stalewatch.core.phases import RestartPhase, RestartState
from stalewatch.core.refusal import NO_RESTART
from stalewatch.web import CONFLICT, ASGIBarrier, Routes, WSGIBarrier, refusal, stale_payload
from tests.support.repos import Repo
from tests.support.web import echo_asgi, echo_wsgi, request, serve

KINDS = ["wsgi", pytest.param("asgi", marks=pytest.mark.real_server)]  # uvicorn: a real server


@pytest.fixture
def guard(git_repo: Repo) -> Iterator[Guard]:
    with Guard.for_file(git_repo.path / "module.py") as running:
        yield running


def barriers(check: Guard, **options: Any) -> tuple[WSGIBarrier, ASGIBarrier]:
    routes = ["/api/chat"]
    return (
        WSGIBarrier(echo_wsgi, check, routes, methods=["POST"], **options),
        ASGIBarrier(echo_asgi, check, routes, methods=["POST"], **options),
    )


# -- real servers -------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_named_routes_answer_409_once_a_commit_lands(kind: str, git_repo: Repo, guard: Guard) -> None:
    loaded = git_repo.head()
    with serve(kind, *barriers(guard, strict=True)) as port:
        status, _, body = request(port, "POST", "/api/chat", b"hello")
        assert (status, json.loads(body)) == (200, {"method": "POST", "path": "/api/chat", "body": 5})

        new = git_repo.commit("update")  # strict: seen by the very next request (C10)
        status, headers, body = request(port, "POST", "/api/chat/session", b"hello")
        assert status == CONFLICT
        assert headers["content-type"] == "application/json"
        assert headers["cache-control"] == "no-store"
        payload = json.loads(body)
        assert payload == {
            "error": payload["error"],
            "type": "code_stale",
            "retryable": False,  # retrying changes nothing until someone restarts the server
            "restart_scheduled": False,  # a local guard: no daemon restarts this server
            "restart_reason": NO_RESTART,
        }
        assert "retry-after" not in headers
        assert loaded[:7] in payload["error"]
        assert new[:7] in payload["error"]

        # Everything not named passes through untouched, bodies included.
        big = b"x" * 300_000
        assert request(port, "GET", "/api/chat")[0] == 200  # method not guarded
        assert request(port, "POST", "/api/chatty", b"y")[0] == 200  # another segment
        status, _, body = request(port, "POST", "/upload", big)
        assert (status, json.loads(body)["body"]) == (200, len(big))

        git_repo.git("reset", "-q", "--hard", loaded)  # C8: rollback lets it through
        assert request(port, "POST", "/api/chat", b"hello")[0] == 200


@pytest.mark.parametrize("kind", KINDS)
def test_the_default_barrier_follows_the_watchers_flag(kind: str, git_repo: Repo, guard: Guard) -> None:
    events: queue.Queue[Event] = queue.Queue()
    unsubscribe = guard.subscribe(events.put)
    try:
        with serve(kind, *barriers(guard)) as port:
            assert request(port, "POST", "/api/chat", b"")[0] == 200
            git_repo.commit("update")
            assert events.get(timeout=10).status is Status.STALE  # the watcher saw it
            assert guard.stale
            assert request(port, "POST", "/api/chat", b"")[0] == CONFLICT
    finally:
        unsubscribe()


# -- the parts, without a server ----------------------------------------------------


def test_routes_match_prefixes_per_segment_and_methods() -> None:
    routes = Routes(["/api/chat", "/run/"], methods=["post", "PUT"])
    assert routes("POST", "/api/chat")
    assert routes("post", "/api/chat/")
    assert routes("PUT", "/api/chat/42")
    assert routes("POST", "/run")
    assert routes("POST", "/run/x")
    assert not routes("POST", "/api/chatty")
    assert not routes("POST", "/api")
    assert not routes("GET", "/api/chat")
    assert Routes("/")("DELETE", "/anything")
    assert Routes("/api")("GET", "/api/x")  # one string is one prefix, not characters
    assert not Routes("/api")("GET", "/a")
    seen: list[tuple[str, str]] = []

    def runs(method: str, path: str) -> bool:
        seen.append((method, path))
        return path.endswith("/run")

    predicate = Routes(runs, methods=["POST"])
    assert predicate("POST", "/jobs/run")
    assert not predicate("GET", "/jobs/run")  # methods are checked first
    assert seen == [("POST", "/jobs/run")]
    with pytest.raises(ValueError, match="starting with '/'"):
        Routes(["api"])
    with pytest.raises(ValueError, match="not both"):
        WSGIBarrier(echo_wsgi, lambda: None, Routes(["/a"]), methods=["GET"])


class _NoBody:
    """A ``wsgi.input`` that fails the test when read."""

    def read(self, *args: object) -> bytes:
        raise AssertionError("the barrier read a passed request's body")

    readline = readlines = __iter__ = read


def _stale(exc: StaleError) -> Any:
    def check() -> None:
        raise exc

    return check


def test_wsgi_never_reads_the_body_of_a_passed_request(git_repo: Repo) -> None:
    exc = StaleError(git_repo.path, "a" * 40, "b" * 40, Status.STALE)

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("204 No Content", [])
        return []

    barrier = WSGIBarrier(app, _stale(exc), ["/api/chat"])
    statuses: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: object = None) -> Any:
        statuses.append(status)

    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/other", "wsgi.input": _NoBody()}
    assert list(barrier(environ, start_response)) == []
    environ["PATH_INFO"] = "/api/chat"
    body = b"".join(barrier(environ, start_response))
    assert statuses == ["204 No Content", "409 Conflict"]
    assert json.loads(body) == stale_payload(exc)


def test_asgi_never_calls_receive_for_a_passed_request(git_repo: Repo) -> None:
    exc = StaleError(git_repo.path, "a" * 40, None, Status.UNREADABLE)
    sent: list[dict[str, Any]] = []
    inner_calls: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        inner_calls.append(scope["path"])

    async def receive() -> dict[str, Any]:
        raise AssertionError("the barrier called receive()")

    async def send(message: Any) -> None:
        sent.append(message)

    barrier = ASGIBarrier(app, _stale(exc), ["/api/chat"], kind="custom")

    async def run() -> None:
        await barrier({"type": "http", "method": "POST", "path": "/other"}, receive, send)
        await barrier({"type": "websocket", "path": "/api/chat"}, receive, send)
        await barrier({"type": "http", "method": "POST", "path": "/api/chat"}, receive, send)

    asyncio.run(run())
    assert inner_calls == ["/other", "/api/chat"]  # websocket scopes pass through
    assert sent[0]["status"] == CONFLICT
    assert json.loads(sent[1]["body"]) == {
        "error": str(exc),
        "type": "custom",
        "retryable": False,
        "restart_scheduled": False,
        "restart_reason": NO_RESTART,
    }


def test_refusal_returns_only_stale_errors(git_repo: Repo) -> None:
    with Guard.for_file(git_repo.path / "module.py") as guard:
        assert refusal(guard, strict=True) is None
        git_repo.commit("update")
        refused = refusal(guard, strict=True)
        assert isinstance(refused, StaleError)
        assert refused.current_revision == git_repo.head()

    def broken() -> None:
        raise KeyError("a bug, not staleness")

    with pytest.raises(KeyError):
        refusal(broken)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("restart", "retryable"),
    [
        (None, False),  # no daemon: nothing restarts the server
        (RestartState(RestartPhase.IDLE), False),
        (RestartState(RestartPhase.SCHEDULED, revision="b" * 40, retry_after=3.0), True),
        (RestartState(RestartPhase.WAITING, reason="drain: 2 in flight", revision="b" * 40), True),
        (RestartState(RestartPhase.REFUSED, reason="verify-failed: ImportError", revision="b" * 40), False),
        (RestartState(RestartPhase.FAILED, reason="action exited 1", revision="b" * 40), False),
    ],
)
def test_retryable_says_whether_retrying_will_help(restart: RestartState | None, retryable: bool) -> None:
    """Issue 29: `retryable` was true with no restart coming, so a client retried in vain."""
    exc = StaleError(Path("/srv/app"), "a" * 40, "b" * 40, Status.STALE, restart=restart)
    payload = stale_payload(exc)
    assert payload["retryable"] is retryable is payload["restart_scheduled"], payload
