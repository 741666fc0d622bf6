"""``stalewatch watch`` and ``stalewatch status``: a checkout watched from this process."""

from __future__ import annotations

import argparse
import json
import queue
import signal

from ..core import exits, signals
from ..core.escaping import printable
from ..core.status import Event, Snapshot, Status
from ..guard import Guard
from .human_lines import human_line

__all__ = ["add_commands", "cmd_status", "cmd_watch"]


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``watch`` and ``status`` to the CLI's subparsers."""
    watch = sub.add_parser(
        "watch",
        help="print a line for every status change until Ctrl-C",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Watch a checkout from this process: a line now, then a line each time its status\n"
        "changes (current, stale, unreadable), until SIGTERM or Ctrl-C.",
        epilog="examples:\n"
        "  stalewatch watch                      # the checkout of the current directory\n"
        "  stalewatch watch /srv/app --json      # JSON lines, e.g. for jq\n"
        "  stalewatch watch /srv/app/run_agent.py  # a source file its repository tracks",
    )
    watch.add_argument("path", nargs="?", default=".", help="a checkout, or a source file in one")
    watch.add_argument("--json", action="store_true", help="print JSON lines")
    status = sub.add_parser(
        "status",
        help="print the checkout's current revision",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Print the full commit id HEAD resolves to (exit 1 if it cannot be resolved), or,\n"
        "with --socket, what a running daemon says of the checkouts it watches.",
        epilog="examples:\n"
        "  stalewatch status                          # HEAD of the current directory's checkout\n"
        "  stalewatch status /srv/app --json          # where it stands, as JSON\n"
        "  stalewatch status --socket /tmp/sw.sock    # every checkout the daemon watches\n"
        "  stalewatch status --socket /tmp/sw.sock /srv/app  # just that one",
    )
    status.add_argument(
        "path",
        nargs="?",
        help="a checkout, or a source file in one (default: .; with --socket: every checkout)",
    )
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.add_argument("--socket", help="ask the daemon listening on this socket instead")


_READY_WAIT = 5.0  # seconds `watch` waits for its watcher before the first line


def _line(item: Snapshot | Event, *, as_json: bool) -> str:
    # The same line as the daemon's messages get (`events`, `status --socket`).
    data = {"type": "event" if isinstance(item, Event) else "snapshot", **item.to_dict()}
    if as_json:
        return json.dumps(data, separators=(",", ":"))
    return human_line(data) or ""


def cmd_status(args: argparse.Namespace) -> int:
    """Print the checkout's current revision (or its snapshot as JSON)."""
    guard = Guard.for_path(args.path or ".")
    snap = guard.snapshot()
    if args.json:
        print(_line(snap, as_json=True))
    elif snap.status is Status.UNTRACKED:
        print(f"(untracked) {printable(str(snap.checkout))}")
    else:
        print(snap.current_revision or f"(no commit yet) {printable(str(snap.checkout))}")
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
