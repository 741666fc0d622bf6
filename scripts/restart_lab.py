"""A lab for automatic restarts: a checkout with a WSGI app, a daemon, a real supervisor, load.

Used by ``scripts/bench_restart.py`` and by the end-to-end tests. Everything runs on
loopback under one temporary directory; every process is stopped by its pid at exit.

- ``Lab.start()`` makes a git checkout holding ``app.py`` (a WSGI app guarded by a
  stalewatch guard fed by the daemon: it registers its loaded revision, answers
  ``/api/*`` with 409 once stale, and reports the revision and pid it loaded), starts
  ``stalewatch daemon`` with a restart policy, then the server under its supervisor:
  ``gunicorn -w N`` (restart: HUP to the master through its pid file) or
  ``supervisord`` running gunicorn (restart: ``supervisorctl restart web``).
- ``Lab.daemon_lines`` follows the daemon's socket and keeps every line with the time
  it arrived; ``Lab.wait_for(...)`` waits for one, never sleeping blindly.
- ``Load`` keeps a few threads sending requests and records each outcome.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitrepo import git

WAIT = 30.0

APP = '''\
"""A WSGI app guarded by stalewatch, fed by the daemon (written by scripts/restart_lab.py)."""
import json
import os
import time

from stalewatch import Daemon, Guard
from stalewatch.web import WSGIBarrier

guard = Guard.for_file(__file__, source=Daemon(os.environ["STALEWATCH_SOCKET"]))
guard.start()


def inner(environ, start_response):
    if environ["PATH_INFO"] == "/slow":
        time.sleep(float(environ.get("QUERY_STRING") or "0.2"))
    body = json.dumps({"revision": guard.loaded_revision, "pid": os.getpid()}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


app = WSGIBarrier(inner, guard, routes=["/api"])
# changes:
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Line:
    """One line from the daemon and when it arrived (``time.time()``)."""

    at: float
    message: dict[str, Any]


@dataclass
class Outcome:
    """One request: when it started and ended, and what came back (or what failed)."""

    start: float
    end: float
    path: str
    status: int | None = None
    revision: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    retry_after: str | None = None
    error: str | None = None  # the exception's class name
    connected: bool = False  # the kernel completed the connection (maybe only into a backlog)

    @property
    def cut(self) -> bool:
        """A response that began and did not end: what a graceful stop must never do."""
        return self.error is not None and self.status is not None

    @property
    def unserved(self) -> bool:
        """Refused, or reset before any response: the server never took the request."""
        return self.error is not None and self.status is None


class Load:
    """Threads sending requests to ``port`` until stopped; ``outcomes`` records each."""

    def __init__(self, port: int, paths: list[str], threads: int = 4) -> None:
        self.port = port
        self.paths = paths
        self.outcomes: list[Outcome] = []
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"lab-load-{i}", daemon=True)
            for i in range(threads)
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=WAIT)

    def _run(self, number: int) -> None:
        turn = number
        while not self._stop.is_set():
            path = self.paths[turn % len(self.paths)]
            turn += 1
            outcome = self.request(path)
            with self._lock:
                self.outcomes.append(outcome)
                self._lock.notify_all()
            if outcome.error == "ConnectionRefusedError":
                # The server is between two lives: knock again soon, never spin.
                self._stop.wait(0.01)

    def request(self, path: str) -> Outcome:
        start = time.time()
        outcome = Outcome(start, start, path)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT)
        try:
            conn.connect()
            outcome.connected = True
            conn.request("GET", path)
            response = conn.getresponse()
            outcome.status = response.status  # the response began: an error now cuts it
            outcome.retry_after = response.getheader("Retry-After")
            body = response.read()
            with contextlib.suppress(ValueError):
                outcome.payload = json.loads(body)
            outcome.revision = outcome.payload.get("revision")
        except (OSError, http.client.HTTPException) as exc:
            outcome.error = type(exc).__name__
        finally:
            conn.close()
            outcome.end = time.time()
        return outcome

    def snapshot(self) -> list[Outcome]:
        with self._lock:
            return list(self.outcomes)

    def wait_for(self, predicate: Callable[[Outcome], bool], timeout: float = WAIT) -> Outcome:
        """The first outcome from now on that matches ``predicate``."""
        with self._lock:
            seen = len(self.outcomes)

            def found() -> Outcome | None:
                return next((o for o in self.outcomes[seen:] if predicate(o)), None)

            if not self._lock.wait_for(lambda: found() is not None, timeout):
                raise TimeoutError(f"no matching request in {timeout} s")
            match = found()
            assert match is not None
            return match


class Lab:
    """See the module doc. Use as a context manager: everything stops at exit.

    Args:
        supervisor: ``gunicorn`` (graceful reload on HUP) or ``supervisord``
            (stop and start).
        workers: gunicorn workers.
        policy: extra keys for the ``[checkout.restart]`` table (TOML text lines).
    """

    def __init__(
        self,
        supervisor: str = "gunicorn",
        *,
        workers: int = 4,
        policy: str = "settle = 0.2\n",
        command: list[str] | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.workers = workers
        self.policy = policy
        # supervisord's program instead of gunicorn; {port}, {socket}, {checkout} filled in.
        self.command = command
        self.dir = Path(tempfile.mkdtemp(prefix="sw-lab-", dir="/tmp"))
        self.checkout = self.dir / "checkout"
        self.socket = self.dir / "d.sock"
        self.port = free_port()
        self.lines: list[Line] = []
        self._queue: queue.SimpleQueue[Line] = queue.SimpleQueue()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._follower: threading.Thread | None = None
        self._drainer: threading.Thread | None = None
        self._notify: socket.socket | None = None
        self._closing = threading.Event()
        self._follow_sock: socket.socket | None = None
        self._bin = Path(sys.executable).parent

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> Lab:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self.checkout.mkdir()
        git(self.checkout, "init", "-q", "-b", "main")
        (self.checkout / "app.py").write_text(APP)
        git(self.checkout, "add", "app.py")
        git(self.checkout, "commit", "-q", "-m", "app")
        self._start_daemon()
        self._follow()
        self._start_server()
        self.wait_for_processes(self.head(), self.workers)

    def close(self) -> None:
        self._closing.set()
        if self._follow_sock is not None:
            with contextlib.suppress(OSError):
                self._follow_sock.shutdown(socket.SHUT_RDWR)
        for proc in reversed(self._procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
        for thread in (self._follower, self._drainer):
            if thread is not None:
                thread.join(timeout=10)
        if self._notify is not None:
            self._notify.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _spawn(self, argv: list[str], log: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with (self.dir / log).open("wb") as out:
            proc = subprocess.Popen(
                argv,
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env={**os.environ, **(env or {})},
                start_new_session=True,  # its own group: stopped whole at exit
            )
        self._procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        path = self.dir / name
        return path.read_text(errors="replace") if path.exists() else ""

    # -- the daemon ----------------------------------------------------------------------

    def _start_daemon(self) -> None:
        if self.supervisor == "gunicorn":
            action = f'pidfile = "{self.dir / "gunicorn.pid"}"\nsignal = "HUP"\n'
        else:
            conf = str(self.dir / "supervisord.conf")
            argv = [str(self._bin / "supervisorctl"), "-c", conf, "restart", "web"]
            action = f"action = {json.dumps(argv)}\n"
        config = self.dir / "stalewatch.toml"
        config.write_text(
            f'socket = "{self.socket}"\nlog_level = "info"\n\n[[checkout]]\npath = "{self.checkout}"\n\n'
            f"[checkout.restart]\n{action}confirm_timeout = 30\nmin_interval = 0\n{self.policy}"
        )
        config.chmod(0o600)
        # A stand-in for systemd's notify socket, read for as long as the daemon runs.
        notify = self.dir / "notify"
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._notify.bind(str(notify))
        self._notify.settimeout(WAIT)
        self._spawn(
            [sys.executable, "-m", "stalewatch", "daemon", "--config", str(config)],
            "daemon.log",
            {"NOTIFY_SOCKET": str(notify)},
        )
        deadline = time.monotonic() + WAIT
        while b"READY=1" not in self._notify.recv(4096):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the daemon never got ready:\n{self.log('daemon.log')}")
        self._notify.settimeout(0.5)

        def drain() -> None:
            while not self._closing.is_set():
                with contextlib.suppress(TimeoutError):
                    self._notify.recv(4096)

        self._drainer = threading.Thread(target=drain, name="lab-notify", daemon=True)
        self._drainer.start()

    def _follow(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(self.socket))
        self._follow_sock = sock

        def run() -> None:
            buffer = b""
            with sock:
                while data := sock.recv(65536):
                    buffer += data
                    *lines, buffer = buffer.split(b"\n")
                    for raw in lines:
                        line = Line(time.time(), json.loads(raw))
                        self.lines.append(line)
                        self._queue.put(line)

        self._follower = threading.Thread(target=run, name="lab-daemon-follower", daemon=True)
        self._follower.start()

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = WAIT) -> Line:
        """The next daemon line (from now on) matching ``predicate``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(
                    f"no matching daemon line in {timeout} s; log:\n{self.log('daemon.log')}"
                ) from None
            if predicate(line.message):
                return line

    def wait_for_phase(self, *phases: str, timeout: float = WAIT) -> Line:
        return self.wait_for(lambda m: m.get("type") == "restart" and m.get("phase") in phases, timeout)

    def wait_for_processes(self, revision: str, count: int, timeout: float = WAIT) -> None:
        """Until ``count`` processes are registered, all on ``revision`` (a ``processes`` line)."""

        def done(message: dict[str, Any]) -> bool:
            if message.get("type") not in ("processes", "snapshot"):
                return False
            processes = message.get("processes") or []
            return len(processes) == count and all(p.get("revision") == revision for p in processes)

        if not any(done(line.message) for line in self.lines[-5:]):
            self.wait_for(done, timeout)

    # -- the server ----------------------------------------------------------------------

    def _gunicorn(self, workers: int) -> list[str]:
        return [
            str(self._bin / "gunicorn"),
            "--workers", str(workers),
            "--bind", f"127.0.0.1:{self.port}",
            "--chdir", str(self.checkout),
            "--graceful-timeout", "10",
            "--pid", str(self.dir / "gunicorn.pid"),
            "app:app",
        ]  # fmt: skip

    def _start_server(self) -> None:
        env = {"STALEWATCH_SOCKET": str(self.socket), "PYTHONDONTWRITEBYTECODE": "1"}
        if self.supervisor == "gunicorn":
            self._spawn(self._gunicorn(self.workers), "server.log", env)
            return
        conf = self.dir / "supervisord.conf"
        argv = self._gunicorn(self.workers) if self.command is None else self.command
        fields = {"port": self.port, "socket": self.socket, "checkout": self.checkout}
        command = " ".join(part.format(**fields) for part in argv)
        conf.write_text(
            textwrap.dedent(
                f"""\
                [supervisord]
                nodaemon=true
                logfile={self.dir / "supervisord.log"}
                pidfile={self.dir / "supervisord.pid"}
                [unix_http_server]
                file={self.dir / "supervisor.sock"}
                [rpcinterface:supervisor]
                supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
                [supervisorctl]
                serverurl=unix://{self.dir / "supervisor.sock"}
                [program:web]
                command={command}
                environment=STALEWATCH_SOCKET="{self.socket}",PYTHONDONTWRITEBYTECODE="1"
                stopsignal=TERM
                stopwaitsecs=15
                startsecs=0
                autorestart=true
                redirect_stderr=true
                stdout_logfile={self.dir / "server.log"}
                """
            )
        )
        self._spawn([str(self._bin / "supervisord"), "-c", str(conf)], "supervisord.out")

    # -- the checkout --------------------------------------------------------------------

    def head(self) -> str:
        return git(self.checkout, "rev-parse", "HEAD")

    def commit(self, text: str = "change") -> str:
        with (self.checkout / "app.py").open("a") as app:
            app.write(f"# {text}\n")
        git(self.checkout, "commit", "-q", "-am", text)
        return self.head()


def revisions(outcomes: list[Outcome]) -> set[str]:
    return {o.revision for o in outcomes if o.revision}


@contextlib.contextmanager
def lab(supervisor: str, **options: Any) -> Iterator[Lab]:
    with Lab(supervisor, **options) as running:
        yield running
