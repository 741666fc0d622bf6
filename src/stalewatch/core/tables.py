"""Reading a TOML configuration: typed values, and errors that name the file, line and key.

The daemon's configuration is the one TOML file stalewatch reads: top-level keys, an
array of tables (``[[checkout]]``) and, in each, sub-tables (``[checkout.restart]``).
A :class:`TableReader` names a bad value's key as ``checkout[2].restart.settle`` in a
:class:`~.errors.DaemonConfigError`, with the file and the line where that key is
written (values are read through their declarations, :mod:`.declared`).
:func:`parse` turns the text into tables with the same kind of error, so nothing else
ever escapes (``tomllib``'s own errors, a nesting that exhausts its stack, an integer
past Python's digit limit).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from .errors import DaemonConfigError


def parse(file: Path, text: str) -> dict[str, Any]:
    """The tables of ``text`` (read from ``file``).

    Raises:
        DaemonConfigError: the text is not TOML (with the line, when tomllib says it).
    """
    try:
        return tomllib.loads(text)
    except (RecursionError, ValueError) as exc:  # not TOML; nesting past the parser's stack; int limits
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        found = re.search(r"at line (\d+)", reason)  # what tomllib's own errors say
        line = int(found.group(1)) if found else None
        raise DaemonConfigError("TOML", None, f"invalid: {reason}", file=file, line=line) from None


@dataclass(frozen=True)
class TableReader:
    """One table of a file (``table`` None: the top level; ``n``: the n-th table of the
    array ``array``, from 0; ``sub``: a sub-table of it, e.g. ``restart``), naming each
    bad key by file, line and place, as ``checkout[2].restart.settle``.

    Args:
        file: the file (relative paths in it are relative to its directory).
        text: its text (searched for the line of a bad key).
        array: the name of the array of tables (``checkout``).
    """

    file: Path
    text: str
    array: str
    table: int | None = None
    sub: str | None = None

    def at(self, table: int | None, sub: str | None = None) -> TableReader:
        """The reader of another table of the same file."""
        return replace(self, table=table, sub=sub)

    def name(self, key: str | None) -> str:
        """``checkout[2].restart.settle``: a key as errors name it (None: the table)."""
        parts = [] if self.table is None else [f"{self.array}[{self.table + 1}]", self.sub]
        return ".".join(part for part in (*parts, key) if part)

    def fail(self, key: str | None, value: object, reason: str) -> NoReturn:
        """Raise the error for ``value`` of ``key`` (None: the table itself), on its line."""
        raise DaemonConfigError(self.name(key), value, reason, file=self.file, line=self.locate(key))

    def locate(self, key: str | None) -> int | None:
        """The line of ``key`` in this table (or its inline ``sub = {...}``), else of the
        table itself (``[[<array>]]`` or ``[<array>.<sub>]``); None at the top level."""
        section: tuple[int | None, str | None] | None = (None, None)
        seen, header = -1, None
        pattern = re.compile(rf"""^\s*(["']?){re.escape(key)}\1\s*=""") if key else None
        inline = re.compile(rf"""^\s*(["']?){re.escape(self.sub)}\1\s*=""") if self.sub else None
        for number, line in enumerate(self.text.splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith("[["):
                ours = stripped[2:].split("]")[0].strip() == self.array
                seen += 1 if ours else 0
                section = (seen, None) if ours else None
            elif stripped.startswith("["):
                name = [part.strip().strip("\"'") for part in stripped[1:].split("]")[0].split(".")]
                section = (seen, name[1]) if len(name) == 2 and name[0] == self.array else None
            elif section == (self.table, None) and inline is not None and inline.match(line):
                return number  # sub = { ... } written inline: the line of the table itself
            elif pattern is not None and section == (self.table, self.sub) and pattern.match(line):
                return number
            if stripped.startswith("[") and section == (self.table, self.sub) and header is None:
                header = number
        return header
