#!/usr/bin/env python3
"""Soak the daemon: a real daemon for a bounded time under mixed abuse; prints figures.

Usage: python scripts/soak.py [--minutes 5] [--checkouts 3] [--quick]
       python scripts/soak.py --attacks [flood,flood-hold,reload,descriptors,slowloris] [--quick]

One ``stalewatch daemon`` process watches a few real repositories, with chatty hooks
that leave background children holding their output, and meanwhile:

- a committer commits round-robin (now and then resetting to the loaded revision, so
  statuses go stale -> current -> stale), and waits until every honest subscriber saw
  each new HEAD before the next commit: a HEAD a subscriber never saw is a **lost
  event**; an event whose generation is not the previous + 1 is a **generation gap**;
- honest subscribers read every line (they must never be dropped);
- hostile clients send what the protocol refuses (non-finite numbers, deep nesting,
  garbage, over-long lines), half-close, connect and vanish, or flood pings unread;
- slow clients never read, or read a line a second (dropped past their queue bound);
- SIGHUP reloads the configuration every second or so, alternating its hooks.

At the end it prints those counts, the daemon's RSS and open descriptors (after
warm-up, peak, end), its threads, and how it stopped. Exit status 1 if an event was
lost, a generation skipped, an honest subscriber dropped, or the daemon died.

``--attacks`` runs instead the attacks of issue 17, each against a daemon of its own
(:mod:`attacks`): a connect/close flood and a flood of clients that never read, with 1
and 1,000 checkouts; a reload to 10,001 checkouts with SIGTERM while binding, while
applying and after, then up and back down with RSS; the daemon out of descriptors
while a commit lands; slowloris on ``/metrics``. Each prints its figures and whether
its promise held (exit status 1 if one did not). ``--quick``: 2 s floods with 1 and 10
checkouts, a reload to 51.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attacks
from gitrepo import git

OBSERVE_TIMEOUT = 10.0  # a HEAD not seen by a subscriber within this is lost

# Lines the daemon must refuse with an error line, costing only their client.
HOSTILE_LINES = [
    b'{"type":"ping","id":NaN}\n',
    b'{"type":"ping","id":1e999}\n',
    b'{"type":"ping","id":' + b"[" * 1500 + b"]" * 1500 + b"}\n",
    b'{"type":"ping","id":' + b"9" * 3000 + b"}\n",
    b'{"type":"subscribe"}\n',
    b"\x00\xff garbage\n",
    b"x" * 5000,
    b"[1,2,3]\n",
]
# Hooks: chatty output, and a background child that keeps the output pipe open.
HOOKS = [
    {
        "on_stale": ["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' y; (sleep 0.3; echo bg) &"],
        "on_current": ["sh", "-c", "echo back to loaded; yes | head -n 20000"],
    },
    {"on_stale": ["sh", "-c", "yes stale | head -n 50000"], "on_current": ["true"]},
]


def make_repo(path: Path) -> str:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "f.txt").write_text("0\n")
    git(path, "add", "f.txt")
    git(path, "commit", "-q", "-m", "initial")
    return git(path, "rev-parse", "HEAD")


def write_config(path: Path, repos: list[Path], variant: int) -> None:
    hooks = HOOKS[variant % len(HOOKS)]
    text = "keepalive = 0.2\nclient_queue = 64\nclient_buffer = 4096\nmax_clients = 64\n"
    for repo in repos:
        text += f"[[checkout]]\npath = {json.dumps(str(repo))}\nhook_timeout = 2\n"
        text += "".join(f"{name} = {json.dumps(argv)}\n" for name, argv in hooks.items())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.chmod(0o600)
    tmp.replace(path)


class Proc:
    """Figures read from /proc for the daemon's pid."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def status(self, field: str) -> int:
        text = Path(f"/proc/{self.pid}/status").read_text()
        found = re.search(rf"^{field}:\s+(\d+)", text, re.MULTILINE)
        return int(found.group(1)) if found else 0

    def fds(self) -> int:
        return sum(1 for _ in Path(f"/proc/{self.pid}/fd").iterdir())


def _listening(path: Path) -> bool:
    """Whether a daemon accepts connections at ``path`` (a probe connects and leaves)."""
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


class Honest:
    """A subscriber that reads everything and checks generations per checkout."""

    def __init__(self, path: Path, number: int, seen: threading.Condition) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(path))
        self.sock.settimeout(0.5)
        self.number = number
        self.seen = seen
        self.revisions: dict[str, set[str]] = {}
        self.generation: dict[str, int] = {}
        self.gaps = 0
        self.dropped: str | None = None
        self.events = 0
        self.thread = threading.Thread(target=self.run, name=f"soak-honest-{number}", daemon=True)

    def run(self) -> None:
        buffer = b""
        while True:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                if self.dropped is None:
                    self.dropped = "connection closed"
                return
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                self.take(json.loads(line))

    def take(self, message: dict[str, Any]) -> None:
        kind, key = message["type"], message.get("checkout")
        if kind == "error":
            self.dropped = f"{message['reason']}: {message['detail']}"
            return
        if kind not in ("snapshot", "event") or key is None:
            return
        generation = message["generation"]
        if kind == "event":
            self.events += 1
            if generation != self.generation.get(key, -1) + 1:
                self.gaps += 1
        self.generation[key] = generation
        with self.seen:
            self.revisions.setdefault(key, set()).add(message["current_revision"])
            self.seen.notify_all()

    def close(self) -> None:
        self.sock.close()
        self.thread.join(timeout=5)


class Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[str, int] = {}

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.values[name] = self.values.get(name, 0) + n

    def __getitem__(self, name: str) -> int:
        return self.values.get(name, 0)


def hostile(path: Path, stop: threading.Event, counts: Counters, rng: random.Random) -> None:
    while not stop.is_set():
        act = rng.randrange(5)
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(3.0)
                sock.connect(str(path))
                counts.add("hostile connections")
                if act == 0:  # connect and vanish
                    continue
                if act == 1:  # half-close and leave after a line
                    sock.shutdown(socket.SHUT_WR)
                    sock.recv(4096)
                    continue
                if act == 2:  # flood pings, read nothing: dropped as slow
                    sock.settimeout(0.5)
                    sock.sendall(b'{"type":"ping","id":1}\n' * 2000)
                    continue
                line = rng.choice(HOSTILE_LINES) if act == 3 else rng.randbytes(rng.randrange(1, 300)) + b"\n"
                sock.sendall(line)
                rest = b""
                while chunk := sock.recv(65536):
                    rest += chunk
                if b'"type":"error"' in rest:
                    counts.add("hostile errors received")
        except OSError:
            counts.add("hostile connections cut")  # reset or timed out: fine, never a hang of ours
        stop.wait(rng.uniform(0.0, 0.05))


def slow(path: Path, stop: threading.Event, counts: Counters, rng: random.Random) -> None:
    while not stop.is_set():
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
                sock.connect(str(path))
                counts.add("slow connections")
                reading = rng.random() < 0.5
                deadline = time.monotonic() + rng.uniform(1.0, 4.0)
                sock.settimeout(0.5)
                while time.monotonic() < deadline and not stop.is_set():
                    if reading and not sock.recv(64):  # a trickle; b"": dropped
                        break
                    stop.wait(0.5)
        except OSError:
            pass


def every(interval: Callable[[], float], stop: threading.Event, action: Callable[[], None]) -> None:
    while not stop.wait(interval()):
        action()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--checkouts", type=int, default=3)
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--quick", action="store_true", help="a 10 s smoke run")
    parser.add_argument(
        "--attacks",
        nargs="?",
        const=",".join(attacks.ATTACKS),
        help="run these attacks instead (comma-separated; default: all)",
    )
    args = parser.parse_args()
    if args.attacks:
        counts, seconds, reload = ([1, 10], 2.0, 51) if args.quick else ([1, 1000], 6.0, 10_001)
        return attacks.run(args.attacks.split(","), counts, seconds, reload)
    seconds = 10.0 if args.quick else args.minutes * 60
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="sw-soak-", dir="/tmp"))
    daemon: subprocess.Popen[bytes] | None = None
    threads: list[threading.Thread] = []
    honest: list[Honest] = []
    stop = threading.Event()
    try:
        repos = [work / f"r{n}" for n in range(args.checkouts)]
        loaded = {str(repo.resolve()): make_repo(repo) for repo in repos}
        config = work / "c.toml"
        write_config(config, repos, 0)
        sock_path = work / "d.sock"
        log = (work / "daemon.log").open("wb")
        daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stalewatch",
                "daemon",
                "--socket",
                str(sock_path),
                "--config",
                str(config),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        proc = Proc(daemon.pid)
        deadline = time.monotonic() + 30
        while not _listening(sock_path):  # the path exists from bind(), connecting from listen()
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise SystemExit(f"the daemon did not start:\n{(work / 'daemon.log').read_text()}")
            time.sleep(0.02)  # polls another process's start-up, not a thread of ours
        seen = threading.Condition()
        honest = [Honest(sock_path, n, seen) for n in range(4)]
        for sub in honest:
            sub.thread.start()
        counts = Counters()
        for n in range(3):
            threads.append(
                threading.Thread(
                    target=hostile,
                    args=(sock_path, stop, counts, random.Random(rng.random())),
                    name=f"hostile-{n}",
                )
            )
        for n in range(2):
            threads.append(
                threading.Thread(
                    target=slow, args=(sock_path, stop, counts, random.Random(rng.random())), name=f"slow-{n}"
                )
            )
        variant = [0]

        def reload() -> None:
            variant[0] += 1
            write_config(config, repos, variant[0])
            daemon.send_signal(signal.SIGHUP)
            counts.add("SIGHUPs")

        threads.append(
            threading.Thread(target=every, args=(lambda: rng.uniform(0.5, 1.5), stop, reload), name="sighup")
        )
        for thread in threads:
            thread.start()

        warm_rss = warm_fds = 0
        peak_rss = peak_fds = peak_threads = 0
        started = time.monotonic()
        warm_at = started + min(20.0, seconds / 5)
        commits = lost = 0
        n = 0
        while time.monotonic() - started < seconds:
            repo = repos[n % len(repos)]
            key = str(repo.resolve())
            n += 1
            if rng.random() < 0.1:
                git(repo, "reset", "-q", "--hard", loaded[key])
            else:
                with (repo / "f.txt").open("a") as f:
                    f.write(f"{n}\n")
                git(repo, "commit", "-q", "-am", f"c{n}")
            head = git(repo, "rev-parse", "HEAD")
            commits += 1
            give_up = time.monotonic() + OBSERVE_TIMEOUT
            with seen:
                while True:
                    missing = [s for s in honest if head not in s.revisions.get(key, ())]
                    if not missing or time.monotonic() > give_up:
                        break
                    seen.wait(0.1)
            lost += len(missing)
            now = time.monotonic()
            if daemon.poll() is not None:
                break
            rss, fds, nthreads = proc.status("VmRSS"), proc.fds(), proc.status("Threads")
            peak_rss, peak_fds, peak_threads = (
                max(peak_rss, rss),
                max(peak_fds, fds),
                max(peak_threads, nthreads),
            )
            if not warm_rss and now >= warm_at:
                warm_rss, warm_fds = rss, fds
        alive = daemon.poll() is None
        end_rss, end_fds = (proc.status("VmRSS"), proc.fds()) if alive else (0, 0)
        dropped = [f"{s.number}: {s.dropped}" for s in honest if s.dropped]  # before the daemon stops
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        stop_took = float("nan")
        code = daemon.returncode
        if alive:
            begun = time.monotonic()
            daemon.send_signal(signal.SIGTERM)
            code = daemon.wait(timeout=30)
            stop_took = time.monotonic() - begun
        log.close()
        text = (work / "daemon.log").read_text(errors="replace")
        gaps = sum(s.gaps for s in honest)
        print(f"soak: {seconds:.0f} s, {args.checkouts} checkouts, seed {args.seed}")
        print(f"commits and resets:        {commits}")
        print(f"events at honest clients:  {sum(s.events for s in honest)} (4 subscribers)")
        print(f"lost events:               {lost}")
        print(f"generation gaps:           {gaps}")
        print(f"honest clients dropped:    {len(dropped)} {dropped if dropped else ''}".rstrip())
        print(
            f"hostile connections:       {counts['hostile connections']} "
            f"({counts['hostile errors received']} error replies read, "
            f"{text.count('closing client')} closed for bad requests)"
        )
        print(
            f"slow connections:          {counts['slow connections']} "
            f"({text.count('lines unread')} dropped as slow, floods included)"
        )
        print(
            f"SIGHUPs:                   {counts['SIGHUPs']} ({text.count('configuration reloaded')} reloads)"
        )
        print(
            f"hooks run:                 {len(re.findall(r'hook .* exited|hook .* timed out', text))} "
            f"({text.count('still holds its output')} left a background writer)"
        )
        print(f"daemon RSS (kB):           after warm-up {warm_rss}, peak {peak_rss}, end {end_rss}")
        print(f"daemon open fds:           after warm-up {warm_fds}, peak {peak_fds}, end {end_fds}")
        print(f"daemon threads:            peak {peak_threads}")
        print(f"unexpected errors logged:  {text.count('Traceback')}")
        print(
            f"SIGTERM:                   exit {code} in {stop_took:.2f} s"
            if alive
            else f"daemon DIED: exit {code}"
        )
        failed = lost or gaps or dropped or not alive or code != 0
        if failed:
            print(f"FAILED; daemon log kept in {work}/daemon.log", file=sys.stderr)
            work = Path()  # keep it
        return 1 if failed else 0
    finally:
        stop.set()
        for sub in honest:
            sub.close()
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        if work != Path():
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
