"""Text from outside (paths, hook output, messages) made safe for one line of a terminal or log."""

from __future__ import annotations

import unicodedata

_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with every control, format, separator or surrogate character escaped.

    A path may hold a newline (which would forge a second line), an escape sequence
    (which a terminal would obey), a bidi override, or bytes that are not UTF-8
    (surrogate escapes, which ``print`` cannot even encode). Each becomes a visible
    escape (``\\n``, ``\\x1b``, ``\\u202e``, ``\\udcff``); a backslash is doubled so the
    result reads back unambiguously. Plain text comes back unchanged.

    Example: ``printable("/srv/a\\nb")`` is ``'/srv/a\\\\nb'``.
    """
    if text.isprintable() and "\\" not in text:
        return text  # the common case, without a per-character walk
    return "".join(_NAMED.get(char) or _visible(char) for char in text)


def _visible(char: str) -> str:
    if char == " " or unicodedata.category(char)[0] not in "CZ":
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
