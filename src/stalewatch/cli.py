"""The ``stalewatch`` command. ``main(argv) -> int`` is called by tests directly.

Exit codes:
    0  success (``watch`` stopped by Ctrl-C or SIGTERM; ``status`` printed a revision)
    1  ``status``: HEAD cannot be resolved (corrupt or unreadable repository)
    2  bad input: usage error, a path that is not a git checkout, an invalid setting
    3  ``events`` / ``status --socket``: the daemon cannot be reached (see daemon_cli)
"""

from __future__ import annotations

import argparse
import json
import queue
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from . import __version__
from .core.errors import HeadUnreadableError, StalewatchError
from .core.escaping import printable
from .core.status import Event, Snapshot, Status
from .daemon import cli as daemon_cli
from .daemon.lines import format_message
from .guard.guard import Guard
from .hermes import setup as hermes_setup

EXIT_OK = 0
EXIT_UNREADABLE = 1
EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stalewatch",
        description="Watch a git checkout and report when its HEAD moves away from the loaded code.",
    )
    parser.add_argument("--version", action="version", version=f"stalewatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    watch = sub.add_parser("watch", help="print a line for every status change until Ctrl-C")
    watch.add_argument("path", nargs="?", default=".", help="a checkout, or a source file in one")
    watch.add_argument("--json", action="store_true", help="print JSON lines")
    status = sub.add_parser("status", help="print the checkout's current revision")
    status.add_argument("path", nargs="?", default=".", help="a checkout, or a source file in one")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.add_argument("--socket", help="ask the daemon listening on this socket instead")
    daemon_cli.add_daemon_commands(sub)
    hermes_setup.add_commands(sub)
    return parser


def _bind(path: str) -> Guard:
    return Guard.for_file(path) if Path(path).is_file() else Guard.for_checkout(path)


def _line(item: Snapshot | Event, *, as_json: bool) -> str:
    # The same line as the daemon's messages get (`events`, `status --socket`).
    data = {"type": "event" if isinstance(item, Event) else "snapshot", **item.to_dict()}
    if as_json:
        return json.dumps(data, separators=(",", ":"))
    return format_message(data) or ""


def _cmd_status(args: argparse.Namespace) -> int:
    guard = _bind(args.path)
    snap = guard.snapshot()
    if args.json:
        print(_line(snap, as_json=True))
    elif snap.status is Status.UNTRACKED:
        print(f"(untracked) {printable(str(snap.checkout))}")
    else:
        print(snap.current_revision or f"(no commit yet) {printable(str(snap.checkout))}")
    return EXIT_OK


def _cmd_watch(args: argparse.Namespace) -> int:
    guard = _bind(args.path)
    lines: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        lines.put(None)

    previous = signal.signal(signal.SIGTERM, on_signal)
    unsubscribe = guard.subscribe(lines.put)
    try:
        with guard:
            print(_line(guard.snapshot(), as_json=args.json), flush=True)
            while not stop.is_set():
                item = lines.get()
                if item is not None:
                    print(_line(item, as_json=args.json), flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        unsubscribe()
        signal.signal(signal.SIGTERM, previous)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (see the module doc)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 0 for --help/--version, 2 for usage errors
        return int(exc.code or 0)
    try:
        if args.command == "status" and args.socket:
            return daemon_cli.cmd_status(args)
        if args.command == "status":
            return _cmd_status(args)
        if args.command == "daemon":
            return daemon_cli.cmd_daemon(args)
        if args.command == "events":
            return daemon_cli.cmd_events(args)
        if args.command == "hermes":
            return hermes_setup.cmd_setup(args)
        return _cmd_watch(args)
    except HeadUnreadableError as exc:
        print(f"stalewatch: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    except StalewatchError as exc:
        print(f"stalewatch: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK
