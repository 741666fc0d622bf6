"""``stalewatch events`` and ``stalewatch status --socket``: reading a running daemon."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from ..client.connection import read_status
from ..client.following import Follower
from ..core import exits, signals
from ..core.errors import DaemonUnavailableError
from ..core.escaping import printable
from ..guard import Guard
from ..protocol.socket_path import default_socket_path
from .human_lines import line

__all__ = ["cmd_events", "cmd_status"]


def cmd_events(args: argparse.Namespace) -> int:
    """Print a running daemon's messages until SIGTERM/SIGINT, across its restarts.

    Raises:
        SocketPathError: no ``--socket`` and no default (the command line exits 2).
        DaemonUnavailableError: the first connection failed (exits 3).
    """
    path = Path(args.socket) if args.socket else default_socket_path()

    def lost(exc: DaemonUnavailableError) -> None:
        print(f"stalewatch: lost the daemon ({exc.reason}); reconnecting", file=sys.stderr, flush=True)

    def back() -> None:
        print(f"stalewatch: reconnected to the daemon at {path}", file=sys.stderr, flush=True)

    follower = Follower(path, on_lost=lost, on_back=back)
    try:
        with signals.handling({signal.SIGTERM: follower.stop, signal.SIGINT: follower.stop}):
            for message in follower.messages():
                if message.get("type") in ("ping", "pong"):
                    continue
                shown = line(message, args.json)
                if shown is not None:
                    print(shown, flush=True)
    except KeyboardInterrupt:  # off the main thread no handler is installed
        return exits.OK
    finally:
        follower.close()
    return exits.OK


def cmd_status(args: argparse.Namespace) -> int:
    """Print the daemon's snapshot of every checkout it watches (or of PATH's checkout).

    Raises:
        BindError: PATH is not in a git checkout (the command line exits 2).
        DaemonUnavailableError: the daemon cannot be reached or read (exits 3).
    """
    wanted = None if args.path is None else str(Guard.for_path(args.path).checkout)
    _, snapshots = read_status(Path(args.socket))
    if wanted is not None:
        watched = [str(s.get("checkout")) for s in snapshots]
        snapshots = [s for s in snapshots if s.get("checkout") == wanted]
        if not snapshots:
            listed = ", ".join(printable(c) for c in watched) or "nothing"
            print(
                f"stalewatch: {printable(wanted)} is not watched by the daemon at {printable(args.socket)} "
                f"(it watches {listed})",
                file=sys.stderr,
            )
            return exits.USAGE
    for snapshot in snapshots:
        print(line(snapshot, args.json))
    return exits.OK
