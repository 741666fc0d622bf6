"""Reading a TOML configuration: typed values, and errors that name the file, line and key.

The daemon's configuration is the one TOML file stalewatch reads: top-level keys, an
array of tables (``[[checkout]]``) and, in each, sub-tables (``[checkout.restart]``).
A :class:`TableReader` checks one value at a time and, for a bad one, raises
:class:`~.errors.DaemonConfigError` naming it as ``checkout[2].restart.settle`` with
the file and the line where that key is written. :func:`parse` turns the text into
tables with the same kind of error, so nothing else ever escapes (``tomllib``'s own
errors, a nesting that exhausts its stack, an integer past Python's digit limit).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, NoReturn

from .errors import DaemonConfigError

__all__ = ["TableReader", "parse"]


def parse(file: Path, text: str) -> dict[str, Any]:
    """The tables of ``text`` (read from ``file``).

    Raises:
        DaemonConfigError: the text is not TOML (with the line, when tomllib says it).
    """
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"at line (\d+)", str(exc))
        line = int(found.group(1)) if found else None
        raise DaemonConfigError("TOML", None, f"invalid: {exc}", file=file, line=line) from None
    except (RecursionError, ValueError) as exc:  # nesting past the parser's stack; int limits
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise DaemonConfigError("TOML", None, f"invalid: {reason}", file=file) from None


class TableReader:
    """Typed values from one file's tables, each error naming file, line and key.

    A value is addressed by ``table`` (``None``: top level; ``n``: the n-th table of
    the array ``array``, from 0) and ``sub`` (a sub-table of that table, e.g.
    ``restart``), as in ``reader.number(data, "settle", 1, 0.0, 3600.0, sub="restart")``.

    Args:
        file: the file (relative paths in it are relative to its directory).
        text: its text (searched for the line of a bad key).
        array: the name of the array of tables (``checkout``).
    """

    def __init__(self, file: Path, text: str, array: str) -> None:
        self.file = file
        self.text = text
        self.array = array
        self.base = file.parent

    def name(self, table: int | None, key: str, sub: str | None = None) -> str:
        """``checkout[2].restart.settle``: a key as errors name it."""
        if table is None:
            return key
        where = f"{self.array}[{table + 1}]"
        return f"{where}.{sub}.{key}" if sub and key != sub else f"{where}.{key}"

    def fail(
        self,
        name: str,
        value: object,
        reason: str,
        table: int | None,
        key: str | None,
        *,
        sub: str | None = None,
    ) -> NoReturn:
        """Raise the error for ``value`` of ``name``, with the line of ``key`` if found."""
        raise DaemonConfigError(name, value, reason, file=self.file, line=self.locate(table, key, sub))

    def refuse(
        self, data: dict[str, Any], key: str, reason: str, table: int | None, sub: str | None = None
    ) -> NoReturn:
        """:meth:`fail` for ``data[key]``, named by its place."""
        self.fail(self.name(table, key, sub), data.get(key), reason, table, key, sub=sub)

    def locate(self, table: int | None, key: str | None, sub: str | None = None) -> int | None:
        """The line of ``key`` at top level (``table`` None), in the n-th table of the
        array, or in its ``[<array>.<sub>]`` table (or its inline ``sub = {...}``);
        ``key`` None: the line of that table itself."""
        section: tuple[int | None, str | None] | None = (None, None)
        seen = -1
        pattern = re.compile(rf"""^\s*(["']?){re.escape(key)}\1\s*=""") if key else None
        inline = re.compile(rf"""^\s*(["']?){re.escape(sub)}\1\s*=""") if sub else None
        for number, line in enumerate(self.text.splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith("[["):
                ours = stripped[2:].split("]")[0].strip() == self.array
                seen += 1 if ours else 0
                section = (seen, None) if ours else None
                if key is None and section == (table, sub):
                    return number
                continue
            if stripped.startswith("["):
                name = [part.strip().strip("\"'") for part in stripped[1:].split("]")[0].split(".")]
                section = (seen, name[1]) if len(name) == 2 and name[0] == self.array else None
                if key is None and section == (table, sub):
                    return number
                continue
            if section == (table, None) and inline is not None and inline.match(line):
                return number  # sub = { ... } written inline: the line of the table itself
            if pattern is not None and section == (table, sub) and pattern.match(line):
                return number
        return None

    # -- typed values ------------------------------------------------------------------

    def number(
        self,
        data: dict[str, Any],
        key: str,
        table: int | None,
        low: float,
        high: float,
        *,
        sub: str | None = None,
    ) -> float:
        """A number (int or float, not a bool) within ``[low, high]``."""
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.refuse(data, key, "expected a number", table, sub)
        if not low <= value <= high:
            self.refuse(data, key, f"expected between {low:g} and {high:g}", table, sub)
        return float(value)

    def integer(
        self,
        data: dict[str, Any],
        key: str,
        table: int | None,
        low: int,
        high: int,
        *,
        sub: str | None = None,
    ) -> int:
        """A whole number (not a bool) within ``[low, high]``."""
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.refuse(data, key, f"expected a whole number between {low} and {high}", table, sub)
        return int(value)

    def choice(
        self,
        data: dict[str, Any],
        key: str,
        table: int | None,
        choices: tuple[str, ...],
        *,
        sub: str | None = None,
    ) -> str:
        """One of ``choices``, any case; returned in lower case."""
        value = data[key]
        if not isinstance(value, str) or value.lower() not in choices:
            self.refuse(data, key, f"expected one of {', '.join(choices)}", table, sub)
        return value.lower()

    def path(self, data: dict[str, Any], key: str, table: int | None, sub: str | None = None) -> Path:
        """A path (``~`` expanded; relative to the file's directory)."""
        value = data[key]
        if not isinstance(value, str) or not value or "\0" in value:
            self.refuse(data, key, "expected a non-empty path string (without NUL)", table, sub)
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.base / path

    def paths(
        self, data: dict[str, Any], key: str, table: int | None, sub: str | None = None
    ) -> tuple[Path, ...]:
        """A path or a list of paths."""
        value = data[key]
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(item, str) and item for item in items):
            self.refuse(data, key, "expected a path or a list of paths", table, sub)
        return tuple(self.path({key: item}, key, table, sub) for item in items)

    def argv(
        self, data: dict[str, Any], key: str, table: int | None, sub: str | None = None
    ) -> tuple[str, ...]:
        """A command: a non-empty list of strings without NUL (never run through a shell)."""
        value = data[key]
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(part, str) and "\0" not in part for part in value)
            or not value[0]
        ):
            self.refuse(
                data,
                key,
                'expected a non-empty list of strings without NUL, e.g. ["systemctl", "restart", "web"] '
                "(a command is never run through a shell)",
                table,
                sub,
            )
        return tuple(value)

    def known_keys(
        self, data: dict[str, Any], known: set[str], table: int | None, sub: str | None = None
    ) -> None:
        """Refuse any key not in ``known`` (a typo must not pass for a default)."""
        for key in data:
            if key not in known:
                self.refuse(data, key, f"unknown key (known: {', '.join(sorted(known))})", table, sub)
