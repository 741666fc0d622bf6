"""``stalewatch daemon``: the daemon in the foreground until SIGTERM/SIGINT (SIGHUP reloads).

The command line wires the process together: the configuration, the daemon's log,
the listening socket, and, only when the configuration asks for them, metrics (so
without it ``prometheus_client`` is never imported; asking without the ``metrics``
extra exits 2 naming it).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import socket
import sys
from importlib.util import find_spec
from pathlib import Path

from ..core import exits
from ..core.errors import StalewatchError
from ..server import journal, startup
from ..server.config import DaemonConfig, load, with_checkouts
from ..server.listening import listen, release, unlink_if_ours
from ..server.loop import DaemonServer, ObserverFactory

__all__ = ["cmd_daemon", "fail", "observer", "starting"]

logger = logging.getLogger(__name__)


def _load(args: argparse.Namespace) -> DaemonConfig:
    settings = load(Path(args.config)) if args.config else DaemonConfig()
    return with_checkouts(settings, args.checkouts)


def starting(args: argparse.Namespace) -> startup.Startup:
    """The configuration and socket a start reads from its arguments (``--check`` too)."""
    return startup.read(
        Path(args.config) if args.config else None,
        args.checkouts,
        Path(args.socket) if args.socket else None,
    )


def observer(settings: DaemonConfig) -> ObserverFactory | None:
    """Metrics, only when the configuration asks for them (the only import of the package)."""
    if not settings.metrics:
        return None
    from .. import metrics  # noqa: PLC0415 - imported only when asked for

    return metrics.for_daemon


def fail(problem: object) -> int:
    """Say why the daemon did not start (or ``--check`` refused): usage, exit 2."""
    print(f"stalewatch: {problem}", file=sys.stderr)
    return exits.USAGE


def unix_only() -> str | None:
    """Why the daemon cannot run here (no Unix sockets or ``flock``: Windows), or ``None``."""
    there = {"AF_UNIX sockets": hasattr(socket, "AF_UNIX"), "fcntl": find_spec("fcntl") is not None}
    if all(there.values()):
        return None
    return (
        f"the daemon needs {' and '.join(what for what, ok in there.items() if not ok)}, which this "
        f"platform ({sys.platform}) lacks; guards, barriers and SSE work here with their in-process "
        "watcher (no daemon)"
    )


def cmd_daemon(args: argparse.Namespace) -> int:
    """Run the daemon in the foreground until SIGTERM/SIGINT."""
    problem = unix_only()
    if problem is not None:
        return fail(problem)
    with contextlib.ExitStack() as cleanup:  # undone in reverse, on every way out
        try:
            start = starting(args)
            settings, path = start.settings, start.socket
            handler = journal.install(settings.log_level)
            cleanup.callback(logging.getLogger().removeHandler, handler)
            reload = (lambda: _load(args)) if args.config else None
            server = DaemonServer(settings, reload, observe=observer(settings))
            cleanup.callback(server.close)
            sock, lock = listen(path)
            cleanup.callback(release, path, lock)
            cleanup.callback(unlink_if_ours, path, path.lstat())
            cleanup.callback(sock.close)
            server.start_metrics()  # after the socket: a second daemon is refused for that first
        except StalewatchError as exc:
            return fail(exc)
        try:
            server.serve(sock)
        except Exception:
            logger.exception("stalewatch: the daemon failed")
            return exits.FAILED
    # The process ends now: its last collection would walk every object of thousands
    # of checkouts for nothing (over a second at 10,000; systemd waits 5 s for us).
    gc.freeze()
    return exits.OK
