"""A lab for automatic restarts: a checkout with a WSGI app, a daemon, a real supervisor, load.

Used by ``scripts/bench_restart.py`` and by the end-to-end tests. Everything runs on
loopback under one temporary directory; every process group is stopped at exit.

- ``Lab.start()`` makes a git checkout holding ``app.py`` (a WSGI app guarded by a
  stalewatch guard fed by the daemon: it registers its loaded revision, counts each
  guarded request as work in flight, answers ``/api/*`` with 409 once stale, and
  reports the revision and pid it loaded), starts ``stalewatch daemon`` with a restart
  policy, then the server under its supervisor:

  - ``gunicorn``: ``gunicorn -w N``, restarted by HUP to the master (its pid file);
  - ``gunicorn-handoff``: the same, restarted by the USR2 handoff (``handoff = true``):
    a new master beside the old, the old retired once the new workers registered;
  - ``supervisord``: supervisord running gunicorn, ``supervisorctl restart web``;
  - ``supervisord-hup``: supervisord running gunicorn, restarted by HUP to its master
    (the master supervisord knows stays);
  - ``supervisord-handoff``: supervisord running gunicorn with the USR2 handoff (which
    the daemon refuses under supervisord: see docs/deployment.md).

  ``defaults=True`` writes the recipe as the docs give it (``min_interval`` 30 s, a
  confirm timeout of 60 s...); otherwise the lab's quick settings (``min_interval`` 0).
- Routes: ``/api/work`` (guarded), ``/api/slow?S`` (guarded, S seconds), ``/api/hold``
  (guarded, held until ``lab.gate.release()``), ``/slow?S`` and ``/hold`` (the same, not
  guarded: work the restart cannot see, such as a long download).
- ``Lab.lines`` keeps every daemon line with the time it arrived; ``Lab.wait_for(...)``
  waits for one, never sleeping blindly. ``Load`` (``scripts/lab_load.py``) keeps a few
  threads sending requests and records each outcome.
"""

from __future__ import annotations

import contextlib
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitrepo import git
from lab_load import WAIT, Gate, Load, Outcome, free_port, stop_group

__all__ = ["APP", "WAIT", "Gate", "Lab", "Line", "Load", "Outcome", "free_port", "lab", "revisions"]

APP = '''\
"""A WSGI app guarded by stalewatch, fed by the daemon (written by scripts/restart_lab.py)."""
import json
import os
import socket
import time

from stalewatch import Daemon, Guard
from stalewatch.web import WSGIBarrier

guard = Guard.for_file(__file__, source=Daemon(os.environ["STALEWATCH_SOCKET"]))
guard.start()


def inner(environ, start_response):
    path = environ["PATH_INFO"]
    if path in ("/slow", "/api/slow"):
        time.sleep(float(environ.get("QUERY_STRING") or "0.2"))
    elif path in ("/api/hold", "/hold"):  # in flight until the lab releases it
        with socket.socket(socket.AF_UNIX) as gate:
            gate.connect(os.environ["GATE"])
            gate.recv(1)
    body = json.dumps({"revision": guard.loaded_revision, "pid": os.getpid()}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


app = WSGIBarrier(inner, guard, routes=["/api"])
# changes:
'''

# gunicorn's hook in a new master (USR2): it waits while the lab holds the handoff, so a
# test can land a commit between the signal and the new workers' import.
GUNICORN_CONF = """\
import os, socket

def on_starting(server):
    hold = os.environ.get("HANDOFF_HOLD", "")
    if "GUNICORN_PID" in os.environ and hold and os.path.exists(hold):
        with socket.socket(socket.AF_UNIX) as gate:
            gate.connect(os.environ["HANDOFF_GATE"])
            gate.recv(1)
"""

QUICK = "confirm_timeout = 30\nmin_interval = 0\n"
"""The lab's quick settings; ``defaults=True`` leaves the recipe's defaults instead."""


# What a supervisor puts in its programs' environment: never passed on from whatever
# runs the lab (a CI job under systemd), or the daemon would take a bare gunicorn for a
# supervised one (server/restart/actions/handoff.py, supervised).
_SUPERVISOR_MARKS = ("SUPERVISOR_", "NOTIFY_SOCKET", "MAINPID", "INVOCATION_ID", "LISTEN_")


def _unsupervised(env: os._Environ[str] | dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items() if not key.startswith(_SUPERVISOR_MARKS)}


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@dataclass
class Line:
    """One line from the daemon and when it arrived (``time.time()``)."""

    at: float
    message: dict[str, Any]


class Lab:
    """See the module doc. Use as a context manager: everything stops at exit.

    Args:
        supervisor: ``gunicorn``, ``gunicorn-handoff``, ``supervisord``, ``supervisord-hup``
            or ``supervisord-handoff``.
        workers: gunicorn workers.
        policy: extra keys for the ``[checkout.restart]`` table (TOML text lines).
        command: supervisord's program instead of gunicorn; {port}, {socket},
            {checkout} filled in.
        defaults: the recipe as written, without the lab's quick settings.
        threads: gunicorn threads per worker (``gthread`` when above 1).
    """

    def __init__(
        self,
        supervisor: str = "gunicorn",
        *,
        workers: int = 4,
        policy: str = "settle = 0.2\n",
        command: list[str] | None = None,
        defaults: bool = False,
        threads: int = 1,
    ) -> None:
        self.supervisor = supervisor
        self.workers = workers
        self.policy = policy
        self.command = command
        self.defaults = defaults
        self.threads = threads
        self.dir = Path(tempfile.mkdtemp(prefix="sw-lab-", dir="/tmp"))
        self.checkout = self.dir / "checkout"
        self.socket = self.dir / "d.sock"
        self.pidfile = self.dir / "gunicorn.pid"
        self.port = free_port()
        self.lines: list[Line] = []
        self.gate = Gate(self.dir / "gate.sock")  # held requests
        self.handoff_gate = Gate(self.dir / "handoff.sock")  # a held new master
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
        self.gate.release()
        self.handoff_gate.release()
        if self._follow_sock is not None:
            with contextlib.suppress(OSError):
                self._follow_sock.shutdown(socket.SHUT_RDWR)
        for proc in reversed(self._procs):
            stop_group(proc.pid, timeout=10)  # its own session: the whole group, new masters too
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        # A master nobody supervises any more (a handoff under supervisord, which puts
        # each program in a group of its own) outlives those groups: its own group goes.
        groups = {group for pid in self._gunicorns() if (group := _group(pid)) is not None}
        for pgid in groups - {os.getpgrp()}:
            stop_group(pgid, timeout=10)
        for thread in (self._follower, self._drainer):
            if thread is not None:
                thread.join(timeout=10)
        if self._notify is not None:
            self._notify.close()
        self.gate.close()
        self.handoff_gate.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _spawn(self, argv: list[str], log: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with (self.dir / log).open("wb") as out:
            proc = subprocess.Popen(
                argv,
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env={**_unsupervised(os.environ), **(env or {})},
                start_new_session=True,  # its own group: stopped whole at exit
            )
        self._procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        path = self.dir / name
        return path.read_text(errors="replace") if path.exists() else ""

    # -- the daemon ----------------------------------------------------------------------

    def recipe(self) -> str:
        """The ``[checkout.restart]`` keys that restart this lab's server (the docs' recipe)."""
        if self.supervisor in ("gunicorn", "supervisord-hup"):
            return f'pidfile = "{self.pidfile}"\nsignal = "HUP"\n'
        if self.supervisor in ("gunicorn-handoff", "supervisord-handoff"):
            return f'pidfile = "{self.pidfile}"\nsignal = "USR2"\nhandoff = true\n'
        conf = str(self.dir / "supervisord.conf")
        argv = [str(self._bin / "supervisorctl"), "-c", conf, "restart", "web"]
        return f"action = {json.dumps(argv)}\n"

    def write_config(self, policy: str | None = None) -> Path:
        """Write the daemon's configuration (``policy``: replaces the extra keys); its path."""
        if policy is not None:
            self.policy = policy
        config = self.dir / "stalewatch.toml"
        given = {line.split("=")[0].strip() for line in self.policy.splitlines() if "=" in line}
        quick = (
            ""
            if self.defaults
            else "".join(
                line + "\n" for line in QUICK.splitlines() if line.split("=")[0].strip() not in given
            )
        )
        config.write_text(
            f'socket = "{self.socket}"\nlog_level = "info"\nkeepalive = 1\n\n'
            f'[[checkout]]\npath = "{self.checkout}"\n\n'
            f"[checkout.restart]\n{self.recipe()}{quick}{self.policy}"
        )
        config.chmod(0o600)
        return config

    def _start_daemon(self) -> None:
        config = self.write_config()
        # A stand-in for systemd's notify socket, read for as long as the daemon runs.
        notify = self.dir / "notify"
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._notify.bind(str(notify))
        self._notify.settimeout(WAIT)
        self._daemon = self._spawn(
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
                with contextlib.suppress(TimeoutError, OSError):
                    self._notify.recv(4096)  # type: ignore[union-attr]

        self._drainer = threading.Thread(target=drain, name="lab-notify", daemon=True)
        self._drainer.start()

    def reload(self) -> None:
        """SIGHUP the daemon (after :meth:`write_config`): it reloads its configuration."""
        self._daemon.send_signal(signal.SIGHUP)

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

    def wait_for_log(self, text: str, timeout: float = WAIT) -> str:
        """The first line of the daemon's log holding ``text``, looked for at each daemon
        line (a ping every second at least)."""
        found: list[str] = []

        def logged(message: dict[str, Any]) -> bool:
            found[:] = [line for line in self.log("daemon.log").splitlines() if text in line][:1]
            return bool(found)

        if not logged({}):
            self.wait_for(logged, timeout)
        return found[0]

    def wait_for_phase(self, *phases: str, timeout: float = WAIT) -> Line:
        return self.wait_for(lambda m: m.get("type") == "restart" and m.get("phase") in phases, timeout)

    def why(self, line: Line) -> str:
        """A restart line's phase and reason, and the daemon's last log lines: what a
        failed assertion needs to tell a race from a bug."""
        message = line.message
        return f"{message.get('phase')}: {message.get('reason')}\n{self.log('daemon.log')[-4000:]}"

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
        conf = self.dir / "gunicorn_conf.py"
        conf.write_text(GUNICORN_CONF)
        threads = ["--threads", str(self.threads)] if self.threads > 1 else []
        return [
            str(self._bin / "gunicorn"),
            "--config", str(conf),
            "--workers", str(workers),
            *threads,
            "--bind", f"127.0.0.1:{self.port}",
            "--chdir", str(self.checkout),
            "--graceful-timeout", "30",
            "--pid", str(self.pidfile),
            "app:app",
        ]  # fmt: skip

    def _start_server(self) -> None:
        env = {
            "STALEWATCH_SOCKET": str(self.socket),
            "PYTHONDONTWRITEBYTECODE": "1",
            "GATE": str(self.gate.path),
            "HANDOFF_GATE": str(self.handoff_gate.path),
            "HANDOFF_HOLD": str(self.dir / "handoff.hold"),
        }
        if self.supervisor.startswith("gunicorn"):
            self._spawn(self._gunicorn(self.workers), "server.log", env)
            return
        conf = self.dir / "supervisord.conf"
        argv = self._gunicorn(self.workers) if self.command is None else self.command
        fields = {"port": self.port, "socket": self.socket, "checkout": self.checkout}
        command = " ".join(part.format(**fields) for part in argv)
        environment = ",".join(f'{key}="{value}"' for key, value in env.items())
        # supervisorctl restart returns at once; the other kinds keep supervisord's
        # default (1 s: a program that exits sooner is "Exited too quickly", then FATAL).
        startsecs = 0 if self.supervisor == "supervisord" else 1
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
                environment={environment}
                stopsignal=TERM
                stopwaitsecs=30
                startsecs={startsecs}
                autorestart=true
                redirect_stderr=true
                stdout_logfile={self.dir / "server.log"}
                """
            )
        )
        self._spawn([str(self._bin / "supervisord"), "-c", str(conf)], "supervisord.out")

    @contextlib.contextmanager
    def holding_handoff(self) -> Iterator[None]:
        """While inside, a new gunicorn master (``USR2``) waits in its ``on_starting``
        until :attr:`handoff_gate` is released: its workers have not imported yet."""
        flag = self.dir / "handoff.hold"
        flag.touch()
        try:
            yield
        finally:
            flag.unlink(missing_ok=True)
            self.handoff_gate.release()

    def supervisorctl(self, *args: str) -> str:
        """What ``supervisorctl -c <the lab's conf> ARGS`` prints (whatever its exit status)."""
        argv = [str(self._bin / "supervisorctl"), "-c", str(self.dir / "supervisord.conf"), *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT, check=False)
        return done.stdout.strip()

    def masters(self) -> list[int]:
        """The gunicorn masters of this lab running now, whoever started them.

        A process running the lab's gunicorn command line (its ``--pid`` path) with a
        child that runs it too: workers never fork, so a master is the one with children.
        """
        ours = self._gunicorns()
        return sorted({ppid for ppid in ours.values() if ppid in ours})

    def _gunicorns(self) -> dict[int, int]:
        """Every process running this lab's gunicorn (its ``--pid`` path), by pid: its parent."""
        ours: dict[int, int] = {}
        marker = str(self.pidfile).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                if marker in (entry / "cmdline").read_bytes().split(b"\0"):
                    stat = (entry / "stat").read_bytes()
                    ours[int(entry.name)] = int(stat[stat.rfind(b")") + 2 :].split()[1])
        return ours

    def master(self, suffix: str = "") -> int | None:
        """The pid in gunicorn's pid file (``suffix=".2"``: a new master's), if any."""
        path = Path(f"{self.pidfile}{suffix}")
        with contextlib.suppress(OSError, ValueError):
            return int(path.read_text())
        return None

    # -- the checkout --------------------------------------------------------------------

    def head(self) -> str:
        return git(self.checkout, "rev-parse", "HEAD")

    def commit(self, text: str = "change", *, app: str | None = None) -> str:
        """Commit a change to ``app.py`` (``app``: its whole new text, e.g. a broken one)."""
        path = self.checkout / "app.py"
        if app is not None:
            path.write_text(app)
        else:
            with path.open("a") as out:
                out.write(f"# {text}\n")
        git(self.checkout, "commit", "-q", "-am", text)
        return self.head()


def revisions(outcomes: list[Outcome]) -> set[str]:
    return {o.revision for o in outcomes if o.revision}


@contextlib.contextmanager
def lab(supervisor: str, **options: Any) -> Iterator[Lab]:
    with Lab(supervisor, **options) as running:
        yield running
