#!/usr/bin/env python3
"""Measure how soon a guard sees a deploy link switched, with the floor beside it.

Two git worktrees of one repository (``.worktrees/<hash>``, as git-sync lays them out)
and a link ``app`` naming one; each switch writes a new link under ``tmp-link`` and
renames it onto ``app`` (git-sync's ``publishSymlink``), alternating between the two.
Prints the median and p99 over ``--switches`` switches of the time from the rename to a
guard's subscriber seeing the event (a guard bound through the link, watching in this
process), then the same for the floor: a bare inotify reader thread in this process
that wakes on the rename, reads the link and hands the answer over (``scripts/floor.py``'s
idea: what any design must pay at least). The two run one after the other, never
together. Figures are printed, never asserted. ``--quick`` runs a tiny count.

Usage: python scripts/bench_deploy.py [--switches 500] [--quick]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import queue
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench import row
from gitrepo import git, two_commits
from stalewatch import Event, Guard

_IN_MOVED_TO = 0x80
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")


def layout(root: Path) -> tuple[Path, Path, Path]:
    """git-sync's ``--root``: a repository, two worktrees by hash, the link on the first."""
    a, b = two_commits(root, "app.py", "VALUE = 1\n")
    first, second = root / ".worktrees" / a, root / ".worktrees" / b
    for commit, path in ((a, first), (b, second)):
        git(root, "worktree", "add", "-q", "--detach", str(path), commit)
    (root / "app").symlink_to(os.path.relpath(first, root))
    return root / "app", first, second


def switches(link: Path, one: Path, two: Path, count: int, seen: Callable[[], int]) -> list[float]:
    """Seconds from each rename onto ``link`` to ``seen()`` returning (ns), alternating."""
    tmp = link.with_name("tmp-link")
    out = []
    for i in range(count):
        target = two if i % 2 == 0 else one
        tmp.symlink_to(os.path.relpath(target, link.parent))
        t0 = time.perf_counter_ns()
        tmp.rename(link)
        out.append((seen() - t0) / 1e9)
    return out


def guard_latency(link: Path, one: Path, two: Path, count: int) -> list[float]:
    events: queue.Queue[int] = queue.Queue()

    def on_event(event: Event) -> None:
        events.put(time.perf_counter_ns())

    with Guard.for_checkout(link) as guard:
        if not guard.wait_ready(5):
            raise RuntimeError("the watcher never became ready")
        guard.subscribe(on_event)
        return switches(link, one, two, count, lambda: events.get(timeout=5))


def floor_latency(link: Path, one: Path, two: Path, count: int) -> list[float]:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(_IN_CLOEXEC)
    if fd < 0 or libc.inotify_add_watch(fd, os.fsencode(link.parent), _IN_MOVED_TO) < 0:
        raise SystemExit(f"bench_deploy: inotify: {os.strerror(ctypes.get_errno())}")
    seen: queue.Queue[int] = queue.Queue()
    name = os.fsencode(link.name)

    def reader() -> None:
        while True:
            try:
                data = os.read(fd, 4096)
            except OSError:
                return  # closed: done
            offset = 0
            while offset + _EVENT.size <= len(data):
                _, _, _, length = _EVENT.unpack_from(data, offset)
                start = offset + _EVENT.size
                if data[start : start + length].rstrip(b"\0") == name:
                    link.readlink()
                    seen.put(time.perf_counter_ns())
                offset = start + length

    thread = threading.Thread(target=reader, name="bench-floor", daemon=True)
    thread.start()
    try:
        return switches(link, one, two, count, lambda: seen.get(timeout=5))
    finally:
        os.close(fd)  # the reader's read fails: it returns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switches", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="tiny counts: checks the script runs")
    args = parser.parse_args()
    count = 10 if args.quick else args.switches
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {count} switches")
    with tempfile.TemporaryDirectory() as tmp:
        link, one, two = layout(Path(tmp) / "root")
        row("link renamed -> guard's event", guard_latency(link, one, two, count))
        row("floor: bare inotify reader", floor_latency(link, one, two, count))
    return 0


if __name__ == "__main__":
    sys.exit(main())
