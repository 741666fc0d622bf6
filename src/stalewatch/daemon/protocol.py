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
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import StalewatchError
from ..core.status import Event, Snapshot

__all__ = [
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
    "removed_message",
    "snapshot_message",
]

PROTOCOL_VERSION = 1
"""Bumped on any incompatible change; clients refuse a daemon with another version."""
MAX_REQUEST_LINE = 4096
"""Longest line a client may send the daemon (requests are tiny)."""
MAX_MESSAGE_LINE = 1 << 20
"""Longest line a client accepts from the daemon (a snapshot is a few hundred bytes)."""
SOCKET_NAME = "stalewatch.sock"


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
    """One message as a JSON line (compact, UTF-8, newline-terminated)."""
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """Parse one line (with or without its newline) into a message with a ``type``.

    Raises:
        ProtocolError: not UTF-8 JSON, not an object, or no string ``type``.
    """
    try:
        message = json.loads(line)
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
        "at": time.time(),
    }


def snapshot_message(snap: Snapshot, generation: int) -> dict[str, Any]:
    """A ``snapshot`` line: where a checkout stands now, with the daemon's generation.

    ``cause`` (what moved HEAD, or null) is optional for clients: version 1 clients
    ignore fields they do not know.
    """
    return {
        "type": "snapshot",
        "checkout": str(snap.checkout),
        "status": snap.status.value,
        "loaded_revision": snap.loaded_revision,
        "current_revision": snap.current_revision,
        "generation": generation,
        "at": snap.changed_at,
        "trusted": snap.trusted,
        "mode": snap.mode,
        "error": snap.error,
        "cause": snap.cause.to_dict() if snap.cause is not None else None,
    }


def event_message(event: Event, generation: int) -> dict[str, Any]:
    """An ``event`` line: one change of status or current revision (with its ``cause``)."""
    return {
        "type": "event",
        "checkout": str(event.checkout),
        "status": event.status.value,
        "previous_status": event.previous_status.value,
        "loaded_revision": event.loaded_revision,
        "current_revision": event.current_revision,
        "generation": generation,
        "at": event.at,
        "error": event.error,
        "cause": event.cause.to_dict() if event.cause is not None else None,
    }


def health_message(checkout: str, trusted: bool, mode: str) -> dict[str, Any]:
    """A ``health`` line: whether the daemon's own watcher for a checkout is trusted."""
    return {"type": "health", "checkout": checkout, "trusted": trusted, "mode": mode, "at": time.time()}


def removed_message(checkout: str) -> dict[str, Any]:
    """A ``removed`` line: a reload dropped this checkout; no more events for it."""
    return {"type": "removed", "checkout": checkout, "at": time.time()}


def error_message(reason: str, detail: str) -> dict[str, Any]:
    """An ``error`` line, sent just before the daemon closes a client."""
    return {"type": "error", "reason": reason, "detail": detail, "at": time.time()}
