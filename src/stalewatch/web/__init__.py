"""Route barriers for WSGI and ASGI applications (:mod:`.barrier`): answer 409 once the
code is stale. Server-Sent Events of each status change: :mod:`stalewatch.web.sse`
(also importable as :mod:`stalewatch.sse`).
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
