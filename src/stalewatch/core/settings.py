"""Defaults, resolved in one place: keyword argument first, then ``STALEWATCH_*``.

Each variable is declared once (:data:`VARIABLES`: name, default, doc, version); the
functions below read them, and docs/library.md's table is written from them
(``scripts/settings_tables.py``). ``STALEWATCH_METRICS_DAEMON`` defaults to the
daemon's socket path (unique on a host); the template unit ``stalewatch@.service``
sets it to the instance name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import ConfigError

NOTIFIERS = ("inotify", "observer", "polling")
"""The values ``STALEWATCH_NOTIFIER`` takes."""

MAX_DAEMON_NAME = 200
"""Characters of a daemon's name (the ``daemon`` label of its metrics) at most."""
NAME = f"expected a name of 1 to {MAX_DAEMON_NAME} printable characters"
LOW, HIGH = 0.01, 3600.0
SECONDS = f"seconds, {LOW:g} to {HIGH:g}"


@dataclass(frozen=True)
class Variable:
    """An environment setting: its name, its default as written, what it holds, its doc."""

    name: str
    default: str
    shows: str
    doc: str
    since: str = "0.1.0"


VERIFY_INTERVAL = Variable("STALEWATCH_VERIFY_INTERVAL", "2.0", SECONDS, "between in-process verifications")
POLL = Variable("STALEWATCH_POLL", "0", "`1` or `0`", "`1`: poll instead of kernel notifications")
POLL_INTERVAL = Variable("STALEWATCH_POLL_INTERVAL", "1.0", SECONDS, "between polls")
NOTIFIER = Variable(
    "STALEWATCH_NOTIFIER",
    "the platform's",
    " or ".join(f"`{name}`" for name in NOTIFIERS),
    "what tells a watcher of changes: `inotify` (Linux), `observer` (watchdog's, elsewhere);"
    " `polling` is `STALEWATCH_POLL=1`",
)
GIT = Variable("STALEWATCH_GIT", "git", "command", "the git executable (binding, reftable)")
METRICS_DAEMON = Variable(
    "STALEWATCH_METRICS_DAEMON", "the socket's path", "name", "the `daemon` label of the daemon's metrics"
)
VARIABLES = (VERIFY_INTERVAL, POLL, POLL_INTERVAL, NOTIFIER, GIT, METRICS_DAEMON)


@dataclass(frozen=True)
class WatchSettings:
    """What a watcher runs with, resolved (by :class:`~stalewatch.LocalSource`, from the functions below).

    Attributes:
        verify_interval: seconds between periodic in-process re-verifications.
        poll: poll instead of kernel notifications.
        poll_interval: seconds between polls while polling.
        notifier: what tells the watcher of changes when not polling
            (``inotify`` or ``observer``: :mod:`stalewatch.watching.notifier`).
    """

    verify_interval: float
    poll: bool
    poll_interval: float
    notifier: str = "inotify"


def _seconds(variable: Variable, keyword: str, value: float | None) -> float:
    raw: object = value if value is not None else os.environ.get(variable.name, variable.default)
    label = keyword if value is not None else variable.name
    try:
        seconds = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(label, raw, "expected a number of seconds") from None
    if not LOW <= seconds <= HIGH:
        raise ConfigError(label, raw, f"expected between {LOW:g} and {HIGH:g} seconds")
    return seconds


def verify_interval(value: float | None = None) -> float:
    """Seconds between the watcher's periodic in-process re-verifications."""
    return _seconds(VERIFY_INTERVAL, "verify_interval", value)


def poll_interval(value: float | None = None) -> float:
    """Seconds between directory scans when polling instead of using notifications."""
    return _seconds(POLL_INTERVAL, "poll_interval", value)


def poll(value: bool | None = None) -> bool:
    """Whether to poll instead of using the platform's change notifications."""
    raw = os.environ.get(POLL.name, POLL.default).strip().lower()
    if value is None and raw not in ("1", "true", "yes", "on", "", "0", "false", "no", "off"):
        raise ConfigError(POLL.name, raw, "expected 1 or 0")
    return value if value is not None else raw in ("1", "true", "yes", "on")


def notifier(value: str | None = None) -> str | None:
    """The notifier asked for (``STALEWATCH_NOTIFIER``), ``None`` for the platform's.

    Raises:
        ConfigError: not one of :data:`NOTIFIERS`.
    """
    label = "notifier" if value is not None else NOTIFIER.name
    raw = value if value is not None else os.environ.get(NOTIFIER.name, "")
    name = raw.strip().lower()
    if name and name not in NOTIFIERS:
        raise ConfigError(label, raw, f"expected one of {', '.join(NOTIFIERS)}")
    return name or None


def git_executable() -> str:
    """The ``git`` executable to run (``STALEWATCH_GIT``, default ``git``)."""
    return os.environ.get(GIT.name) or GIT.default


def is_name(value: object) -> bool:
    """Whether ``value`` may be a daemon's name: printable, 1 to :data:`MAX_DAEMON_NAME` characters."""
    return isinstance(value, str) and 0 < len(value) <= MAX_DAEMON_NAME and value.isprintable()


def metrics_daemon(value: str | None, socket: str) -> str:
    """The ``daemon`` label of a daemon's metrics: several daemons on a host (template
    units) write textfiles one node_exporter merges, whose series must differ.

    ``value`` (the configuration's ``metrics_daemon``), else ``STALEWATCH_METRICS_DAEMON``,
    else ``socket``, the daemon's socket path: two daemons never share one.

    Raises:
        ConfigError: the variable is empty, longer than :data:`MAX_DAEMON_NAME`, or holds
            a control character.
    """
    raw = os.environ.get(METRICS_DAEMON.name) if value is None else value
    if value is None and raw is not None and not is_name(raw):
        raise ConfigError(METRICS_DAEMON.name, raw, NAME)
    return socket if raw is None else raw
