"""``stalewatch daemon``: the daemon in the foreground until SIGTERM/SIGINT (SIGHUP reloads).

The command line wires the process together: the configuration, the daemon's log,
the listening socket, and, only when the configuration asks for them, metrics (so
without it ``prometheus_client`` is never imported; asking without the ``metrics``
extra exits 2 naming it).

``stalewatch daemon --check``: what a start would run, printed; nothing opened. The
check reads and binds as a start does (:func:`stalewatch.server.startup.read`, then
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
import gc
import json
import logging
import socket
import sys
from collections.abc import Callable, Iterator
from importlib.util import find_spec
from pathlib import Path

from ..core import exits
from ..core.declared import declared
from ..core.errors import StalewatchError
from ..core.escaping import printable
from ..server import journal, startup
from ..server.checkout import Checkout
from ..server.config import DaemonConfig, load, with_checkouts
from ..server.listening import listen, release, unlink_if_ours
from ..server.loop import DaemonServer, ObserverFactory
from ..server.registry import Registry
from ..server.reloader import AT_START

logger = logging.getLogger(__name__)


def observer(settings: DaemonConfig) -> ObserverFactory | None:
    """Metrics, only when the configuration asks for them (the only import of the package)."""
    if not settings.metrics:
        return None
    from .. import metrics  # noqa: PLC0415 - imported only when asked for

    return metrics.for_daemon


def _fail(problem: object) -> int:
    """Say why the daemon did not start (or ``--check`` refused): usage, exit 2."""
    print(f"stalewatch: {problem}", file=sys.stderr)
    return exits.USAGE


def cmd_daemon(args: argparse.Namespace) -> int:
    """Run the daemon in the foreground until SIGTERM/SIGINT; with ``--check``, read and
    bind as a start does, print what would run and stop there."""
    there = {"AF_UNIX sockets": hasattr(socket, "AF_UNIX"), "fcntl": find_spec("fcntl") is not None}
    if (missing := [what for what, ok in there.items() if not ok]) and not args.check:  # Windows
        return _fail(
            f"the daemon needs {' and '.join(missing)}, which this platform ({sys.platform}) lacks; "
            "guards, barriers and SSE work here with their in-process watcher (no daemon)"
        )
    with contextlib.ExitStack() as cleanup:  # undone in reverse, on every way out
        try:
            config = Path(args.config) if args.config else None
            start = startup.read(config, args.checkouts, Path(args.socket) if args.socket else None)
            settings, path = start.settings, start.socket
            cleanup.callback(logging.getLogger().removeHandler, journal.install(settings.log_level))
            if args.check:
                return _check(start)
            reload = (lambda: with_checkouts(load(Path(args.config)), args.checkouts)) if config else None
            server = DaemonServer(settings, reload, observe=observer(settings))
            cleanup.callback(server.close)
            sock, lock = listen(path)
            cleanup.callback(release, path, lock)
            cleanup.callback(unlink_if_ours, path, path.lstat())
            cleanup.callback(sock.close)
            server.start_metrics()  # after the socket: a second daemon is refused for that first
        except StalewatchError as exc:
            return _fail(exc)
        try:
            server.serve(sock)
        except Exception:
            logger.exception("stalewatch: the daemon failed")
            return exits.FAILED
    # The process ends now: its last collection would walk every object of thousands
    # of checkouts for nothing (over a second at 10,000; systemd waits 5 s for us).
    gc.freeze()
    return exits.OK


def _check(start: startup.Startup) -> int:
    """Bind what a start would (the metrics extra imported when asked for, every checkout
    bound, never started: they tell nobody anything); print what would run.

    Raises:
        StalewatchError: what a start would refuse.
    """
    factory = observer(start.settings)
    if factory is not None:
        factory(start.settings, lambda: (), Registry())
    entries = startup.bind(start.settings, lambda config, base: Checkout(config, lambda _: None, base))
    for line in describe(start, list(entries.values())):
        print(line)
    return exits.OK


def describe(start: startup.Startup, entries: list[Checkout]) -> Iterator[str]:
    """The lines ``--check`` prints: the settings in effect (``# default`` where nothing
    was written), then each checkout, what it resolved to, its hooks and restart policy."""
    settings = start.settings
    yield f"# {printable(str(settings.file.absolute())) if settings.file else 'no configuration file'}: valid"
    yield _line("socket", start.socket.absolute(), note="read at start only")
    # The metrics keys come last (declared so), when metrics are on.
    metrics = settings.metrics
    yield from _values(
        settings,
        lambda key: key not in ("socket", "checkout") and (metrics or not key.startswith("metrics_")),
    )
    if not metrics:
        yield "# metrics: off (neither metrics_address nor metrics_textfile)"
    for entry in entries:
        yield from _checkout(entry)
    yield f"# {len(entries)} checkout{'s' if len(entries) != 1 else ''}; nothing was started"


def _checkout(entry: Checkout) -> Iterator[str]:
    config = entry.config
    snap = entry.guard.snapshot()
    dirs = entry.guard.binding.dirs
    yield "\n[[checkout]]"
    yield _line("path", config.path)
    if dirs is not None:
        common = "" if dirs.common_dir == dirs.git_dir else f", common dir {dirs.common_dir}"
        yield printable(f"# worktree {dirs.worktree}, git dir {dirs.git_dir}{common}, refs {dirs.store.name}")
    yield f"# HEAD {snap.current_revision or '(no commit yet)'}, {snap.status.value}"
    yield (
        "# revision: HEAD when the daemon starts"
        if config.revision is None
        else _line("revision", config.revision)
    )
    yield from _values(config.hooks)
    if (policy := config.restart) is None:
        yield "# restart: none (no [checkout.restart] table)"
        return
    yield "[checkout.restart]"
    # A signal is sent only without an action: with one, the default signal means nothing.
    yield from _values(policy, lambda key: key != "signal" or policy.action is None)


def _values(settings: object, wanted: Callable[[str], bool] = lambda key: True) -> Iterator[str]:
    """``key = value`` for each declared key ``wanted`` that is set (``None``: not set, left
    out), in declaration order, marking defaults and what is read at start only."""
    defaults = type(settings)()
    for key, (field, _) in declared(type(settings)).items():
        value = getattr(settings, field.name)
        if not wanted(key) or value is None or value == ():
            continue
        notes = ["default"] if value == getattr(defaults, field.name) else []
        notes += ["read at start only"] if key in AT_START else []
        yield _line(key, value, note="; ".join(notes))


def _line(key: str, value: object, *, note: str = "") -> str:
    return f"{key} = {_toml(value)}" + (f"  # {note}" if note else "")


def _toml(value: object) -> str:
    """A value as the file would write it (strings escaped: one line, nothing a terminal obeys)."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int):  # metrics_address
        host, port = value
        return json.dumps(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml(part) for part in value) + "]"
    # Numbers and booleans as TOML writes them; anything else as a string: ASCII, every
    # control character escaped.
    return json.dumps(value if isinstance(value, bool | int | float) else str(value))
