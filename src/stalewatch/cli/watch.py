"""``watch`` and ``status``: a checkout watched from this process; ``events`` and
``status --socket``: a running daemon read. One line per snapshot or event, human or
``--json``, the same for both (:func:`.human_lines.line`).
"""

from __future__ import annotations

import argparse
import queue
import signal
import sys
from pathlib import Path

from ..client.connection import Follower, read_status
from ..core import exits, signals
from ..core.escaping import printable
from ..core.status import Event, Snapshot, Status
from ..guard import Guard
from ..protocol.socket_path import default_socket_path
from .human_lines import line

_READY_WAIT = 5.0  # seconds `watch` waits for its watcher before the first line


def _line(item: Snapshot | Event, *, as_json: bool) -> str | None:
    # The same line as the daemon's messages get (`events`, `status --socket`).
    return line({"type": "event" if isinstance(item, Event) else "snapshot", **item.to_dict()}, as_json)


def cmd_status(args: argparse.Namespace) -> int:
    """Print the checkout's current revision (or its snapshot as JSON); with ``--socket``,
    what the daemon says of every checkout it watches (or of PATH's checkout).

    Raises:
        BindError: PATH is not in a git checkout (the command line exits 2).
        DaemonUnavailableError: the daemon cannot be reached or read (exits 3).
    """
    if args.socket:
        return _daemon_status(args)
    snap = Guard.for_path(args.path or ".").snapshot()
    if args.json:
        print(_line(snap, as_json=True))
    elif snap.status is Status.UNTRACKED:
        print(f"(untracked) {printable(str(snap.checkout))}")
    else:
        print(snap.current_revision or f"(no commit yet) {printable(str(snap.checkout))}")
    return exits.OK


def _daemon_status(args: argparse.Namespace) -> int:
    wanted = None if args.path is None else str(Guard.for_path(args.path).checkout)
    _, snapshots = read_status(Path(args.socket))
    if wanted is not None:
        watched = ", ".join(printable(str(s.get("checkout"))) for s in snapshots) or "nothing"
        snapshots = [s for s in snapshots if s.get("checkout") == wanted]
        if not snapshots:
            print(
                f"stalewatch: {printable(wanted)} is not watched by the daemon at {printable(args.socket)} "
                f"(it watches {watched})",
                file=sys.stderr,
            )
            return exits.USAGE
    for snapshot in snapshots:
        print(line(snapshot, args.json))
    return exits.OK


def cmd_watch(args: argparse.Namespace) -> int:
    """Print a line per status change until SIGTERM or SIGINT (Ctrl-C)."""
    guard = Guard.for_path(args.path)
    lines: queue.SimpleQueue[Event | None] = queue.SimpleQueue()

    def stop() -> None:  # a signal handler: the end of the lines (SimpleQueue.put is reentrant)
        lines.put(None)

    unsubscribe = guard.subscribe(lines.put)
    try:
        with signals.handling({signal.SIGTERM: stop, signal.SIGINT: stop}), guard:
            # The first line says how the checkout is watched: once the watcher runs
            # (trusted, or polling), not before (it would say `mode: none`).
            guard.wait_ready(_READY_WAIT)
            print(_line(guard.snapshot(), as_json=args.json), flush=True)
            for item in iter(lines.get, None):
                print(_line(item, as_json=args.json), flush=True)
    except KeyboardInterrupt:  # off the main thread no handler is installed
        pass
    finally:
        unsubscribe()
    return exits.OK


def cmd_events(args: argparse.Namespace) -> int:
    """Print a running daemon's messages until SIGTERM/SIGINT, across its restarts.

    Raises:
        SocketPathError: no ``--socket`` and no default (the command line exits 2).
        DaemonUnavailableError: the first connection failed (exits 3).
    """
    path = Path(args.socket) if args.socket else default_socket_path()
    follower = Follower(path, lambda text: print(f"stalewatch: {text}", file=sys.stderr, flush=True))
    try:
        with signals.handling({signal.SIGTERM: follower.stop, signal.SIGINT: follower.stop}):
            for message in follower.messages():
                shown = None if message.get("type") in ("ping", "pong") else line(message, args.json)
                if shown is not None:
                    print(shown, flush=True)
    except KeyboardInterrupt:  # off the main thread no handler is installed
        pass
    finally:
        follower.close()
    return exits.OK
