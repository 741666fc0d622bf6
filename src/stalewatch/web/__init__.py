"""Route barriers for WSGI and ASGI applications: answer 409 once the code is stale.

Wrap an application and name the routes to protect; every other request goes to the
application untouched (its body is never read: :class:`ASGIBarrier` never calls
``receive()`` and :class:`WSGIBarrier` never reads ``wsgi.input`` for it). A refused
request gets ``409 Conflict`` with the JSON body of :func:`stale_payload`.

Example (WSGI)::

    from stalewatch import Guard
    from stalewatch.web import WSGIBarrier

    guard = Guard.for_module("myapp.handlers").start()
    app = WSGIBarrier(app, guard, routes=["/api/chat"], methods=["POST"])

Example (ASGI, with Hermes WebUI's check)::

    from stalewatch import hermes
    from stalewatch.web import ASGIBarrier

    app = ASGIBarrier(app, hermes.ensure_agent_runtime_current, routes=["/api/chat"],
                      kind="agent_runtime_stale")

Server-Sent Events of each status change: :mod:`stalewatch.web.sse` (also importable
as :mod:`stalewatch.sse`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from ..core.errors import StaleError
from ..core.refusal import Refusal
from ..guard.guard import Guard

__all__ = [
    "CONFLICT",
    "ASGIApp",
    "ASGIBarrier",
    "Check",
    "Message",
    "Receive",
    "RouteSpec",
    "Routes",
    "Scope",
    "Send",
    "WSGIBarrier",
    "refusal",
    "retry_after",
    "stale_body",
    "stale_payload",
]

CONFLICT = 409
"""The status code of a refused request: the server's code conflicts with the checkout."""

Check = Guard | Callable[[], object]
"""What a barrier asks: a :class:`~stalewatch.Guard`, or a callable raising StaleError."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
App = TypeVar("App")


def stale_payload(exc: BaseException, *, kind: str = "code_stale") -> dict[str, Any]:
    """The JSON body of a refusal: :meth:`stalewatch.Refusal.payload`.

    ``{"error": str(exc), "type": kind, "retryable": ..., "restart_scheduled": ...}``.
    While a daemon's automatic restart is coming, ``restart_scheduled`` is true with
    ``retry_after`` (seconds, an estimate) and ``restart_phase``; otherwise it is false
    with ``restart_reason`` (why no restart is coming). ``retryable`` is true only then:
    the same request, sent again after ``retry_after``, is expected to succeed; false,
    nothing changes until someone restarts the server.
    Example: ``stale_payload(exc, kind="agent_runtime_stale")``.
    """
    return Refusal.of(exc).payload(kind)


def retry_after(exc: BaseException) -> int | None:
    """Seconds for a ``Retry-After`` header while an automatic restart is coming, else ``None``."""
    return Refusal.of(exc).retry_after


def stale_body(exc: BaseException, *, kind: str = "code_stale") -> bytes:
    """:func:`stale_payload` encoded as UTF-8 JSON, ready to send."""
    return json.dumps(stale_payload(exc, kind=kind)).encode()


def refusal(check: Check, *, strict: bool = False) -> StaleError | None:
    """Run the barrier: the :class:`~stalewatch.StaleError` it raised, or ``None``.

    Args:
        check: a guard (its :meth:`~stalewatch.Guard.check` is called) or a callable
            such as ``hermes.ensure_agent_runtime_current``.
        strict: for a guard, re-read HEAD first (a commit completed before the
            request is seen by it; ~20 µs). Ignored for a callable.

    Example: ``if (exc := refusal(guard)) is not None: ...``.
    """
    try:
        if isinstance(check, Guard):
            check.check(strict=strict)
        else:
            check()
    except StaleError as exc:
        return exc
    return None


class Routes:
    """Which requests a barrier guards.

    Args:
        routes: path prefixes, matched per segment (``"/api/chat"`` matches
            ``/api/chat`` and ``/api/chat/x`` but not ``/api/chatty``; ``"/"`` matches
            everything), or a predicate ``(method, path) -> bool``.
        methods: HTTP methods to guard (any case); ``None`` guards every method.

    Example: ``Routes(["/api/chat", "/api/run"], methods=["POST"])``.
    """

    def __init__(
        self,
        routes: Iterable[str] | Callable[[str, str], bool],
        methods: Iterable[str] | None = None,
    ) -> None:
        self._methods = None if methods is None else frozenset(m.upper() for m in methods)
        if callable(routes):
            self._predicate = routes
            return
        given = [routes] if isinstance(routes, str) else list(routes)
        if not all(isinstance(p, str) and p.startswith("/") for p in given):
            raise ValueError(f"route prefixes must be paths starting with '/': {given!r}")
        prefixes = tuple(p.rstrip("/") for p in given)

        def under(method: str, path: str) -> bool:
            return any(not p or path == p or path.startswith(f"{p}/") for p in prefixes)

        self._predicate = under

    def __call__(self, method: str, path: str) -> bool:
        """True when a request with this method and path must pass the barrier."""
        if self._methods is not None and method.upper() not in self._methods:
            return False
        return bool(self._predicate(method, path))


RouteSpec = Routes | Iterable[str] | Callable[[str, str], bool]
"""Route prefixes, a ``(method, path)`` predicate, or a :class:`Routes`."""


# One guarded request's unit of work in flight (empty: nothing to count, or ended).
Counted = list[AbstractContextManager[None]]


def _end(counted: Counted) -> None:
    """End a request's unit once, whoever ends it first (``pop`` is atomic)."""
    if counted:
        counted.pop().__exit__(None, None, None)


def _streams(headers: Iterable[tuple[Any, Any]]) -> bool:
    """Whether a response is an event stream (Server-Sent Events): not work in flight."""
    for name, value in headers:
        key = name.decode("latin-1") if isinstance(name, bytes) else str(name)
        if key.lower() == "content-type":
            text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
            return text.split(";", 1)[0].strip().lower() == "text/event-stream"
    return False


class _Barrier(Generic[App]):
    """What both barriers share: the routes, the check, the refusal body, the counting."""

    def __init__(
        self,
        app: App,
        check: Check,
        routes: RouteSpec,
        *,
        methods: Iterable[str] | None = None,
        strict: bool = False,
        kind: str = "code_stale",
    ) -> None:
        self.app = app
        self.check = check
        if isinstance(routes, Routes) and methods is not None:
            raise ValueError("give methods to Routes(...) or to the barrier, not both")
        self.routes = routes if isinstance(routes, Routes) else Routes(routes, methods)
        self.strict = strict
        self.kind = kind
        # A guard counts the guarded requests as its work in flight (R8); a plain
        # callable check has nothing to count them on.
        self._unit = check.work() if isinstance(check, Guard) else None

    def _counted(self) -> Counted:
        """One guarded request's unit of work in flight, entered now (see :func:`_end`)."""
        if self._unit is None:
            return []
        self._unit.__enter__()
        return [self._unit]

    def _refused(self) -> tuple[bytes, list[tuple[str, str]]] | None:
        """The 409's body and headers when the code is stale, else ``None``."""
        exc = refusal(self.check, strict=self.strict)
        if exc is None:
            return None
        said = Refusal.of(exc)
        body = json.dumps(said.payload(self.kind)).encode()
        headers = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),  # a refusal must never be served from a cache
        ]
        if said.retry_after is not None:
            headers.append(("Retry-After", str(said.retry_after)))  # RFC 9110: delay-seconds
        return body, headers


class _Response:
    """An application's response iterable whose unit of work ends when the server closes it.

    PEP 3333: the server calls ``close()`` once it is done with the response, also when
    the client went away; that is when the request stops being work in flight.
    """

    def __init__(self, iterable: Iterable[bytes], counted: Counted) -> None:
        self._iterable = iterable
        self._counted = counted

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._iterable)

    def close(self) -> None:
        try:
            close = getattr(self._iterable, "close", None)
            if close is not None:
                close()
        finally:
            _end(self._counted)


class WSGIBarrier(_Barrier[WSGIApplication]):
    """WSGI middleware answering 409 for the named routes while the code is stale.

    The path matched is ``PATH_INFO`` (the path inside the application). With a guard
    as ``check``, each guarded request is work in flight (``guard.work()``) from
    its arrival, before the check, until the server closes its response; a 409 counts
    nothing once answered, and an event stream (``text/event-stream``) is not work.

    Args:
        app: the WSGI application to protect.
        check: a :class:`~stalewatch.Guard` or a callable raising ``StaleError``.
        routes: prefixes, a predicate or a :class:`Routes` (see there).
        methods: methods to guard; ``None``: all.
        strict: a guard re-reads HEAD on each guarded request.
        kind: the payload's ``type``.

    Example: ``app = WSGIBarrier(app, guard, routes=["/api/chat"], methods=["POST"])``.
    """

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD") or "GET")
        if not self.routes(method, str(environ.get("PATH_INFO") or "/")):
            return self.app(environ, start_response)
        # Counted before the check: a request that passes it is already counted when a
        # restart coming after the commit asks how much is in flight (R8).
        counted = self._counted()
        try:
            refused = self._refused()
            if refused is None:
                if self._unit is None:
                    return self.app(environ, start_response)
                return _Response(self.app(environ, _starting(start_response, counted)), counted)
            start_response(f"{CONFLICT} Conflict", refused[1])
        except BaseException:
            _end(counted)
            raise
        _end(counted)  # a 409 counts nothing once answered
        return [refused[0]]


def _starting(start_response: StartResponse, counted: Counted) -> StartResponse:
    def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        if _streams(headers):
            _end(counted)  # an event stream stays open for good: not work a drain waits for
        if exc_info is not None:
            return start_response(status, headers, exc_info)
        return start_response(status, headers)

    return start


class ASGIBarrier(_Barrier[ASGIApp]):
    """ASGI middleware answering 409 for the named routes while the code is stale.

    Only ``http`` requests are guarded; websocket and lifespan scopes pass through.
    The path matched is ``scope["path"]``. The check runs on the event loop (a guard's
    is sub-microsecond, or ~20 µs strict); a callable that spawns processes blocks it
    for that long. With a guard as ``check``, each guarded request is work in flight
    (``guard.work()``) from its arrival, before the check, until the application
    returns; a 409 counts nothing once answered, and an event stream
    (``text/event-stream``) stops counting when its response starts.

    Args:
        app: the ASGI application to protect.
        check: a :class:`~stalewatch.Guard` or a callable raising ``StaleError``.
        routes: prefixes, a predicate or a :class:`Routes`.
        methods: methods to guard; ``None``: all.
        strict: a guard re-reads HEAD on each guarded request.
        kind: the payload's ``type``.

    Example: ``app = ASGIBarrier(app, guard, routes=["/api/chat"], methods=["POST"])``.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guarded = scope["type"] == "http" and self.routes(
            str(scope.get("method", "GET")), str(scope.get("path", "/"))
        )
        if not guarded:
            await self.app(scope, receive, send)
            return
        counted = self._counted()  # before the check (see WSGIBarrier)
        try:
            refused = self._refused()
            if refused is None:
                await self.app(scope, receive, _sending(send, counted))
                return
            body, plain = refused
            headers = [(k.lower().encode(), v.encode()) for k, v in plain]
            await send({"type": "http.response.start", "status": CONFLICT, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        finally:
            _end(counted)


def _sending(send: Send, counted: Counted) -> Send:
    async def sending(message: Message) -> None:
        if message.get("type") == "http.response.start" and _streams(message.get("headers") or ()):
            _end(counted)  # an event stream stays open for good: not work a drain waits for
        await send(message)

    return sending
