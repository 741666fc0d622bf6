"""Revisions as text: what a full commit id looks like, and its short form for people."""

from __future__ import annotations

_HEX = frozenset("0123456789abcdef") | frozenset(b"0123456789abcdef")  # characters, and bytes' ints


def is_object_id(text: str | bytes) -> bool:
    """True for a full SHA-1 (40) or SHA-256 (64) hex object id in lower case (text, or bytes read)."""
    return len(text) in (40, 64) and _HEX.issuperset(text)


def short(revision: str | None) -> str:
    """Return the 7-character form of a revision, or ``(none)`` when unknown."""
    return revision[:7] if revision else "(none)"
