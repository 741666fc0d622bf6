"""Settings declared once: each key of the configuration is a field of the value it fills.

A configuration class (``DaemonConfig``, ``RestartPolicy``...) is a frozen dataclass
whose fields that a TOML key sets have :func:`setting` as their default: the kind of
value (how it is read, its bounds), the default, one line of doc and the version that
added it. :func:`read` reads a table through them, refusing keys no class declares
(naming file, line, key and the known keys); ``scripts/settings_tables.py`` writes the
docs tables from the same fields, and a test fails when the docs and they differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from .tables import TableReader

T = TypeVar("T")


class Refused(Exception):
    """A value a kind refuses: why, and the value to name when not the one written."""

    def __init__(self, reason: str, value: object = None) -> None:
        super().__init__(reason)
        self.reason, self.value = reason, value


@dataclass(frozen=True)
class Kind(Generic[T]):
    """How a key's value is read (``read(value, table)``, raising :class:`Refused`),
    and how the docs name it."""

    read: Callable[[Any, TableReader], T]
    shows: str


@dataclass(frozen=True)
class Setting:
    """A key's declaration: its :class:`Kind`, doc, version, and its TOML name when the
    field's differs; ``shown`` replaces the default in the docs (``required``)."""

    kind: Kind[Any]
    doc: str
    since: str = "0.1.0"
    key: str | None = None
    shown: str | None = None


def setting(default: T, kind: Kind[Any], doc: str, **more: Any) -> T:
    """The default of a field a TOML key sets (typed as the default, for mypy); ``more``:
    :class:`Setting`'s ``since``, ``key`` and ``shown``."""
    return dataclasses.field(default=default, metadata={"setting": Setting(kind, doc, **more)})


def declared(cls: type) -> dict[str, tuple[dataclasses.Field[Any], Setting]]:
    """The keys ``cls`` declares, by TOML name, in declaration order."""
    fields = (f for f in dataclasses.fields(cls) if "setting" in f.metadata)
    return {f.metadata["setting"].key or f.name: (f, f.metadata["setting"]) for f in fields}


def known(table: TableReader, data: dict[str, Any], *classes: type) -> None:
    """Refuse a key none of ``classes`` declares: a typo must not pass for a default."""
    keys = sorted(key for cls in classes for key in declared(cls))
    for key, value in data.items():
        if key not in keys:
            table.fail(key, value, f"unknown key (known: {', '.join(keys)})")


def read(table: TableReader, data: dict[str, Any], *classes: type) -> list[dict[str, Any]]:
    """For each class, its fields read from ``data`` (those present), by field name.

    Raises:
        DaemonConfigError: a key none of ``classes`` declares, or a value its kind refuses.
    """
    known(table, data, *classes)
    return [
        {f.name: _value(table, data, key, s.kind) for key, (f, s) in declared(cls).items() if key in data}
        for cls in classes
    ]


def _value(table: TableReader, data: dict[str, Any], key: str, kind: Kind[T]) -> T:
    try:
        return kind.read(data[key], table)
    except Refused as refused:
        table.fail(key, data[key] if refused.value is None else refused.value, refused.reason)


def seconds(low: float, high: float) -> Kind[float]:
    """A number of seconds within ``[low, high]`` (an int or a float, not a bool)."""

    def read(value: object, _: TableReader) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Refused("expected a number")
        if not low <= value <= high:
            raise Refused(f"expected between {low:g} and {high:g}")
        return float(value)

    return Kind(read, f"seconds, {low:g} to {high:g}")


def integer(low: int, high: int) -> Kind[int]:
    """A whole number within ``[low, high]`` (a bool or a float is a mistake: 2.5 attempts)."""

    def read(value: object, _: TableReader) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise Refused(f"expected a whole number between {low} and {high}")
        return value

    return Kind(read, f"whole number, {low:,} to {high:,}")


def choice(options: Iterable[str]) -> Kind[Any]:
    """One of ``options`` in any case (of an enum: made into its member)."""
    names = tuple(options)
    into: Callable[[str], Any] = options if isinstance(options, type) else str

    def read(value: object, _: TableReader) -> object:
        if not isinstance(value, str) or value.lower() not in names:
            raise Refused(f"expected one of {', '.join(names)}")
        return into(value.lower())

    return Kind(read, " or ".join(f"`{name}`" for name in names))


def _path(value: object, table: TableReader) -> Path:
    """A path (``~`` expanded; relative to the file's directory)."""
    if not isinstance(value, str) or not value or "\0" in value:
        raise Refused("expected a non-empty path string (without NUL)")
    try:
        return table.file.parent / Path(value).expanduser()  # an absolute path replaces the directory
    except RuntimeError:  # pathlib's word for "~user" naming nobody
        raise Refused("no home directory to expand ~ to") from None


def _paths(value: object, table: TableReader) -> tuple[Path, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) and item for item in items):
        raise Refused("expected a path or a list of paths")
    return tuple(_path(item, table) for item in items)


def _argv(value: object, _: TableReader) -> tuple[str, ...]:
    """A command: a non-empty list of strings without NUL (never run through a shell)."""
    parts = value if isinstance(value, list) else []
    if not parts or not parts[0] or not all(isinstance(part, str) and "\0" not in part for part in parts):
        raise Refused(
            'expected a non-empty list of strings without NUL, e.g. ["systemctl", "restart", "web"] '
            "(a command is never run through a shell)"
        )
    return tuple(parts)


def _flag(value: object, _: TableReader) -> bool:
    if not isinstance(value, bool):
        raise Refused("expected true or false")
    return value


PATH = Kind(_path, "path")
PATHS = Kind(_paths, "path or list of paths")
ARGV = Kind(_argv, "argv")
FLAG = Kind(_flag, "true or false")
