"""``stalewatch watch`` and ``stalewatch status``: a checkout watched from this process."""

from __future__ import annotations

import argparse
import queue
import signal

from ..core import exits, signals
from ..core.escaping import printable
from ..core.status import Event, Snapshot, Status
from ..guard import Guard
from .human_lines import line

__all__ = ["cmd_status", "cmd_watch"]


_READY_WAIT = 5.0  # seconds `watch` waits for its watcher before the first line


def _line(item: Snapshot | Event, *, as_json: bool) -> str:
    # The same line as the daemon's messages get (`events`, `status --socket`).
    return line({"type": "event" if isinstance(item, Event) else "snapshot", **item.to_dict()}, as_json) or ""


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
