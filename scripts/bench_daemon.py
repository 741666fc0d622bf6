#!/usr/bin/env python3
"""Benchmark the daemon: prints figures, asserts nothing. Runtime ~50 s.

Usage: python scripts/bench_daemon.py [--updates 400] [--fanout 200] [--idle 10] [--no-metrics]

Each update moves the branch ref exactly as git does (write ``<ref>.lock``, rename it
over the ref), alternating between two real commits, so every update is a status
change (current <-> stale, C8). Latency runs from just before the rename to the
moment the event line is read by a subscriber in this process.

Idle CPU is the daemon's own (every thread's run time from /proc/PID/task/*/schedstat,
in ns), over ``--idle`` seconds with one subscriber receiving pings: without metrics,
then (with the metrics extra) a second daemon with ``metrics_address`` and
``metrics_textfile`` (rewritten every 15 s), not scraped, then scraped once a second
(Prometheus' usual interval is 15 s: an upper bound), and the daemon's CPU per scrape.
"""

from __future__ import annotations

import argparse
import http.client
import os
import queue
import re
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid`` (schedstat: ns), else utime+stime (ticks)."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):
                continue  # a thread that ended meanwhile
        return total / 1e9
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> str:
    return next(
        line.split()[1]
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS")
    )


def idle(
    pid: int, sub: Reader, seconds: float, tick: Callable[[], object] | None = None
) -> tuple[float, float]:
    """The daemon's CPU seconds over ``seconds`` of idling (calling ``tick`` once a second)."""
    before, wall = cpu_seconds(pid), time.monotonic()
    deadline = wall + seconds
    next_tick = wall + 1.0
    while (now := time.monotonic()) < deadline:
        if tick is not None and now >= next_tick:
            tick()
            next_tick += 1.0
        wait = min(deadline, next_tick if tick is not None else deadline) - now
        try:  # idle, one subscriber receiving pings
            sub.wait_for(b'"type":"ping"', timeout=max(0.01, wait))
        except TimeoutError:
            continue
    return cpu_seconds(pid) - before, time.monotonic() - wall


def start_daemon(work: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(work / f"{name}.notify"))
    notify.settimeout(10)
    env = {**os.environ, "NOTIFY_SOCKET": str(work / f"{name}.notify")}
    with (work / f"{name}.log").open("wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "stalewatch", "daemon", "--socket", str(work / f"{name}.sock"), *args],
            env=env,
            stderr=log,
        )
    try:
        while b"READY=1" not in notify.recv(4096):
            pass
    finally:
        notify.close()  # like systemd gone: the daemon must not block on it
    return daemon


def stop(daemon: subprocess.Popen[bytes]) -> None:
    daemon.terminate()
    daemon.wait(timeout=10)


def metrics_idle(work: Path, repo: Path, seconds: float, scrapes: int) -> None:
    """The same daemon with metrics on: idle CPU unscraped, scraped each second; per scrape."""
    try:
        import prometheus_client  # noqa: F401  (the daemon needs it; say so plainly)
    except ImportError:
        print("daemon idle, metrics on: skipped (the metrics extra is not installed)")
        return
    config = work / "metrics.toml"
    config.write_text(f'metrics_address = "127.0.0.1:0"\nmetrics_textfile = "{work / "s.prom"}"\n')
    config.chmod(0o600)
    daemon = start_daemon(work, "m", "--config", str(config), str(repo))
    try:
        found = re.search(r"metrics on http://([0-9.]+):([0-9]+)/metrics", (work / "m.log").read_text())
        if found is None:
            raise SystemExit("the daemon did not say where it serves metrics")
        host, port = found.group(1), int(found.group(2))

        def scrape() -> int:
            conn = http.client.HTTPConnection(host, port, timeout=10)
            try:
                conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
                return len(conn.getresponse().read())
            finally:
                conn.close()

        sub = Reader(work / "m.sock")
        sub.wait_for(b'"type":"snapshot"')
        size = scrape()
        used, wall = idle(daemon.pid, sub, seconds)
        share = 100 * used / wall
        print(f"daemon idle, metrics on, not scraped: {used:.4f} s CPU over {wall:.1f} s ({share:.3f} %)")
        used, wall = idle(daemon.pid, sub, seconds, tick=scrape)
        share = 100 * used / wall
        print(
            f"daemon idle, metrics on, scraped 1/s:  {used:.4f} s CPU over {wall:.1f} s ({share:.3f} %), "
            f"RSS {rss_kb(daemon.pid)} kB"
        )
        latencies, before = [], cpu_seconds(daemon.pid)
        for _ in range(scrapes):
            start = time.perf_counter()
            scrape()
            latencies.append(time.perf_counter() - start)
        per_scrape = (cpu_seconds(daemon.pid) - before) / scrapes
        show(f"daemon: one scrape, 1 checkout ({size} B gzip)", latencies)
        print(f"daemon CPU per scrape: {per_scrape * 1000:.3f} ms")
        sub.sock.close()
    finally:
        stop(daemon)


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
    parser.add_argument("--scrapes", type=int, default=200, help="scrapes timed with metrics on")
    parser.add_argument("--no-metrics", action="store_true", help="skip the daemon with metrics on")
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

        daemon = start_daemon(work, "d", str(repo))
        sock = work / "d.sock"
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

        used, wall = idle(daemon.pid, sub, args.idle)
        print(
            f"daemon idle: {used:.4f} s CPU over {wall:.1f} s ({100 * used / wall:.3f} %), "
            f"RSS {rss_kb(daemon.pid)} kB"
        )
        sub.sock.close()
        stop(daemon)
        daemon = None
        if not args.no_metrics:
            metrics_idle(work, repo, args.idle, args.scrapes)
    finally:
        if daemon is not None:
            stop(daemon)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
