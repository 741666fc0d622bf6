#!/usr/bin/env python3
"""Measure one daemon watching N checkouts: start, threads, inotify, memory, idle, detection.

For each N (default 1, 100, 1000) the script copies one small repository N times,
starts ``stalewatch daemon --config`` on them, and prints:

- start: seconds from launching the daemon to its ``READY=1`` (sd_notify);
- threads, inotify instances and watches (``/proc/PID/fdinfo``), RSS;
- polling: checkouts whose watcher is not native (from the snapshots; 0 expected);
- burst: seconds from a new client's connect to its last snapshot line;
- detection: ref rename (as git does) in one of the N checkouts -> the event line at
  a subscriber, median, p99 and max over ``--updates`` updates, ``--spacing`` seconds
  apart (twice: the floor's update comes between two), in the steady state: once
  every watcher made its first periodic verification (two periods after the start:
  40 s at N = 1,000), so the updates meet the periodic verification passes (50
  checkouts a second at N = 1,000); then the
  same less the time the daemon's threads and this client spent runnable but waiting
  for a CPU during each update (``/proc/PID/task/*/schedstat``; summed over threads,
  so an estimate): on a busy machine, what is the daemon's and what is the scheduler's;
  and the hypervisor's steal meanwhile (``/proc/stat``, all CPUs: time this VM's CPUs
  did not run, which run-queue waits cannot see); and the floor: the same updates,
  taking turns with the daemon's, to a copy watched by ``scripts/floor.py`` (one
  thread: inotify, read the ref, one line to the client): what the machine makes any
  watcher pay, so a detection's time splits into the machine's and the daemon's;
- idle CPU over ``--idle`` seconds in the steady state (one client connected,
  receiving pings).

Then, in this process, a guard on a repository with ``--packed`` (100,000) packed
refs, HEAD's branch packed too: ``check(strict=True)``, and detection of a loose ref
update and of a ``packed-refs`` rewrite (what ``git pack-refs`` does).

Figures are printed, never asserted. ``--quick`` runs N = 1, 10 with tiny counts.
``--src DIR`` runs the daemon from another source tree (e.g. an older checkout of
stalewatch, for a before/after comparison).

Usage: python scripts/bench_scale.py [--counts 1,100,1000] [--idle 10] [--updates 40]
                                     [--spacing 0.1] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gitrepo import git, two_commits

READY_TIMEOUT = 120.0


def template(root: Path) -> tuple[Path, str, str]:
    """A small repository (no sample hooks) with two commits; HEAD on the first."""
    repo = root / "template"
    a, b = two_commits(repo, "app.py", "VALUE = 1\n", "--template=")
    return repo, a, b


def copies(source: Path, root: Path, n: int) -> list[Path]:
    """``n`` checkouts side by side, copied from ``source`` (much faster than git clone)."""
    root.mkdir()
    paths = []
    for i in range(n):
        target = root / f"c{i:04d}"
        shutil.copytree(source, target, symlinks=True)
        paths.append(target)
    return paths


def proc_status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def inotify_usage(pid: int) -> tuple[int, int]:
    """(instances, watches) the process holds, from /proc/PID/fd and fdinfo."""
    instances = watches = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if str(fd.readlink()) != "anon_inode:inotify":
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text()
        except OSError:
            continue
        instances += 1
        watches += sum(1 for line in info.splitlines() if line.startswith("inotify wd:"))
    return instances, watches


def runqueue_wait(*pids: int) -> float:
    """Seconds the threads of ``pids`` have spent runnable but waiting for a CPU, so far
    (``/proc/PID/task/*/schedstat``, second field, in nanoseconds)."""
    total = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue  # a thread that ended meanwhile
    return total / 1e9


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Client:
    """A socket subscriber reading JSON lines."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(path))
        self.buffer = b""

    def line(self, timeout: float = 30.0) -> dict[str, object]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            data = self.sock.recv(1 << 20)
            if not data:
                raise SystemExit("the daemon closed the connection")
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, object] = json.loads(line)
        return message

    def next(self, kind: str, timeout: float = 30.0) -> dict[str, object]:
        while True:
            message = self.line(timeout)
            if message["type"] == kind:
                return message

    def close(self) -> None:
        self.sock.close()


@dataclass
class Figures:
    n: int
    start: float
    threads: int
    instances: int
    watches: int
    rss_mb: float
    polling: int
    burst: float
    idle_cpu: float
    idle_wall: float
    detect: list[float]
    waited: list[float]
    steal: float  # seconds the hypervisor ran others on this VM's CPUs during the updates
    floor: list[float]  # the same updates to scripts/floor.py, alternating with the daemon's


class Floor(Client):
    """``scripts/floor.py`` watching ``ref``, and this process its client."""

    def __init__(self, path: Path, ref: Path) -> None:
        script = Path(__file__).with_name("floor.py")
        self.process = subprocess.Popen(
            [sys.executable, str(script), str(path), str(ref)], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        started = False
        try:
            if self.process.stdout.readline().strip() == "ready":
                super().__init__(path)
                started = True
        finally:
            if not started:
                self._stop()
        if not started:
            raise SystemExit("scripts/floor.py did not start")

    def __enter__(self) -> Floor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self._stop()

    def _stop(self) -> None:
        # Our own child, by its Popen handle: never by name.
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def update(ref: Path, revision: str, seen: Callable[[], object]) -> float:
    """Move ``ref`` to ``revision`` as git does (a lock file renamed over it); seconds
    until ``seen()`` returns (the line that tells of it)."""
    lock = ref.with_name(ref.name + ".lock")
    lock.write_text(revision + "\n")
    t0 = time.perf_counter()
    lock.replace(ref)
    seen()
    return time.perf_counter() - t0


def steal_seconds() -> float:
    """The machine's CPU time stolen by the hypervisor so far (``/proc/stat``, all CPUs):
    a thread the VM does not run looks running to the guest, so run-queue waits miss it."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def measure(
    n: int, work: Path, source: Path, revisions: tuple[str, str], args: argparse.Namespace
) -> Figures:
    paths = copies(source, work / f"n{n}", n)
    # Checkouts are not minutes old in real life: files changed within the last few
    # seconds are "racy" (git/packed.py's RACY_NS) and re-verified by a full read.
    if not args.quick:  # --quick checks that the script runs, not its figures
        time.sleep(3.2)
    config = work / f"n{n}.toml"
    lines = [f"client_queue = {4 * n + 1024}", 'log_level = "warning"']
    lines += [f'[[checkout]]\npath = "{p}"' for p in paths]
    config.write_text("\n".join(lines) + "\n")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(work / f"notify{n}"))
    notify.settimeout(READY_TIMEOUT)
    sock = work / f"d{n}.sock"
    env = {**os.environ, "NOTIFY_SOCKET": str(work / f"notify{n}")}
    if args.src:
        env["PYTHONPATH"] = str(Path(args.src).resolve())
    started = time.perf_counter()
    daemon = subprocess.Popen(
        [sys.executable, "-m", "stalewatch", "daemon", "--socket", str(sock), "--config", str(config)],
        env=env,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while b"READY=1" not in notify.recv(4096):
            pass
        start = time.perf_counter() - started
        notify.close()
        status = proc_status(daemon.pid)
        instances, watches = inotify_usage(daemon.pid)

        t0 = time.perf_counter()
        client = Client(sock)
        hello = client.next("hello")
        snapshots = [client.next("snapshot") for _ in hello["checkouts"]]  # type: ignore[union-attr]
        burst = time.perf_counter() - t0
        polling = sum(1 for s in snapshots if s.get("mode") != "native" or not s.get("trusted"))

        # The steady state: each watcher makes its first periodic verification one to
        # two periods after the start (a period: 2 s, or N / 50 s when longer).
        settled = started + 2 * max(2.0, n / 50) + 0.5
        _receive_pings(client, settled if not args.quick else 0.0)
        target = paths[len(paths) // 2]
        ref = target / ".git/refs/heads/main"
        detect, waited, floor = [], [], []
        floor_ref = work / f"floor{n}" / ".git/refs/heads/main"
        shutil.copytree(source, floor_ref.parents[3], symlinks=True)
        with Floor(work / f"floor{n}.sock", floor_ref) as lowest:
            stolen = steal_seconds()
            for i in range(args.updates):
                revision = revisions[(i + 1) % 2]
                before = runqueue_wait(daemon.pid, os.getpid())
                detect.append(update(ref, revision, lambda: client.next("event", timeout=10)))
                waited.append(runqueue_wait(daemon.pid, os.getpid()) - before)
                _receive_pings(client, time.perf_counter() + args.spacing)
                # The same update to the floor's copy, between two of the daemon's.
                floor.append(update(floor_ref, revision, lambda: lowest.line(timeout=10)))
                _receive_pings(client, time.perf_counter() + args.spacing)
            stolen = steal_seconds() - stolen

        cpu0, wall0 = cpu_seconds(daemon.pid), time.monotonic()
        _receive_pings(client, time.perf_counter() + args.idle)  # one client receiving pings
        idle_cpu, idle_wall = cpu_seconds(daemon.pid) - cpu0, time.monotonic() - wall0
        client.close()
        rss = int(status["VmRSS"].split()[0]) / 1024
        return Figures(
            n,
            start,
            int(status["Threads"]),
            instances,
            watches,
            rss,
            polling,
            burst,
            idle_cpu,
            idle_wall,
            detect,
            waited,
            stolen,
            floor,
        )
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        shutil.rmtree(work / f"n{n}", ignore_errors=True)


def packed_repository(root: Path, refs: int) -> tuple[Path, str, str]:
    """A repository whose packed-refs holds ``refs`` tags and its branch (written as git
    writes it: header, records sorted by name), with no loose refs."""
    (root / "large").mkdir()
    repo, a, b = template(root / "large")
    names = [f"refs/tags/v{i:06d}" for i in range(refs)] + ["refs/heads/main"]
    lines = ["# pack-refs with: peeled fully-peeled sorted \n"]
    lines += [f"{a} {name}\n" for name in sorted(names, key=str.encode)]
    (repo / ".git/packed-refs").write_text("".join(lines))
    (repo / ".git/refs/heads/main").unlink()
    return repo, a, b


def large_repository(work: Path, refs: int, updates: int, src: str | None) -> None:
    if src:
        sys.path.insert(0, str(Path(src).resolve()))
    from stalewatch import Guard, LocalSource

    repo, a, b = packed_repository(work, refs)
    packed = repo / ".git/packed-refs"
    size = packed.stat().st_size / 1e6
    # As most are, the file is older than the few seconds in which a rewrite could
    # keep its stat data (git/packed.py's RACY_NS): until then every read is a full one.
    time.sleep(max(0.0, packed.stat().st_ctime + 3.2 - time.time()))
    guard = Guard.for_checkout(repo, source=LocalSource(verify_interval=3600))
    events: queue.SimpleQueue[float] = queue.SimpleQueue()
    guard.subscribe(lambda event: events.put(time.perf_counter()))
    with guard:
        guard.wait_ready(10)
        timeit_runs = []
        stop_at = time.perf_counter() + (5.0 if updates > 5 else 0.5)
        while len(timeit_runs) < 2000 and time.perf_counter() < stop_at:  # a slow one is cut short
            t0 = time.perf_counter()
            for _ in range(10):
                guard.check(strict=True)
            timeit_runs.append((time.perf_counter() - t0) / 10)
        strict = sorted(timeit_runs)
        ref = repo / ".git/refs/heads/main"
        loose: list[float] = []
        for i in range(updates):  # a commit: the branch's loose ref appears, then moves
            lock = ref.with_name("main.lock")
            lock.write_text((b if i % 2 == 0 else a) + "\n")
            t0 = time.perf_counter()
            lock.replace(ref)
            loose.append(events.get(timeout=10) - t0)
        ref.unlink()  # packed-only again: back to the packed value
        guard.refresh()
        while not events.empty():
            events.get()
        repacked: list[float] = []
        text = packed.read_text()
        for i in range(updates):  # `git pack-refs`: packed-refs.new renamed over it
            new = packed.with_name("packed-refs.new")
            before, after = (a, b) if i % 2 == 0 else (b, a)
            text = text.replace(f"{before} refs/heads/main", f"{after} refs/heads/main")
            new.write_text(text)
            t0 = time.perf_counter()
            new.replace(packed)
            repacked.append(events.get(timeout=10) - t0)
    print(f"\nlarge repository: {refs:,} packed refs ({size:.1f} MB), HEAD's branch packed, in-process guard")
    median, p99 = strict[len(strict) // 2], _p99(strict)
    print(f"  {'check(strict=True)':<35} median {_us(median)}  p99 {_us(p99)}")
    for label, values in (("loose ref update -> event", loose), ("packed-refs rewrite -> event", repacked)):
        ordered = sorted(values)
        median, worst = statistics.median(ordered), ordered[-1]
        p99 = _p99(ordered)
        print(f"  {label:<35} median {_us(median)}  p99 {_us(p99)}  max {_us(worst)}  (n={len(ordered)})")


def _p99(ordered: list[float]) -> float:
    """The 99th percentile of sorted values (the largest below 100 values)."""
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:9.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:9.3f} ms"


def _receive_pings(client: Client, until: float) -> None:
    """Read the daemon's lines until ``until`` (perf_counter)."""
    while time.perf_counter() < until:
        try:
            client.line(timeout=max(0.01, until - time.perf_counter()))
        except TimeoutError:
            break


def show(f: Figures) -> None:
    ms = sorted(v * 1000 for v in f.detect)
    print(
        f"N={f.n:<5} start {f.start:6.2f} s   threads {f.threads:4d}   inotify {f.instances} instance(s), "
        f"{f.watches:5d} watches   RSS {f.rss_mb:6.1f} MB   polling {f.polling}"
    )
    print(
        f"        burst {f.burst * 1000:8.1f} ms   idle CPU {f.idle_cpu:5.2f} s over {f.idle_wall:4.1f} s "
        f"({100 * f.idle_cpu / f.idle_wall:.2f} %)   detection median {statistics.median(ms):6.3f} ms "
        f"p99 {_p99(ms):6.3f} ms max {ms[-1]:6.3f} ms (n={len(ms)})",
        flush=True,
    )
    # What is left of each detection once the time the daemon's threads and this client
    # spent runnable but without a CPU is taken out (summed over threads: an estimate).
    left = sorted(max(0.0, d - w) * 1000 for d, w in zip(f.detect, f.waited, strict=True))
    slow = [(d, w) for d, w in zip(f.detect, f.waited, strict=True) if d > 0.005]
    print(
        f"        less run-queue waits: median {statistics.median(left):6.3f} ms "
        f"p99 {_p99(left):6.3f} ms max {left[-1]:6.3f} ms;  "
        f"updates over 5 ms: {len(slow)}, of which over 5 ms without the waits: "
        f"{sum(1 for d, w in slow if d - w > 0.005)};  hypervisor steal meanwhile "
        f"{f.steal * 1000:.0f} ms (all CPUs)",
        flush=True,
    )
    low = sorted(v * 1000 for v in f.floor)
    print(
        f"        floor (scripts/floor.py, the same updates in turn): "
        f"median {statistics.median(low):6.3f} ms "
        f"p99 {_p99(low):6.3f} ms max {low[-1]:6.3f} ms;  "
        f"updates over 5 ms: {sum(1 for v in low if v > 5.0)}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,100,1000")
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--spacing", type=float, default=0.1, help="seconds between two updates")
    parser.add_argument("--packed", type=int, default=100_000, help="refs in the large repository")
    parser.add_argument("--src", help="run the daemon from this source tree (its src/ directory)")
    parser.add_argument(
        "--quick", action="store_true", help="N = 1, 10 and tiny counts: checks the script runs"
    )
    args = parser.parse_args()
    if args.quick:
        args.counts, args.idle, args.updates, args.packed, args.spacing = "1,10", 0.5, 5, 1000, 0.0
    counts = [int(c) for c in args.counts.split(",")]
    work = Path(tempfile.mkdtemp(prefix="swscale-", dir="/tmp"))  # short: AF_UNIX paths
    try:
        source, a, b = template(work)
        version = git(work, "--version").split()[-1]
        print(
            f"python {sys.version.split()[0]}, git {version}, {os.cpu_count()} CPUs; one daemon, N checkouts"
        )
        for n in counts:
            before = os.getloadavg()[0]
            show(measure(n, work, source, (a, b), args))
            print(f"        load average (1 min) before {before:.2f}, after {os.getloadavg()[0]:.2f}")
        if args.packed:
            large_repository(work, args.packed, args.updates, args.src)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
