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
import sys
from dataclasses import replace
from pathlib import Path

from ..core import exits
from ..core import settings as core_settings
from ..core.errors import DaemonConfigError, StalewatchError
from ..protocol.socket_path import DEFAULT_TEXT, default_socket_path
from ..server import journal
from ..server.config import DaemonConfig, load, with_checkouts
from ..server.listening import listen, release, unlink_if_ours
from ..server.loop import DaemonServer, ObserverFactory

__all__ = ["add_commands", "cmd_daemon"]

logger = logging.getLogger(__name__)


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``daemon`` to the CLI's subparsers."""
    daemon = sub.add_parser(
        "daemon",
        help="watch checkouts and push events over a Unix socket",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Watch checkouts in the foreground and push every change to socket clients and\n"
        "hooks; with a restart policy, restart their servers onto new code. SIGHUP reloads\n"
        "--config; SIGTERM or Ctrl-C stops it.",
        epilog="examples:\n"
        "  stalewatch daemon --socket /tmp/sw.sock /srv/app        # one checkout, as you\n"
        "  stalewatch daemon --config /etc/stalewatch/daemon.toml  # under systemd\n"
        "  kill -HUP PID                                            # reload its configuration",
    )
    daemon.add_argument(
        "checkouts", nargs="*", metavar="CHECKOUT", help="a checkout, or a source file in one"
    )
    daemon.add_argument(
        "--socket", help=f"socket path (default: the configuration's socket, else {DEFAULT_TEXT})"
    )
    daemon.add_argument("--config", help="a TOML configuration file (reloaded on SIGHUP)")


def _load(args: argparse.Namespace) -> DaemonConfig:
    settings = load(Path(args.config)) if args.config else DaemonConfig()
    return with_checkouts(settings, args.checkouts)


def _observer(settings: DaemonConfig) -> ObserverFactory | None:
    """Metrics, only when the configuration asks for them (the only import of the package)."""
    if not settings.metrics:
        return None
    from .. import metrics  # noqa: PLC0415 - imported only when asked for

    return metrics.for_daemon


def _fail(exc: Exception, code: int) -> int:
    print(f"stalewatch: {exc}", file=sys.stderr)
    return code


def cmd_daemon(args: argparse.Namespace) -> int:
    """Run the daemon in the foreground until SIGTERM/SIGINT."""
    with contextlib.ExitStack() as cleanup:  # undone in reverse, on every way out
        try:
            settings = _load(args)
            if not settings.checkouts:
                raise DaemonConfigError(
                    "checkout",
                    None,
                    "nothing to watch: name a CHECKOUT or add [[checkout]] tables",
                    file=settings.file,
                )
            path = Path(args.socket) if args.socket else settings.socket or default_socket_path()
            name = core_settings.metrics_daemon(settings.metrics_daemon, str(path))
            settings = replace(settings, metrics_daemon=name)
            handler = journal.install(settings.log_level)
            cleanup.callback(logging.getLogger().removeHandler, handler)
            reload = (lambda: _load(args)) if args.config else None
            server = DaemonServer(settings, reload, observe=_observer(settings))
            cleanup.callback(server.close)
            sock, lock = listen(path)
        except StalewatchError as exc:
            return _fail(exc, exits.USAGE)
        cleanup.callback(release, path, lock)
        cleanup.callback(unlink_if_ours, path, path.lstat())
        cleanup.callback(sock.close)
        try:
            server.start_metrics()  # after the socket: a second daemon is refused for that first
        except StalewatchError as exc:
            return _fail(exc, exits.USAGE)
        try:
            server.serve(sock)
        except Exception:
            logger.exception("stalewatch: the daemon failed")
            return exits.FAILED
    # The process ends now: its last collection would walk every object of thousands
    # of checkouts for nothing (over a second at 10,000; systemd waits 5 s for us).
    gc.freeze()
    return exits.OK
