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
from typing import Any, TypeVar

from .tables import TableReader

__all__ = [
    "ARGV",
    "FLAG",
    "PATH",
    "PATHS",
    "Kind",
    "Setting",
    "choice",
    "declared",
    "integer",
    "read",
    "seconds",
    "setting",
]

T = TypeVar("T")
Read = Callable[[TableReader, dict[str, Any], str, int | None, str | None], Any]


@dataclass(frozen=True)
class Kind:
    """How a key's value is read (its checks and bounds), and how the docs name it."""

    read: Read
    shows: str


@dataclass(frozen=True)
class Setting:
    """A key's declaration: its :class:`Kind`, doc, version, and its TOML name when the
    field's differs; ``shown`` replaces the default in the docs (``required``)."""

    kind: Kind
    doc: str
    since: str
    key: str | None
    shown: str | None


def setting(
    default: T,
    kind: Kind,
    doc: str,
    *,
    since: str = "0.1.0",
    key: str | None = None,
    shown: str | None = None,
) -> T:
    """The default of a field a TOML key sets (typed as the default, for mypy)."""
    metadata = {"setting": Setting(kind, doc, since, key, shown)}
    return dataclasses.field(default=default, metadata=metadata)


def declared(cls: type) -> dict[str, tuple[dataclasses.Field[Any], Setting]]:
    """The keys ``cls`` declares, by TOML name, in declaration order."""
    fields = (f for f in dataclasses.fields(cls) if "setting" in f.metadata)
    return {f.metadata["setting"].key or f.name: (f, f.metadata["setting"]) for f in fields}


def read(
    reader: TableReader, data: dict[str, Any], table: int | None, sub: str | None, *classes: type
) -> list[dict[str, Any]]:
    """For each class, its fields read from ``data`` (those present), by field name.

    Raises:
        DaemonConfigError: a key none of ``classes`` declares, or a value its kind refuses.
    """
    keys = [declared(cls) for cls in classes]
    reader.known_keys(data, {key for each in keys for key in each}, table, sub)
    return [
        {f.name: s.kind.read(reader, data, key, table, sub) for key, (f, s) in each.items() if key in data}
        for each in keys
    ]


def seconds(low: float, high: float) -> Kind:
    """A number of seconds within ``[low, high]`` (an int or a float, not a bool)."""
    return Kind(lambda r, d, k, t, s: r.number(d, k, t, low, high, sub=s), f"seconds, {low:g} to {high:g}")


def integer(low: int, high: int) -> Kind:
    """A whole number within ``[low, high]`` (a bool or a float is a mistake)."""
    return Kind(
        lambda r, d, k, t, s: r.integer(d, k, t, low, high, sub=s), f"whole number, {low:,} to {high:,}"
    )


def choice(options: Iterable[str], into: Callable[[str], object] = str) -> Kind:
    """One of ``options`` in any case, made into ``into`` (an enum)."""
    names = tuple(options)
    shows = " or ".join(f"`{name}`" for name in names)
    return Kind(lambda r, d, k, t, s: into(r.choice(d, k, t, names, sub=s)), shows)


PATH = Kind(lambda r, d, k, t, s: r.path(d, k, t, s), "path")
PATHS = Kind(lambda r, d, k, t, s: r.paths(d, k, t, s), "path or list of paths")
ARGV = Kind(lambda r, d, k, t, s: r.argv(d, k, t, s), "argv")


def _flag(reader: TableReader, data: dict[str, Any], key: str, table: int | None, sub: str | None) -> bool:
    if not isinstance(data[key], bool):
        reader.refuse(data, key, "expected true or false", table, sub)
    return bool(data[key])


FLAG = Kind(_flag, "true or false")
