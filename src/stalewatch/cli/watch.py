"""``stalewatch watch`` and ``stalewatch status``: a checkout watched from this process."""

from __future__ import annotations

import argparse
import json
import queue
import signal
from pathlib import Path

from ..core import exits, signals
from ..core.escaping import printable
from ..core.status import Event, Snapshot, Status
from ..guard import Guard
from .human_lines import human_line

__all__ = ["add_commands", "cmd_status", "cmd_watch"]


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``watch`` and ``status`` to the CLI's subparsers."""
    watch = sub.add_parser("watch", help="print a line for every status change until Ctrl-C")
    watch.add_argument("path", nargs="?", default=".", help="a checkout, or a source file in one")
    watch.add_argument("--json", action="store_true", help="print JSON lines")
    status = sub.add_parser("status", help="print the checkout's current revision")
    status.add_argument("path", nargs="?", default=".", help="a checkout, or a source file in one")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.add_argument("--socket", help="ask the daemon listening on this socket instead")


def _bind(path: str) -> Guard:
    return Guard.for_file(path) if Path(path).is_file() else Guard.for_checkout(path)


def _line(item: Snapshot | Event, *, as_json: bool) -> str:
    # The same line as the daemon's messages get (`events`, `status --socket`).
    data = {"type": "event" if isinstance(item, Event) else "snapshot", **item.to_dict()}
    if as_json:
        return json.dumps(data, separators=(",", ":"))
    return human_line(data) or ""


def cmd_status(args: argparse.Namespace) -> int:
    """Print the checkout's current revision (or its snapshot as JSON)."""
    guard = _bind(args.path)
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
    guard = _bind(args.path)
    lines: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
    stopping = signals.Wakeup()

    def stop() -> None:  # a signal handler: a flag, and a wake-up (SimpleQueue.put is reentrant)
        stopping.set()
        lines.put(None)

    unsubscribe = guard.subscribe(lines.put)
    try:
        with signals.handling({signal.SIGTERM: stop, signal.SIGINT: stop}), guard:
            print(_line(guard.snapshot(), as_json=args.json), flush=True)
            while not stopping.is_set:
                item = lines.get()
                if item is not None:
                    print(_line(item, as_json=args.json), flush=True)
    except KeyboardInterrupt:  # off the main thread no handler is installed
        pass
    finally:
        unsubscribe()
        stopping.close()
    return exits.OK
