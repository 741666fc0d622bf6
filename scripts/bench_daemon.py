#!/usr/bin/env python3
"""Benchmark the daemon: prints figures, asserts nothing. Runtime ~20 s.

Usage: python scripts/bench_daemon.py [--updates 400] [--fanout 200] [--idle 10]

Each update moves the branch ref exactly as git does (write ``<ref>.lock``, rename it
over the ref), alternating between two real commits, so every update is a status
change (current <-> stale, C8). Latency runs from just before the rename to the
moment the event line is read by a subscriber in this process.
"""

from __future__ import annotations

import argparse
import os
import queue
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import git, make_repo  # the same two-commit repository as the in-process bench


def move_ref(ref: Path, revision: str) -> float:
    """Update the ref the way git does; return perf_counter() just before the rename."""
    lock = ref.with_name(ref.name + ".lock")
    lock.write_text(revision + "\n")
    start = time.perf_counter()
    lock.replace(ref)
    return start


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def show(label: str, values: list[float]) -> None:
    ms = [v * 1000 for v in values]
    print(
        f"{label:<46} n={len(ms):<5} median {statistics.median(ms):7.3f} ms   "
        f"p99 {pct(ms, 0.99):7.3f} ms   max {max(ms):7.3f} ms"
    )


class Reader:
    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(path))
        self.buffer = b""

    def wait_for(self, needle: bytes, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.buffer:
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                raise SystemExit("daemon closed the connection")
            self.buffer += data
        self.buffer = self.buffer[self.buffer.index(needle) + len(needle) :]


def in_process(repo: Path, ref: Path, revisions: tuple[str, str], updates: int) -> list[float]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from stalewatch import Guard

    events: queue.SimpleQueue[float] = queue.SimpleQueue()
    guard = Guard.for_checkout(repo)
    guard.subscribe(lambda event: events.put(time.perf_counter()))
    latencies = []
    with guard:
        guard.check(strict=True)
        if not guard.wait_ready(10):
            raise SystemExit("the in-process watcher never became ready")
        for i in range(updates):
            start = move_ref(ref, revisions[(i + 1) % 2])
            latencies.append(events.get(timeout=5) - start)
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=400)
    parser.add_argument("--fanout", type=int, default=200)
    parser.add_argument("--fanout-updates", type=int, default=50)
    parser.add_argument("--idle", type=float, default=10.0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="swb-", dir="/tmp"))
    daemon = None
    try:
        repo, first, second = make_repo(work)
        revisions = (first, second)
        ref = repo / ".git" / "refs" / "heads" / "main"
        move_ref(ref, revisions[0])
        print(
            f"python {sys.version.split()[0]}, git {git(repo, '--version').split()[-1]}, {os.uname().sysname}"
        )

        show("in-process: ref rename -> subscriber callback", in_process(repo, ref, revisions, 300))
        move_ref(ref, revisions[0])

        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(str(work / "notify"))
        notify.settimeout(10)
        sock = work / "d.sock"
        env = {**os.environ, "NOTIFY_SOCKET": str(work / "notify")}
        daemon = subprocess.Popen(
            [sys.executable, "-m", "stalewatch", "daemon", "--socket", str(sock), str(repo)],
            env=env,
            stderr=subprocess.DEVNULL,
        )
        while b"READY=1" not in notify.recv(4096):
            pass
        notify.close()  # like systemd gone: the daemon must not block on it

        sub = Reader(sock)
        sub.wait_for(b'"type":"snapshot"')
        latencies = []
        for i in range(args.updates):
            start = move_ref(ref, revisions[(i + 1) % 2])
            sub.wait_for(b'"type":"event"')
            latencies.append(time.perf_counter() - start)
        show("daemon: ref rename -> event at 1 subscriber", latencies)

        readers = [Reader(sock) for _ in range(args.fanout)]
        selector = selectors.DefaultSelector()
        for reader in readers:
            reader.wait_for(b'"type":"snapshot"')
            reader.sock.setblocking(False)
            selector.register(reader.sock, selectors.EVENT_READ, reader)
        slowest, every = [], []
        for i in range(args.fanout_updates):
            waiting = set(readers)
            start = move_ref(ref, revisions[(args.updates + i + 1) % 2])
            while waiting:
                for key, _ in selector.select(5.0):
                    reader = key.data
                    reader.buffer += reader.sock.recv(65536)
                    if reader in waiting and b'"type":"event"' in reader.buffer:
                        every.append(time.perf_counter() - start)
                        reader.buffer = reader.buffer[reader.buffer.index(b'"type":"event"') + 14 :]
                        waiting.discard(reader)
            slowest.append(every[-1])
            sub.wait_for(b'"type":"event"')
        show(f"daemon: fan-out to {args.fanout}, last subscriber", slowest)
        show(f"daemon: fan-out to {args.fanout}, every delivery", every)
        for reader in readers:
            reader.sock.close()
        selector.close()

        ticks = os.sysconf("SC_CLK_TCK")

        def cpu() -> float:
            fields = Path(f"/proc/{daemon.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / ticks

        before, wall = cpu(), time.monotonic()
        deadline = wall + args.idle
        while time.monotonic() < deadline:  # idle, one subscriber receiving pings
            try:
                sub.wait_for(b'"type":"ping"', timeout=max(0.01, deadline - time.monotonic()))
            except TimeoutError:
                break
        used, wall = cpu() - before, time.monotonic() - wall
        rss = next(
            line.split()[1]
            for line in Path(f"/proc/{daemon.pid}/status").read_text().splitlines()
            if line.startswith("VmRSS")
        )
        print(f"daemon idle: {used:.2f} s CPU over {wall:.1f} s ({100 * used / wall:.2f} %), RSS {rss} kB")
        sub.sock.close()
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
