"""The daemon's wire protocol (version 1): JSON lines over a Unix stream socket.

Pure: encoding, decoding (bounded: what :func:`encode` cannot echo is refused) and
line splitting. The lines themselves: :mod:`.messages`; every field: docs/daemon.md,
"Protocol (version 1)".
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..core.errors import ProtocolError

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


def encode(message: Mapping[str, Any]) -> bytes:
    """One message as a JSON line (compact, ASCII, newline-terminated).

    ASCII (``ensure_ascii``): a path that is not UTF-8 holds surrogate escapes, which
    only a ``\\u`` escape can carry.
    """
    return "".join(_encode(message, 0)).encode() + b"\n"


quote: Callable[[str], str] = json.encoder.encode_basestring_ascii
"""A string as :func:`encode` writes it (quoted, ASCII, escaped)."""


def encode_value(value: object) -> str:
    """A str, number, bool or ``None`` as :func:`encode` writes it (``ValueError`` where it
    raises: a float that is not finite)."""
    return quote(value) if isinstance(value, str) else "".join(_encode(value, 0))


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
# JSONEncoder.encode makes a C encoder per call: made once, ~20 µs less of a cold update's
# path (issue 27). No circularity check: every message is a tree built here or decoded.
_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)  # None: an interpreter without _json
_encode: Callable[[object, int], Iterable[str]] = (
    (lambda message, _: _ENCODER.iterencode(message))
    if _C_ENCODER is None
    else _C_ENCODER(None, _ENCODER.default, quote, None, ":", ",", False, False, False)
)


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
