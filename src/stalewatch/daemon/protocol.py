"""The daemon's wire protocol: JSON lines over a Unix stream socket (version 1).

The daemon writes, in order: one ``hello`` line, one ``snapshot`` line per watched
checkout, then ``event`` lines as statuses change, ``health`` lines when its own
watcher for a checkout becomes trusted or untrusted, ``snapshot``/``removed`` lines when
a reload adds, re-binds or drops a checkout, and a ``ping`` every ``keepalive`` seconds.
A client may write ``{"type": "ping"}`` lines (answered with ``pong``); anything else
closes that client after an ``error`` line. Every field: README, "Protocol (version 1)".

This module is pure: encoding, decoding, line splitting and the default socket path.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import StalewatchError
from ..core.phases import RestartState
from ..core.status import Event, Snapshot

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_REQUEST_LINE",
    "PROTOCOL_VERSION",
    "LineReader",
    "ProtocolError",
    "SocketPathError",
    "decode",
    "default_socket_path",
    "encode",
    "error_message",
    "event_message",
    "health_message",
    "hello_message",
    "processes_message",
    "register_message",
    "removed_message",
    "restart_message",
    "snapshot_message",
]

PROTOCOL_VERSION = 1
"""Bumped on any incompatible change; clients refuse a daemon with another version."""
MAX_REQUEST_LINE = 4096
"""Longest line a client may send the daemon (requests are tiny)."""
MAX_MESSAGE_LINE = 1 << 20
"""Longest line a client accepts from the daemon (a snapshot is a few hundred bytes)."""
MAX_DEPTH = 32
"""Deepest nesting of arrays and objects :func:`decode` accepts (messages are flat)."""
MAX_INT_DIGITS = 64
"""Longest integer :func:`decode` accepts, in digits."""
SOCKET_NAME = "stalewatch.sock"
FEATURES = ("register",)
"""What this daemon offers beyond protocol 1's base, listed in its hello: a client sends
``register`` only to a daemon that lists it (an older one would close it for the line)."""


class ProtocolError(StalewatchError):
    """A line that breaks the protocol.

    Attributes:
        line: the offending bytes (truncated to 200).
        reason: what is wrong with it.
    """

    def __init__(self, line: bytes, reason: str) -> None:
        self.line = line[:200]
        self.reason = reason
        super().__init__(f"{reason}: {self.line!r}")


class SocketPathError(StalewatchError):
    """No usable socket path: none given and no runtime directory, or a bad path.

    Attributes:
        path: the path (``None`` when there was none to try).
        reason: what is wrong.
    """

    def __init__(self, path: Path | None, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}" if path is not None else reason)


def default_socket_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$RUNTIME_DIRECTORY/stalewatch.sock``, else ``$XDG_RUNTIME_DIR/stalewatch.sock``.

    systemd sets ``RUNTIME_DIRECTORY`` (first entry of a colon-separated list) from the
    unit's ``RuntimeDirectory=``; ``XDG_RUNTIME_DIR`` covers a developer's session.

    Raises:
        SocketPathError: neither variable is set.
    """
    env = os.environ if environ is None else environ
    runtime = env.get("RUNTIME_DIRECTORY", "").split(":")[0]
    if runtime:
        return Path(runtime) / SOCKET_NAME
    xdg = env.get("XDG_RUNTIME_DIR", "")
    if xdg:
        return Path(xdg) / SOCKET_NAME
    raise SocketPathError(
        None, "no socket path: pass --socket PATH (neither RUNTIME_DIRECTORY nor XDG_RUNTIME_DIR is set)"
    )


def encode(message: Mapping[str, Any]) -> bytes:
    """One message as a JSON line (compact, ASCII, newline-terminated).

    ASCII (``ensure_ascii``): a path that is not UTF-8 holds surrogate escapes, which
    only a ``\\u`` escape can carry.
    """
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode() + b"\n"


class _Refused(Exception):
    """Raised from inside ``json.loads`` by a hook refusing a value."""


def _no_constant(name: str) -> Any:
    # NaN, Infinity, -Infinity: json.loads accepts them, but encode() cannot echo them.
    raise _Refused(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses to inf: as unencodable as Infinity
        raise _Refused(f"number {text[:40]} is out of range")
    return value


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise _Refused(f"integer of {len(text)} digits")
    return int(text)


def _check_depth(message: object) -> None:
    """Refuse nesting past :data:`MAX_DEPTH` (iterative: no stack to exhaust here)."""
    stack: list[tuple[object, int]] = [(message, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH}")
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))


def decode(line: bytes) -> dict[str, Any]:
    """Parse one line (with or without its newline) into a message with a ``type``.

    Only what :func:`encode` can write back is accepted, so a decoded message can
    always be re-encoded (echoed): finite numbers, integers of at most
    :data:`MAX_INT_DIGITS` digits, nesting at most :data:`MAX_DEPTH` deep. A string
    may hold a lone surrogate escape (``"\\udcff"``): that is how a path that is not
    UTF-8 travels (:func:`os.fsdecode`'s form), and :func:`encode` writes it back as
    the same escape.

    Raises:
        ProtocolError: for any other input (this is the only exception it raises).
    """
    try:
        message = json.loads(
            line, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_bounded_int
        )
        _check_depth(message)
    except _Refused as exc:
        raise ProtocolError(line, str(exc)) from None
    except RecursionError:  # nesting deep enough to exhaust the parser's stack
        raise ProtocolError(line, f"nested deeper than {MAX_DEPTH}") from None
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError(line, "not a JSON line") from None
    if not isinstance(message, dict):
        raise ProtocolError(line, "not a JSON object")
    if not isinstance(message.get("type"), str):
        raise ProtocolError(line, "no 'type' string")
    return message


class LineReader:
    """Splits a byte stream into lines, refusing any longer than ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return the complete lines (without newlines).

        Raises:
            ProtocolError: a line grew past the limit.
        """
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > self._limit or any(len(line) > self._limit for line in lines):
            raise ProtocolError(self._buffer[:200], f"line longer than {self._limit} bytes")
        return lines


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


def event_message(event: Event, generation: int) -> dict[str, Any]:
    """An ``event`` line: one change of status or current revision (with its ``cause``)."""
    return {"type": "event", **event.to_dict(), "generation": generation}


def health_message(checkout: str, trusted: bool, mode: str) -> dict[str, Any]:
    """A ``health`` line: whether the daemon's own watcher for a checkout is trusted."""
    return {"type": "health", "checkout": checkout, "trusted": trusted, "mode": mode, "at": time.time()}


def restart_message(checkout: str, state: RestartState) -> dict[str, Any]:
    """A ``restart`` line: a new phase of the checkout's restart sequence (R7)."""
    return {"type": "restart", "checkout": checkout, **state.to_dict()}


def processes_message(checkout: str, processes: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``processes`` line: the servers registered for a checkout changed (R5)."""
    return {"type": "processes", "checkout": checkout, "processes": processes, "at": time.time()}


def register_message(checkout: str, revision: str) -> dict[str, Any]:
    """What a server process sends: it guards ``checkout`` and loaded ``revision`` (R5)."""
    return {"type": "register", "checkout": checkout, "revision": revision}


def removed_message(checkout: str) -> dict[str, Any]:
    """A ``removed`` line: a reload dropped this checkout; no more events for it."""
    return {"type": "removed", "checkout": checkout, "at": time.time()}


def error_message(reason: str, detail: str) -> dict[str, Any]:
    """An ``error`` line, sent just before the daemon closes a client."""
    return {"type": "error", "reason": reason, "detail": detail, "at": time.time()}
