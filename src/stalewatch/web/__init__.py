"""Route barriers for WSGI and ASGI applications: answer 409 once the code is stale.

Wrap an application and name the routes to protect; every other request goes to the
application untouched. Server-Sent Events of each status change live in
:mod:`stalewatch.web.sse` (also importable as :mod:`stalewatch.sse`).

Example (WSGI)::

    from stalewatch import Guard
    from stalewatch.web import WSGIBarrier

    guard = Guard.for_module("myapp.handlers").start()
    app = WSGIBarrier(app, guard, routes=["/api/chat"], methods=["POST"])
"""

from .barrier import (
    CONFLICT,
    ASGIApp,
    ASGIBarrier,
    Check,
    Message,
    Receive,
    Routes,
    RouteSpec,
    Scope,
    Send,
    WSGIBarrier,
    refusal,
    retry_after,
    stale_body,
    stale_payload,
)

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
