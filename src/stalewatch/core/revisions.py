"""Revisions as text: what a full commit id looks like, and its short form for people."""

from __future__ import annotations

_HEX = frozenset("0123456789abcdef")
_HEX_BYTES = frozenset(b"0123456789abcdef")  # bytes' ints


def is_object_id(text: str) -> bool:
    """True for a full SHA-1 (40) or SHA-256 (64) hex object id in lower case (a ``str``)."""
    return isinstance(text, str) and len(text) in (40, 64) and _HEX.issuperset(text)


def is_object_id_bytes(data: bytes) -> bool:
    """:func:`is_object_id` of bytes read from a file (``packed-refs``), undecoded."""
    return len(data) in (40, 64) and _HEX_BYTES.issuperset(data)


def short(revision: str | None) -> str:
    """Return the 7-character form of a revision, or ``(none)`` when unknown."""
    return revision[:7] if revision else "(none)"
