"""The lines of the daemon's protocol, built (and, where a side parses them, read) here.

Both sides use this module: the daemon builds ``hello``, ``snapshot``, ``event``,
``health``, ``restart``, ``processes``, ``refused``, ``removed`` and ``error`` lines
and parses a client's requests (:func:`parse_request`); a client builds ``register``
and ``inflight`` and parses the daemon's ``hello`` (:func:`hello_problem`,
:func:`silence_limit`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from ..core.errors import ProtocolError
from ..core.phases import RestartState
from ..core.revisions import is_object_id
from ..core.status import Event, Snapshot, WatchMode
from .codec import PROTOCOL_VERSION, decode, encode, quote
from .codec import encode_value as _json

FEATURES = ("register", "inflight")
"""What this daemon offers beyond protocol 1's base, listed in its hello: a client sends
``register`` (and ``inflight``) only to a daemon that lists it (an older one would close
it for the line)."""
MAX_INFLIGHT = 1_000_000_000
"""The largest count of work in flight a client may report."""
MAX_ID_BYTES = 256
"""Longest ``id`` a ping may carry (encoded), echoed in the pong."""
HELLO_TIMEOUT = 5.0
"""A daemon that accepted a connection must say hello within this many seconds."""


def hello_message(checkouts: list[str], keepalive: float, version: str) -> dict[str, Any]:
    """The first line a subscriber receives."""
    return {
        "type": "hello",
        "protocol": PROTOCOL_VERSION,
        "version": version,
        "pid": os.getpid(),
        "keepalive": keepalive,
        "checkouts": checkouts,
        "features": list(FEATURES),
        "at": time.time(),
    }


def snapshot_message(
    snap: Snapshot,
    generation: int,
    *,
    restart: RestartState | None = None,
    processes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ``snapshot`` line: where a checkout stands now, with the daemon's generation.

    ``restart`` is the checkout's restart sequence (``null`` without a policy),
    ``processes`` the servers registered for it (``[{"pid", "revision", "since"}]``),
    ``cause`` what moved HEAD (or ``null``). Version 1 clients ignore fields they do
    not know.
    """
    return {
        "type": "snapshot",
        **snap.to_dict(),
        "generation": generation,  # the daemon's, not its guard's
        "restart": None if restart is None else restart.to_dict(),
        "processes": processes or [],
    }


def event_line(event: Event, generation: int) -> bytes:
    """An ``event`` line, encoded: one change of status or current revision (with its ``cause``).

    To the byte ``encode({"type": "event", **event.to_dict(), "generation": generation})``
    (a property test holds it to that), written out: it is every update's line, and
    JSON's encoder with the dictionaries it needs costs a cold CPU twice this (issue 27).
    """
    e, c, q = event, event.cause, quote  # quote: a str (a StrEnum too) as encode writes it
    cause = (
        "null"
        if c is None
        else f'{{"action":{q(c.action)},"detail":{_json(c.detail)},"message":{q(c.message)},'
        f'"name":{q(c.name)},"email":{q(c.email)},"at":{_json(c.at)},"tz":{q(c.tz)},"relation":{q(c.relation)},'
        f'"ahead":{_json(c.ahead)},"behind":{_json(c.behind)},"summary":{q(c.describe())}}}'
    )
    return (
        f'{{"type":"event","checkout":{q(str(e.checkout))},"status":{q(e.status)},'
        f'"previous_status":{q(e.previous_status)},"loaded_revision":{_json(e.loaded_revision)},'
        f'"current_revision":{_json(e.current_revision)},"generation":{_json(generation)},"at":{_json(e.at)},'
        f'"error":{_json(e.error)},"cause":{cause}}}\n'
    ).encode()


def health_message(checkout: str, trusted: bool, mode: WatchMode) -> dict[str, Any]:
    """A ``health`` line: whether the daemon's own watcher for a checkout is trusted."""
    return {"type": "health", "checkout": checkout, "trusted": trusted, "mode": mode.value, "at": time.time()}


def restart_message(checkout: str, state: RestartState) -> dict[str, Any]:
    """A ``restart`` line: a new phase of the checkout's restart sequence."""
    return {"type": "restart", "checkout": checkout, **state.to_dict()}


def processes_message(checkout: str, processes: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``processes`` line: the servers registered for a checkout changed."""
    return {"type": "processes", "checkout": checkout, "processes": processes, "at": time.time()}


def register_message(checkout: str, revision: str, inflight: int = 0) -> dict[str, Any]:
    """What a server process sends: it guards ``checkout``, loaded ``revision``, and
    has ``inflight`` units of work in flight."""
    return {"type": "register", "checkout": checkout, "revision": revision, "inflight": inflight}


def inflight_message(checkout: str, inflight: int) -> dict[str, Any]:
    """What a registered server process sends when its work in flight changes."""
    return {"type": "inflight", "checkout": checkout, "inflight": inflight}


def refused_message(request: str, checkout: str, reason: str) -> dict[str, Any]:
    """A ``refused`` line: the daemon ignored a request and keeps the connection (e.g.
    a registration of a revision the checkout never had)."""
    return {"type": "refused", "request": request, "checkout": checkout, "reason": reason, "at": time.time()}


def removed_message(checkout: str) -> dict[str, Any]:
    """A ``removed`` line: a reload dropped this checkout; no more events for it."""
    return {"type": "removed", "checkout": checkout, "at": time.time()}


def ping_message() -> dict[str, Any]:
    """A ``ping`` line: the daemon is alive (sent every ``keepalive`` seconds)."""
    return {"type": "ping", "at": time.time()}


def error_message(reason: str, detail: str) -> dict[str, Any]:
    """An ``error`` line, sent just before the daemon closes a client."""
    return {"type": "error", "reason": reason, "detail": detail, "at": time.time()}


def pong_message(ping: Ping) -> dict[str, Any]:
    """The answer to a ping: a ``pong`` echoing its ``id`` (when it had one, even ``null``)."""
    reply: dict[str, Any] = {"type": "pong", "at": time.time()}
    if ping.has_id:
        reply["id"] = ping.id
    return reply


# -- what a client asks -----------------------------------------------------------------


@dataclass(frozen=True)
class Ping:
    """``{"type": "ping", "id": ...}``: answered with a ``pong`` echoing ``id``."""

    id: Any = None
    has_id: bool = False


@dataclass(frozen=True)
class Register:
    """``{"type": "register", "checkout": ..., "revision": ..., "inflight": N}``: a server
    process loaded ``revision`` of ``checkout`` and has ``inflight`` units of work in
    flight (0 when absent); its pid is the connection's peer, not its word."""

    checkout: str
    revision: str
    inflight: int = 0


@dataclass(frozen=True)
class Inflight:
    """``{"type": "inflight", "checkout": ..., "inflight": N}``: a registered server's work
    in flight changed. Valid only after a ``register`` for the same checkout on the
    same connection."""

    checkout: str
    inflight: int


def _count(line: bytes, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INFLIGHT:
        raise ProtocolError(line, f"'inflight' must be a whole number from 0 to {MAX_INFLIGHT}")
    return value


def parse_request(line: bytes) -> Ping | Register | Inflight:
    """A client's line as a request.

    Raises:
        ProtocolError: not JSON, not an object, an unknown type, a register without a
            checkout and a full revision, an ``inflight`` that is not a whole number from
            0 to :data:`MAX_INFLIGHT`, or a ping ``id`` longer than :data:`MAX_ID_BYTES`
            (the only exception it raises).
    """
    request = decode(line)
    if request["type"] == "register":
        checkout, revision = request.get("checkout"), request.get("revision")
        if not isinstance(checkout, str) or not isinstance(revision, str) or not is_object_id(revision):
            raise ProtocolError(line, "a register request needs a 'checkout' and a full 'revision'")
        return Register(checkout, revision, _count(line, request.get("inflight", 0)))
    if request["type"] == "inflight":
        checkout = request.get("checkout")
        if not isinstance(checkout, str):
            raise ProtocolError(line, "an inflight request needs a 'checkout'")
        return Inflight(checkout, _count(line, request.get("inflight")))
    if request["type"] != "ping":
        raise ProtocolError(line, f"unknown request type {request['type']!r}")
    # The pong echoes `id`: a 4 KiB id per ping, unread, would make every queued line
    # ten times an event's size (4 MiB per client instead of ~0.4 MiB at the bound).
    if "id" in request and len(encode({"id": request["id"]})) > MAX_ID_BYTES + 8:
        raise ProtocolError(line, f"'id' longer than {MAX_ID_BYTES} bytes")
    return Ping(request.get("id"), "id" in request)


# -- what a client reads of the daemon's hello ---------------------------------------------


def hello_problem(message: dict[str, Any]) -> str | None:
    """Why ``message`` is not a hello in this protocol (an ``error`` line: its reason); ``None`` if it is."""
    if message.get("type") == "error":
        return f"{message.get('reason')}: {message.get('detail')}"
    if message.get("type") != "hello":
        return f"expected a hello line, got {message.get('type')!r}"
    if message.get("protocol") != PROTOCOL_VERSION:
        return f"protocol {message.get('protocol')!r}; this client speaks {PROTOCOL_VERSION}"
    return None


def silence_limit(hello: dict[str, Any]) -> float:
    """How long a daemon that said ``hello`` may stay silent before it counts as wedged."""
    keepalive = hello.get("keepalive")
    if isinstance(keepalive, int | float) and not isinstance(keepalive, bool) and keepalive > 0:
        return 3.0 * float(keepalive)  # three missed pings
    return HELLO_TIMEOUT
