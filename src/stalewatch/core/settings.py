"""Defaults, resolved in one place: keyword argument first, then ``STALEWATCH_*``.

==============================  =======  ===============================================
variable                        default  meaning
==============================  =======  ===============================================
``STALEWATCH_VERIFY_INTERVAL``  ``2.0``  seconds between in-process re-verifications
``STALEWATCH_POLL``             ``0``    ``1``: poll instead of kernel notifications
``STALEWATCH_POLL_INTERVAL``    ``1.0``  seconds between polls when polling
``STALEWATCH_NOTIFIER``         auto     ``inotify``, ``observer`` (watchdog's) or ``polling``
``STALEWATCH_GIT``              ``git``  the git executable for binding and reftable
``STALEWATCH_METRICS_DAEMON``   socket   the ``daemon`` label of a daemon's metrics
==============================  =======  ===============================================

``STALEWATCH_NOTIFIER`` defaults to the platform's (``inotify`` on Linux, watchdog's
observer elsewhere: see :mod:`stalewatch.watching.notifier`); ``polling`` is
``STALEWATCH_POLL=1``. ``STALEWATCH_METRICS_DAEMON`` defaults to the daemon's socket
path (unique on a host); the template unit ``stalewatch@.service`` sets it to the
instance name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import ConfigError

__all__ = [
    "NOTIFIERS",
    "WatchSettings",
    "git_executable",
    "metrics_daemon",
    "notifier",
    "poll",
    "poll_interval",
    "verify_interval",
]

NOTIFIERS = ("inotify", "observer", "polling")
"""The values ``STALEWATCH_NOTIFIER`` takes."""

MAX_DAEMON_NAME = 200
"""Characters of a daemon's name (the ``daemon`` label of its metrics) at most."""


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


def _seconds(name: str, value: float | None, default: float) -> float:
    env = f"STALEWATCH_{name.upper()}"
    raw: object = value if value is not None else os.environ.get(env, default)
    label = name if value is not None else env
    try:
        seconds = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(label, raw, "expected a number of seconds") from None
    if not 0.01 <= seconds <= 3600:
        raise ConfigError(label, raw, "expected between 0.01 and 3600 seconds")
    return seconds


def verify_interval(value: float | None = None) -> float:
    """Seconds between the watcher's periodic in-process re-verifications."""
    return _seconds("verify_interval", value, 2.0)


def poll_interval(value: float | None = None) -> float:
    """Seconds between directory scans when polling instead of using notifications."""
    return _seconds("poll_interval", value, 1.0)


def poll(value: bool | None = None) -> bool:
    """Whether to poll instead of using the platform's change notifications."""
    if value is not None:
        return value
    raw = os.environ.get("STALEWATCH_POLL", "0").strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("", "0", "false", "no", "off"):
        return False
    raise ConfigError("STALEWATCH_POLL", raw, "expected 1 or 0")


def notifier(value: str | None = None) -> str | None:
    """The notifier asked for (``STALEWATCH_NOTIFIER``), ``None`` for the platform's.

    Raises:
        ConfigError: not one of :data:`NOTIFIERS`.
    """
    label = "notifier" if value is not None else "STALEWATCH_NOTIFIER"
    raw = value if value is not None else os.environ.get("STALEWATCH_NOTIFIER", "")
    name = raw.strip().lower()
    if not name:
        return None
    if name not in NOTIFIERS:
        raise ConfigError(label, raw, f"expected one of {', '.join(NOTIFIERS)}")
    return name


def git_executable() -> str:
    """The ``git`` executable to run (``STALEWATCH_GIT``, default ``git``)."""
    return os.environ.get("STALEWATCH_GIT") or "git"


def metrics_daemon(value: str | None, socket: str) -> str:
    """The ``daemon`` label of a daemon's metrics: several daemons on a host (template
    units) write textfiles one node_exporter merges, whose series must differ.

    ``value`` (the configuration's ``metrics_daemon``), else ``STALEWATCH_METRICS_DAEMON``,
    else ``socket``, the daemon's socket path: two daemons never share one.

    Raises:
        ConfigError: the variable is empty, longer than :data:`MAX_DAEMON_NAME`, or holds
            a control character.
    """
    if value is not None:
        return value
    raw = os.environ.get("STALEWATCH_METRICS_DAEMON")
    if raw is None:
        return socket
    if not raw or len(raw) > MAX_DAEMON_NAME or not raw.isprintable():
        reason = f"expected a name of 1 to {MAX_DAEMON_NAME} printable characters"
        raise ConfigError("STALEWATCH_METRICS_DAEMON", raw, reason)
    return raw
