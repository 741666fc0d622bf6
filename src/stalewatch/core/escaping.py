"""Text from outside (paths, hook output, messages) made safe for one line of a terminal or log."""

from __future__ import annotations

import unicodedata


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
    return "".join(ascii(char)[1:-1] if _escaped(char) else char for char in text)


def _escaped(char: str) -> bool:
    return char == "\\" or (char != " " and unicodedata.category(char)[0] in "CZ")
