"""``stalewatch daemon --check``: what a start would run, printed; nothing opened.

The check reads and binds as a start does (:func:`.daemon.starting`, then
:func:`stalewatch.server.startup.bind`: the file's ownership checks, every key, the
metrics extra when asked for, every checkout bound) and stops before the socket, its
lock and the watchers: it creates no file, and a daemon running on that socket does not
notice. It exits 0 with what would run on stdout, or 2 with the error a start prints
(``FILE:LINE: KEY: REASON``). The name follows ``nginx -t`` and ``haproxy -c``: the
flag on the command it checks, so a unit's own ``ExecStart=`` line plus ``--check``
checks exactly what that unit would start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

from ..core import exits
from ..core.errors import StalewatchError
from ..core.escaping import printable
from ..server import journal, startup
from ..server.checkout import Checkout, Posted
from ..server.config import DaemonConfig
from ..server.registry import Registry
from ..server.reloader import AT_START
from .daemon import fail, observer, starting

__all__ = ["cmd_check", "describe"]

_TOP = ("keepalive", "max_clients", "client_queue", "client_buffer", "log_level")
_METRICS = ("metrics_address", "metrics_textfile", "metrics_interval", "metrics_daemon")
_HOOKS = {  # HookConfig's field: the file's key
    "on_stale": "on_stale",
    "on_current": "on_current",
    "on_unreadable": "on_unreadable",
    "timeout": "hook_timeout",
    "hold_while": "hold_while",
}


def cmd_check(args: argparse.Namespace) -> int:
    """Check the daemon's configuration as a start would; print what would run."""
    with contextlib.ExitStack() as cleanup:
        try:
            start = starting(args)
            handler = journal.install(start.settings.log_level)  # what binding logs, as at start
            cleanup.callback(logging.getLogger().removeHandler, handler)
            factory = observer(start.settings)
            if factory is not None:  # the metrics extra, asked for: imported as a start does
                factory(start.settings, lambda: (), Registry())
            # Bound as a start binds them, never started (so they tell nobody anything).
            entries = startup.bind(start.settings, lambda config, base: Checkout(config, _nowhere, base))
        except StalewatchError as exc:
            return fail(exc)
    for line in describe(start, list(entries.values())):
        print(line)
    return exits.OK


def _nowhere(message: Posted) -> None:
    """Where an unstarted checkout's messages would go: it sends none."""


def describe(start: startup.Startup, entries: list[Checkout]) -> Iterator[str]:
    """The lines ``--check`` prints: the settings in effect (``# default`` where nothing
    was written), then each checkout, what it resolved to, its hooks and restart policy."""
    settings = start.settings
    yield f"# {_text(settings.file.absolute()) if settings.file else 'no configuration file'}: valid"
    yield _line("socket", start.socket.absolute(), note="read at start only")
    yield from _values(settings, DaemonConfig(), {key: key for key in _TOP})
    if settings.metrics:
        yield from _values(settings, DaemonConfig(), {key: key for key in _METRICS}, at_start=True)
    else:
        yield "# metrics: off (neither metrics_address nor metrics_textfile)"
    for entry in entries:
        yield from _checkout(entry)
    yield f"# {len(entries)} checkout{'s' if len(entries) != 1 else ''}; nothing was started"


def _checkout(entry: Checkout) -> Iterator[str]:
    config = entry.config
    snap = entry.guard.snapshot()
    dirs = entry.guard.binding.dirs
    yield ""
    yield "[[checkout]]"
    yield _line("path", config.path)
    if dirs is not None:
        common = "" if dirs.common_dir == dirs.git_dir else f", common dir {_text(dirs.common_dir)}"
        where = f"worktree {_text(dirs.worktree)}, git dir {_text(dirs.git_dir)}{common}"
        yield f"# {where}, refs {dirs.store.name}"
    yield f"# HEAD {snap.current_revision or '(no commit yet)'}, {snap.status.value}"
    if config.revision is None:
        yield "# revision: HEAD when the daemon starts"
    else:
        yield _line("revision", config.revision)
    yield from _values(config.hooks, type(config.hooks)(), _HOOKS)
    if config.restart is None:
        yield "# restart: none (no [checkout.restart] table)"
        return
    yield "[checkout.restart]"
    policy = config.restart
    # A signal is sent only without an action: with one, the default signal means nothing.
    unused = {"signal"} if policy.action is not None else set()
    keys = {field.name: field.name for field in fields(policy) if field.name not in unused}
    yield from _values(policy, type(policy)(), keys)


def _values(
    settings: object, defaults: object, keys: dict[str, str], *, at_start: bool = False
) -> Iterator[str]:
    """``key = value`` for each field set (``None``: not set, left out), marking defaults."""
    for attribute, key in keys.items():
        value = getattr(settings, attribute)
        if value is None or value == ():
            continue
        notes = ["default"] if value == getattr(defaults, attribute) else []
        notes += ["read at start only"] if at_start and key in AT_START else []
        yield _line(key, value, note="; ".join(notes))


def _line(key: str, value: object, *, note: str = "") -> str:
    return f"{key} = {_toml(value)}" + (f"  # {note}" if note else "")


def _toml(value: object) -> str:
    """A value as the file would write it (strings escaped: one line, nothing a terminal obeys)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int):  # metrics_address
        host, port = value
        return json.dumps(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml(part) for part in value) + "]"
    return json.dumps(str(value))  # ASCII, every control character escaped


def _text(path: Path) -> str:
    return printable(str(path))
