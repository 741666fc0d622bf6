#!/usr/bin/env python3
"""Measure stalewatch's barrier, detection latency and idle cost on a real repository.

Prints, in one run: the median and p99 of ``Guard.check()`` on the flag path and the
strict path beside Hermes WebUI's three-subprocess check, and their ratios; what
counting a unit of work in flight costs (``with guard.work():``, alone and around the
flag check); the flag
path again with a ``stalewatch.metrics.GuardCollector`` registered, and what one scrape
of it costs (when the metrics extra is installed); the latency
from ``os.replace`` of a ref file to the subscriber seeing the flag flip, over
``--updates`` updates; the watcher's CPU over ``--idle`` idle seconds; the process RSS.
Figures are printed, never asserted. ``--quick`` runs tiny counts (a smoke test).
``--notifier`` chooses what tells the watcher (``STALEWATCH_NOTIFIER``: ``inotify``,
``observer``, the watchdog observer other platforms run, or ``polling``).

Usage: python scripts/bench.py [--updates 500] [--idle 10] [--notifier KIND] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import watchdog.version

from gitrepo import git, two_commits
from stalewatch import Event, Guard, StaleError
from stalewatch.core.settings import NOTIFIERS


def make_repo(root: Path) -> tuple[Path, str, str]:
    """A checkout with a ``run_agent.py``, two commits, HEAD on the first."""
    repo = root / "checkout"
    a, b = two_commits(repo, "run_agent.py", "class AIAgent: ...\n")
    return repo, a, b


def reference_check(repo: Path) -> None:
    """Hermes WebUI's guard today: three git processes per check."""
    source = repo / "run_agent.py"
    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run(
        ["git", "--literal-pathspecs", "ls-files", "--error-unmatch", "--", str(source)],
        cwd=top,
        capture_output=True,
        check=True,
    )
    subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=top, capture_output=True, check=True)


def per_call(fn: Callable[[], object], batches: int, per_batch: int) -> list[float]:
    """Seconds per call, one figure per batch (a batch amortises the timer's own cost)."""
    out = []
    for _ in range(batches):
        t0 = time.perf_counter_ns()
        for _ in range(per_batch):
            fn()
        out.append((time.perf_counter_ns() - t0) / per_batch / 1e9)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fmt(seconds: float) -> str:
    if seconds < 1e-6:
        return f"{seconds * 1e9:8.1f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:8.2f} µs"
    return f"{seconds * 1e3:8.2f} ms"


def row(name: str, values: list[float], reference: float | None = None) -> None:
    med, p99 = statistics.median(values), pct(values, 0.99)
    ratio = f"   {reference / med:>12,.0f}× faster" if reference else ""
    print(f"  {name:<34} median {fmt(med)}   p99 {fmt(p99)}{ratio}")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def detection_latency(guard: Guard, repo: Path, a: str, b: str, updates: int) -> list[float]:
    """Latency from os.replace of the branch ref to the subscriber seeing the flip."""
    flipped = threading.Event()
    seen_at: list[int] = []

    def on_event(event: Event) -> None:
        seen_at.append(time.perf_counter_ns())
        flipped.set()

    unsubscribe = guard.subscribe(on_event)
    ref = repo / ".git/refs/heads/main"
    lock = ref.with_name("main.lock")
    latencies = []
    try:
        for i in range(updates):
            target = b if i % 2 == 0 else a
            flipped.clear()
            lock.write_text(target + "\n")
            t0 = time.perf_counter_ns()
            lock.replace(ref)  # rename(2) over the ref: exactly what git does
            if not flipped.wait(5):
                raise RuntimeError(f"update {i} was not detected within 5 s")
            latencies.append((seen_at[-1] - t0) / 1e9)
    finally:
        unsubscribe()
    return latencies


def work_in_flight(guard: Guard, batches: int) -> tuple[list[float], list[float]]:
    """What counting a unit of work in flight costs (R8): an empty ``with guard.work():``,
    and the flag check inside one (what a barrier adds per guarded request)."""

    def one_unit() -> None:
        with guard.work():
            pass

    def counted_check() -> None:
        with guard.work():
            guard.check()

    return per_call(one_unit, batches, 1000), per_call(counted_check, batches, 1000)


def barrier_with_metrics(guard: Guard, batches: int, ref_median: float) -> None:
    """The flag path with and without a GuardCollector registered, batch by batch, and a scrape.

    The batches alternate (a collector registered for one, none for the next), so both
    figures share the machine's moment-to-moment noise.
    """
    try:
        from prometheus_client import CollectorRegistry, generate_latest

        from stalewatch.metrics import GuardCollector
    except ImportError:
        print("  (metrics: the metrics extra is not installed; pip install '.[metrics]')")
        return
    without: list[float] = []
    with_metrics: list[float] = []
    for batch in range(batches):
        if batch % 2:
            registry = CollectorRegistry(auto_describe=False)
            collector = GuardCollector(guard)
            registry.register(collector)
            with_metrics += per_call(guard.check, 1, 1000)
            registry.unregister(collector)
            collector.close()
        else:
            without += per_call(guard.check, 1, 1000)
    registry = CollectorRegistry(auto_describe=False)
    collector = GuardCollector(guard)
    registry.register(collector)
    try:
        scrape = per_call(lambda: generate_latest(registry), max(10, batches // 10), 1)
    finally:
        collector.close()
    row("check()  flag path", without, ref_median)
    row("check()  flag path, metrics on", with_metrics, ref_median)
    row("one scrape of GuardCollector", scrape)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=500)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="tiny counts: checks the script runs")
    parser.add_argument("--no-daemon", action="store_true", help="skip scripts/bench_daemon.py")
    parser.add_argument("--notifier", choices=NOTIFIERS, help="STALEWATCH_NOTIFIER (default: the platform's)")
    args = parser.parse_args()
    if args.notifier:
        os.environ["STALEWATCH_NOTIFIER"] = args.notifier  # the daemon's bench inherits it
    updates, idle = (20, 0.5) if args.quick else (args.updates, args.idle)
    batches, ref_runs = (20, 10) if args.quick else (2000, 200)

    versions = f"Python {platform.python_version()}, watchdog {watchdog.version.VERSION_STRING}"
    chosen = os.environ.get("STALEWATCH_NOTIFIER") or "the platform's"
    print(f"stalewatch bench: {versions}, notifier: {chosen},")
    print(f"  {git(Path.cwd(), '--version')}, {os.cpu_count()} CPUs, {platform.machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        repo, a, b = make_repo(Path(tmp))
        rss_before = rss_mb()
        guard = Guard.for_file(repo / "run_agent.py")
        with guard:
            if not guard.wait_ready(10):
                print("watcher never became ready", file=sys.stderr)
                return 1
            print("\nbarrier (per call)")
            reference = per_call(lambda: reference_check(repo), ref_runs, 1)
            ref_median = statistics.median(reference)
            flag = per_call(guard.check, batches, 1000)
            strict = per_call(lambda: guard.check(strict=True), batches // 10, 100)

            def empty() -> None:
                return None

            overhead = per_call(empty, batches, 1000)
            unit, counted = work_in_flight(guard, batches)
            row("check()  flag path", flag, ref_median)
            row("check(strict=True)", strict, ref_median)
            row("reference: 3 git subprocesses", reference)
            row("(an empty Python call, for scale)", overhead)
            row("with guard.work(): (empty block)", unit)
            row("check() inside guard.work()", counted)

            print(f"\ndetection: os.replace of the branch ref -> event ({updates} updates)")
            latency = detection_latency(guard, repo, a, b, updates)
            row("ref update -> flag flipped", latency)
            with contextlib.suppress(StaleError):
                guard.check()

            print(f"\nidle for {idle:.0f} s")
            stop = threading.Event()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            stop.wait(idle)
            cpu = time.process_time() - cpu0
            wall = time.perf_counter() - wall0
            print(f"  process CPU while idle              {cpu * 1e3:8.2f} ms = {100 * cpu / wall:.3f} %")
            rss = rss_mb()
            added = f"(+{rss - rss_before:.1f} MB for the guard)"
            print(f"  RSS                                 {rss:8.1f} MB {added}")
            threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
            print(f"  threads                             {len(threads)}")

            # Last: importing prometheus_client must not count in the RSS above.
            print("\nmetrics: a GuardCollector registered (read at scrape time)")
            barrier_with_metrics(guard, batches, ref_median)
    if args.no_daemon:
        return 0
    # The daemon's figures come from its own script, in a separate process so the
    # in-process figures above are not disturbed by a daemon sharing this interpreter.
    print("\ndaemon (scripts/bench_daemon.py)", flush=True)
    small = ["--updates", "20", "--fanout", "5", "--fanout-updates", "3", "--idle", "0.5", "--scrapes", "5"]
    daemon_args = small if args.quick else ["--idle", str(idle)]
    bench_daemon = Path(__file__).with_name("bench_daemon.py")
    return subprocess.run([sys.executable, str(bench_daemon), *daemon_args], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
