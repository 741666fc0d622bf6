"""Attacks on one real daemon, each measured from an honest client's side (issue 17).

Used by ``soak.py --attacks`` (and runnable alone: ``python scripts/attacks.py``).
Every attack starts a ``stalewatch daemon`` process of its own (systemd's side is a
datagram socket here: ``READY=1``, ``WATCHDOG=1`` every 0.5 s on proof of life), an
honest subscriber that pings every 20 ms, and a committer that moves a ref (a rename,
as git does) every 100 ms; meanwhile another process attacks. Figures printed per
attack: ping round trips and event delays at the honest client (median, p99, max),
the longest gap between two ``WATCHDOG=1``, and how long SIGTERM took, sent while
the attack still runs.

- ``flood``: a process looping ``socket(); connect(); close()``;
- ``flood-hold``: a process that connects and never reads (holding up to 200
  connections, closing the oldest for a new one);
- ``reload``: 10,001 ``[[checkout]]`` tables and SIGHUP (SIGTERM 1 s in), then a full
  reload to 10,001 and back to 1 (RSS before, at 10,001 and after);
- ``descriptors``: the daemon's ``RLIMIT_NOFILE`` lowered below what it holds while
  a commit lands (``unreadable`` events: must be 0), then restored;
- ``slowloris``: the ``/metrics`` endpoint under connections that never finish their
  request, while an honest scraper scrapes back to back (scrapes dropped: must be 0).
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gitrepo import two_commits

WATCHDOG_USEC = 1_000_000  # pings every 0.5 s on proof of life
FLOOD = r"""
import socket, sys, time
path, hold, until = sys.argv[1], sys.argv[2] == "hold", time.monotonic() + float(sys.argv[3])
held, n = [], 0
while time.monotonic() < until:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        n += 1
    except OSError:
        s.close()
        continue
    if hold:
        held.append(s)
        if len(held) > 200:
            held.pop(0).close()
    else:
        s.close()
print(n, flush=True)
"""


def ms(values: list[float]) -> str:
    """``median / p99 / max`` in milliseconds (``-`` when there are none)."""
    if not values:
        return "-"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"{statistics.median(ordered) * 1e3:.2f} / {p99 * 1e3:.2f} / {ordered[-1] * 1e3:.2f} ms"


class Systemd:
    """The daemon's NOTIFY_SOCKET: every datagram, with the time it arrived."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.1)
        self.path = path
        self.got: list[tuple[float, str]] = []
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="attacks-systemd", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                text = self.sock.recv(65536).decode()
            except TimeoutError:
                continue
            except OSError:
                return
            self.got.append((time.monotonic(), text))
            if "READY=1" in text.split("\n"):
                self.ready.set()

    def wait_for(self, state: str, since: float, timeout: float) -> float:
        """When a datagram holding ``state`` arrived after ``since``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for when, text in list(self.got):
                if when >= since and state in text.split("\n"):
                    return when
            time.sleep(0.05)  # polls the receiver thread's list
        raise SystemExit(f"no {state} within {timeout} s")

    def watchdog_gap(self, since: float, until: float) -> float:
        """The longest time without a ``WATCHDOG=1`` between ``since`` and ``until``."""
        times = (
            [since] + [t for t, text in self.got if since <= t <= until and "WATCHDOG=1" in text] + [until]
        )
        return max(b - a for a, b in itertools.pairwise(times))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
        self.path.unlink(missing_ok=True)


class Daemon:
    """A ``stalewatch daemon --config`` process under a fake systemd."""

    def __init__(self, work: Path, config: Path, src: str | None = None) -> None:
        self.socket = work / "d.sock"
        self.log = work / "daemon.log"
        self.systemd = Systemd(work / "notify")
        env = {**os.environ, "NOTIFY_SOCKET": str(self.systemd.path), "WATCHDOG_USEC": str(WATCHDOG_USEC)}
        env.pop("WATCHDOG_PID", None)
        if src:
            env["PYTHONPATH"] = src
        runner = ["-m", "stalewatch"]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, *runner, "daemon", "--socket", str(self.socket), "--config", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
            )

    def wait_ready(self, timeout: float = 600.0) -> None:
        if not self.systemd.ready.wait(timeout):
            raise SystemExit(f"the daemon never became ready:\n{self.log.read_text()[-2000:]}")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def terminate(self) -> float:
        """SIGTERM; seconds until it exited (killed after 30 s: ``inf``)."""
        begun = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return float("inf")
        return time.monotonic() - begun

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.systemd.close()


class Honest:
    """A subscriber that pings every 20 ms and times pongs and events."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(path))
        self.sent: dict[int, float] = {}
        self.rtts: list[tuple[float, float]] = []  # (when answered, round trip)
        self.events: dict[str, float] = {}  # current_revision -> when seen (the latest)
        self.unreadable = 0
        self.new_snapshots = 0  # snapshot lines after the greeting (a reload's new checkouts)
        self.greeted = threading.Event()
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        self.closed = False
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, name="attacks-honest", daemon=True)
        self._reader.start()
        self._pinger = threading.Thread(target=self._ping, name="attacks-pinger", daemon=True)

    def start_pinging(self) -> None:
        self._pinger.start()

    def _ping(self) -> None:
        n = 0
        while not self._stop.wait(0.02):
            n += 1
            with self.lock:
                self.sent[n] = time.monotonic()
            try:
                self.sock.sendall(json.dumps({"type": "ping", "id": n}).encode() + b"\n")
            except OSError:
                return

    def _read(self) -> None:
        buffer, snapshots = b"", None
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except OSError:
                data = b""
            if not data:
                with self.lock:
                    self.closed = True
                    self.arrived.notify_all()
                return
            now = time.monotonic()
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                message = json.loads(line)
                kind = message["type"]
                with self.lock:
                    if kind == "hello":
                        snapshots = len(message["checkouts"])
                    elif kind == "snapshot" and self.greeted.is_set():
                        self.new_snapshots += 1
                    elif kind == "snapshot" and snapshots is not None:
                        snapshots -= 1
                        if snapshots == 0:
                            self.greeted.set()
                    elif kind == "pong" and message.get("id") in self.sent:
                        self.rtts.append((now, now - self.sent.pop(message["id"])))
                    elif kind == "event":
                        self.events[message["current_revision"]] = now
                        self.unreadable += message["status"] == "unreadable"
                    self.arrived.notify_all()

    def wait_event(self, revision: str, since: float, timeout: float) -> float | None:
        """When an event with ``revision`` arrived after ``since`` (``None``: not in time)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.events.get(revision, -1.0) < since:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return None
                self.arrived.wait(left)
            return self.events[revision]

    def wait_snapshots(self, count: int, timeout: float) -> None:
        """Until ``count`` snapshots came after the greeting."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.new_snapshots < count:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise SystemExit(f"{self.new_snapshots} new snapshots, not {count}")
                self.arrived.wait(left)

    def round_trips(self, since: float, until: float) -> tuple[list[float], int]:
        """Round trips answered in ``[since, until]``, and pings still unanswered."""
        with self.lock:
            done = [rtt for when, rtt in self.rtts if since <= when <= until]
            return done, sum(1 for sent in self.sent.values() if sent <= until - 1.0)

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self._reader.join(timeout=5)
        if self._pinger.ident is not None:
            self._pinger.join(timeout=5)


class Committer:
    """Moves ``refs/heads/main`` of one checkout between two commits (a rename, as git
    does) every ``interval`` seconds; each move's time, to time the events.

    Every move changes the ref: the first goes to whichever of the two commits the ref
    does not hold now. An event is a change of status (a ref rewritten with the commit
    it already held changes nothing, and the daemon rightly says nothing), and a
    checkout that an earlier attack's committer moved an odd number of times starts
    on the second commit: starting there with "the second commit" counted an event
    that was never due as lost.
    """

    def __init__(self, repo: Path, revisions: tuple[str, str], honest: Honest, interval: float = 0.1) -> None:
        self.ref = repo / ".git/refs/heads/main"
        self.revisions = revisions
        self.honest = honest
        self.interval = interval
        self.moves: list[tuple[float, float]] = []  # (moved at, delay to the event)
        self.lost = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="attacks-committer", daemon=True)
        # revisions[self._n % 2] after the increment: the commit the ref does not hold.
        self._n = 1 if self.ref.read_text().strip() == revisions[1] else 0

    def start(self) -> Committer:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._n += 1
            revision = self.revisions[self._n % 2]
            lock = self.ref.with_name("main.lock")
            lock.write_text(revision + "\n")
            moved = time.monotonic()
            lock.replace(self.ref)
            seen = self.honest.wait_event(revision, moved, 10.0)
            if seen is None:
                self.lost += 1
            else:
                self.moves.append((moved, seen - moved))

    def delays(self, since: float, until: float) -> list[float]:
        return [delay for moved, delay in self.moves if since <= moved <= until]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


def checkouts(root: Path, template: Path, n: int) -> list[Path]:
    """``n`` checkouts under ``root``: a copy of ``template`` (a small repository, the one
    commits move, and 99 more), then the smallest layout git itself accepts (``HEAD``,
    the branch naming the same commit, ``objects/``): what the daemon watches in each is
    the same, and ten thousand whole copies take a busy disk an hour."""
    root.mkdir(exist_ok=True)
    head = (template / ".git" / "refs" / "heads" / "main").read_text()
    paths = []
    for i in range(n):
        target = root / f"c{i:05d}"
        if target.exists():
            pass
        elif i < 100:
            shutil.copytree(template, target, symlinks=True)
        else:
            git_dir = target / ".git"
            (git_dir / "refs" / "heads").mkdir(parents=True)
            (git_dir / "objects").mkdir()
            (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
            (git_dir / "refs" / "heads" / "main").write_text(head)
        paths.append(target)
    return paths


def write_config(path: Path, repos: list[Path], extra: str = "", log_level: str = "warning") -> None:
    text = f'log_level = "{log_level}"\nmax_clients = 256\n' + extra
    text += "".join(f'[[checkout]]\npath = "{repo}"\n' for repo in repos)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.chmod(0o600)
    tmp.replace(path)


@contextmanager
def world(
    work: Path, template: Path, n: int, extra: str = "", src: str | None = None, log_level: str = "warning"
) -> Iterator[tuple[Daemon, list[Path]]]:
    repos = checkouts(work / "repos", template, n)
    config = work / "c.toml"
    write_config(config, repos, extra, log_level)
    daemon = Daemon(work, config, src)
    try:
        daemon.wait_ready()
        yield daemon, repos
    finally:
        daemon.close()


def attack_flood(
    work: Path,
    template: Path,
    revisions: tuple[str, str],
    n: int,
    hold: bool,
    seconds: float,
    src: str | None = None,
) -> dict[str, Any]:
    """A connect/close flood (``hold``: connections kept, never read) against N checkouts."""
    with world(work, template, n, src=src) as (daemon, repos):
        honest = Honest(daemon.socket)
        if not honest.greeted.wait(60):
            raise SystemExit("the honest client was never greeted")
        honest.start_pinging()
        committer = Committer(repos[len(repos) // 2], revisions, honest).start()
        quiet_from = time.monotonic()
        time.sleep(1.0)  # a quiet second first: the figures without the attack
        quiet_until = time.monotonic()
        flood = subprocess.Popen(
            [sys.executable, "-c", FLOOD, str(daemon.socket), "hold" if hold else "close", str(seconds + 2)],
            stdout=subprocess.PIPE,
        )
        began = time.monotonic()
        time.sleep(seconds)
        ended = time.monotonic()
        rtts, unanswered = honest.round_trips(began + 0.2, ended)
        quiet_rtts, _ = honest.round_trips(quiet_from, quiet_until)
        gap = daemon.systemd.watchdog_gap(began, ended)
        committer.stop()
        stop_took = daemon.terminate()  # while the flood runs
        honest.close()
        out, _ = flood.communicate(timeout=30)
        connections = int(out.strip() or 0)
        return {
            "attack": f"flood{'-hold' if hold else ''}",
            "checkouts": n,
            "flood connections/s": round(connections / (seconds + 2)),
            "ping rtt, quiet": ms(quiet_rtts),
            "ping rtt, attacked": ms(rtts),
            "pings unanswered": unanswered,
            "event delay, quiet": ms(committer.delays(quiet_from, quiet_until)),
            "event delay, attacked": ms(committer.delays(began, ended)),
            "events lost": committer.lost,
            "longest watchdog gap": f"{gap:.2f} s",
            "SIGTERM during attack": f"{stop_took:.2f} s",
        }


def attack_reload(
    work: Path, template: Path, revisions: tuple[str, str], n: int, src: str | None = None
) -> list[dict[str, Any]]:
    """SIGHUP from 1 to ``n`` checkouts: SIGTERM while binding, while applying, after;
    then a whole reload up and back down, with RSS."""
    repos = checkouts(work / "repos", template, n)
    config = work / "c.toml"
    results = []
    for moment in ("binding", "applying", "done"):
        write_config(config, repos[:1])
        daemon = Daemon(work, config, src)
        try:
            daemon.wait_ready()
            honest = Honest(daemon.socket)
            honest.greeted.wait(60)
            honest.start_pinging()
            committer = Committer(repos[0], revisions, honest).start()
            write_config(config, repos)
            began = time.monotonic()
            daemon.proc.send_signal(signal.SIGHUP)
            if moment == "binding":
                time.sleep(1.0)
            elif moment == "applying":
                honest.wait_snapshots(1, 600)  # the first new checkout announced: applying
            else:
                honest.wait_snapshots(n - 1, 600)
                daemon.systemd.wait_for("READY=1", began, 600)
            at = time.monotonic() - began
            rtts, unanswered = honest.round_trips(began, time.monotonic())
            gap = daemon.systemd.watchdog_gap(began, time.monotonic())
            committer.stop()
            stop_took = daemon.terminate()
            honest.close()
            log = daemon.log.read_text(errors="replace")
            results.append(
                {
                    "attack": f"reload 1 -> {n}",
                    "SIGTERM sent": f"while {moment} ({at:.1f} s after SIGHUP)",
                    "exited after": f"{stop_took:.2f} s",
                    "new checkouts announced": honest.new_snapshots,
                    "ping rtt meanwhile": ms(rtts),
                    "pings unanswered": unanswered,
                    "event delay meanwhile (a staying checkout)": ms(
                        committer.delays(began, time.monotonic())
                    ),
                    "events lost": committer.lost,
                    "longest watchdog gap": f"{gap:.2f} s",
                    "tracebacks": log.count("Traceback"),
                }
            )
        finally:
            daemon.close()
    # Up and down again, to see the memory come back.
    write_config(config, repos[:1])
    daemon = Daemon(work, config, src)
    try:
        daemon.wait_ready()
        rss_one = daemon.rss_mb()
        write_config(config, repos)
        began = time.monotonic()
        daemon.proc.send_signal(signal.SIGHUP)
        daemon.systemd.wait_for("READY=1", began, 900)
        took_up = time.monotonic() - began
        rss_up = daemon.rss_mb()
        write_config(config, repos[:1])
        began = time.monotonic()
        daemon.proc.send_signal(signal.SIGHUP)
        daemon.systemd.wait_for("READY=1", began, 900)
        took_down = time.monotonic() - began
        rss_down = daemon.rss_mb()
        stop_took = daemon.terminate()
        results.append(
            {
                "attack": f"reload 1 -> {n} -> 1",
                "RSS at 1": f"{rss_one:.0f} MB",
                f"reload to {n}": f"{took_up:.1f} s",
                f"RSS at {n}": f"{rss_up:.0f} MB",
                "reload back to 1": f"{took_down:.1f} s",
                "RSS back at 1": f"{rss_down:.0f} MB",
                "SIGTERM": f"{stop_took:.2f} s",
            }
        )
    finally:
        daemon.close()
    return results


def _lowest_free_fd(pid: int) -> int:
    used = {int(p.name) for p in Path(f"/proc/{pid}/fd").iterdir()}
    return next(fd for fd in range(len(used) + 1) if fd not in used)


def _wait_log(daemon: Daemon, text: str, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while text not in daemon.log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise SystemExit(f"{text!r} never logged")
        time.sleep(0.02)  # polls another process's log
    return time.monotonic()


def attack_descriptors(
    work: Path, template: Path, revisions: tuple[str, str], src: str | None = None
) -> dict[str, Any]:
    """The daemon's RLIMIT_NOFILE below what it holds while a commit lands, then back."""
    with world(work, template, 1, src=src) as (daemon, repos):
        honest = Honest(daemon.socket)
        honest.greeted.wait(30)
        honest.start_pinging()
        pid = daemon.proc.pid
        _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        low = _lowest_free_fd(pid)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (low, hard))
        began = time.monotonic()
        ref = repos[0] / ".git/refs/heads/main"
        lock = ref.with_name("main.lock")
        lock.write_text(revisions[1] + "\n")
        lock.replace(ref)
        tried = _wait_log(daemon, "cannot read HEAD", 10)
        newcomer = socket.socket(socket.AF_UNIX)
        newcomer.settimeout(30)
        newcomer.connect(str(daemon.socket))  # the backlog holds it meanwhile
        time.sleep(1.0)  # a second out of descriptors
        during, unanswered = honest.round_trips(began, time.monotonic())
        restored = time.monotonic()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (max(low, 1024), hard))
        seen = honest.wait_event(revisions[1], began, 10)
        hello = newcomer.recv(65536)
        served = time.monotonic()
        newcomer.close()
        honest.close()
        return {
            "attack": "descriptors",
            "first failed read after the commit": f"{tried - began:.2f} s",
            "unreadable events": honest.unreadable,
            "ping rtt meanwhile": ms(during),
            "pings unanswered": unanswered,
            "event after descriptors returned": "never" if seen is None else f"{seen - restored:.2f} s",
            "waiting client served after": f"{served - restored:.2f} s"
            if hello.startswith(b'{"type":"hello"')
            else "no hello",
            "SIGTERM": f"{daemon.terminate():.2f} s",
        }


SLOWLORIS = r"""
import socket, sys, time
host, port, keep = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
until = time.monotonic() + float(sys.argv[4])
held, opened = [], 0
while time.monotonic() < until:
    while len(held) < keep:
        try:
            s = socket.create_connection((host, port), timeout=1)
            s.setblocking(False)
            s.send(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            held.append(s)
            opened += 1
        except OSError:
            break
    for s in list(held):
        try:
            if s.recv(1) == b"":
                raise ConnectionResetError
        except BlockingIOError:
            try:
                s.send(b"a")
            except OSError:
                held.remove(s); s.close()
        except OSError:
            held.remove(s); s.close()
    time.sleep(0.01)
print(opened, flush=True)
"""


def attack_slowloris(work: Path, template: Path, seconds: float, src: str | None = None) -> dict[str, Any]:
    """/metrics under connections that never finish a request; an honest scraper meanwhile."""
    extra = 'metrics_address = "127.0.0.1:0"\n'
    with world(work, template, 1, extra=extra, src=src, log_level="info") as (daemon, _):
        found = re.search(r"metrics on http://([0-9.]+):([0-9]+)/metrics", daemon.log.read_text())
        if found is None:
            raise SystemExit("no metrics address in the log (is the metrics extra installed?)")
        host, port = found.group(1), int(found.group(2))
        attacker = subprocess.Popen(
            [sys.executable, "-c", SLOWLORIS, host, str(port), "48", str(seconds + 1)],
            stdout=subprocess.PIPE,
        )
        time.sleep(0.5)  # the attack fills every place first
        scrapes, dropped, times = 0, 0, []
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            began = time.monotonic()
            try:
                conn = http.client.HTTPConnection(host, port, timeout=10)
                conn.request("GET", "/metrics")
                response = conn.getresponse()
                ok = response.status == 200 and b"stalewatch_build_info" in response.read()
                conn.close()
            except (OSError, http.client.HTTPException):
                ok = False
            scrapes += 1
            dropped += not ok
            times.append(time.monotonic() - began)
        out, _ = attacker.communicate(timeout=30)
        return {
            "attack": "slowloris on /metrics",
            "attacker connections": int(out.strip() or 0),
            "honest scrapes": scrapes,
            "dropped": dropped,
            "scrape time": ms(times),
            "SIGTERM": f"{daemon.terminate():.2f} s",
        }


ATTACKS = ("flood", "flood-hold", "reload", "descriptors", "slowloris")


def verdict(figures: dict[str, Any]) -> list[str]:
    """What did not hold in ``figures`` (empty: every promise held)."""
    wrong = []
    for key in ("pings unanswered", "events lost", "unreadable events", "dropped", "tracebacks"):
        if figures.get(key):
            wrong.append(f"{key}: {figures[key]}")
    for key, value in figures.items():
        took = str(value).split()[0]
        timed = key == "exited after" or (key.startswith("SIGTERM") and key != "SIGTERM sent")
        if timed and float(took) > 1.0:
            wrong.append(f"{key}: {value} (more than a second)")
    if figures.get("event after descriptors returned") == "never":
        wrong.append("no event once descriptors returned")
    return wrong


def run(names: list[str], counts: list[int], seconds: float, reload: int, src: str | None = None) -> int:
    """Run the attacks, print their figures and verdicts; 1 if any promise did not hold."""
    work = Path(tempfile.mkdtemp(prefix="swatk-", dir="/tmp"))  # short: AF_UNIX paths
    failed = 0
    try:
        template = work / "template"
        revisions = two_commits(template, "app.py", "VALUE = 1\n", "--template=")
        for name in names:
            for n in counts if name.startswith("flood") else [0]:
                where = work / f"{name}-{n}"
                where.mkdir()
                if name.startswith("flood"):
                    results = [
                        attack_flood(where, template, revisions, n, name == "flood-hold", seconds, src)
                    ]
                elif name == "reload":
                    results = attack_reload(where, template, revisions, reload, src)
                elif name == "descriptors":
                    results = [attack_descriptors(where, template, revisions, src)]
                elif name == "slowloris":
                    results = [attack_slowloris(where, template, seconds, src)]
                else:
                    raise SystemExit(f"unknown attack {name}; known: {', '.join(ATTACKS)}")
                for figures in results:
                    print(", ".join(f"{key}: {value}" for key, value in figures.items()), flush=True)
                    wrong = verdict(figures)
                    failed += bool(wrong)
                    print(f"  -> {'FAILED: ' + '; '.join(wrong) if wrong else 'held'}", flush=True)
                shutil.rmtree(where, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("attacks", nargs="*", default=list(ATTACKS))
    parser.add_argument("--checkouts", default="1,1000", help="checkouts for the floods")
    parser.add_argument("--seconds", type=float, default=6.0, help="each flood's (and the slowloris') length")
    parser.add_argument("--reload", type=int, default=10_001, help="checkouts of the huge reload")
    parser.add_argument("--src", help="run the daemon from this source tree (its src/ directory)")
    args = parser.parse_args()
    counts = [int(c) for c in args.checkouts.split(",")]
    return run(args.attacks, counts, args.seconds, args.reload, args.src)


if __name__ == "__main__":
    sys.exit(main())
