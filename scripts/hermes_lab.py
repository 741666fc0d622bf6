"""A lab for the real Hermes WebUI: its server under supervisord, a fake Agent, a daemon.

Used by ``scripts/check_hermes_server.py``. One lab is one scenario, under one
directory; the WebUI checkout is a copy made once per run (the user's is never
touched). Layout, as a Hermes user has it (the WebUI finds the Agent beside itself,
HOME is empty)::

    RUN/srv/hermes-webui   the copy of the WebUI checkout (shared by every lab of a run)
    RUN/srv/hermes-agent   the Agent checkout: a clone of LAB/upstream
    LAB/upstream           the "upstream" the Agent is pulled from (commits land here)
    LAB/home               HOME (the WebUI's state in ~/.hermes/webui, the update marker)
    LAB/supervisord.conf   the WebUI's program, as the WebUI's docs/supervisor.md shows it
    LAB/stalewatch.toml    the daemon's restart policy

Everything observed (daemon lines, HTTP replies, SSE events, the fake Agent's held
turns) is posted on one :class:`Board` with the time it arrived; a scenario waits on
the board for what it expects, never on a timer. Every process started here is in a
process group of its own and is stopped by its pid once it is checked to be still the
process we started (its start time in ``/proc``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitrepo import git
from hermes_client import Board, Hold, health

WAIT = 30.0
PROGRAM = "hermes-webui"
UPDATE_MARKER = ".hermes-update-in-progress"  # in Hermes' home: PID\nUNIX_TIME\n
RECOVERY_MARKERS = (".update-incomplete", ".lazy-refresh-incomplete")  # in the Agent checkout
HOLD_WORD = "hold-this-turn"

AGENT = '''\
"""A fake Hermes Agent for scripts/check_hermes_server.py: no LLM, turns held on demand."""
{broken}import json
import os
import socket

LABEL = {label!r}


class AIAgent:
    def __init__(self, **kwargs):
        self.stream_delta_callback = kwargs.get("stream_delta_callback")
        self.session_id = kwargs.get("session_id")

    def run_conversation(self, user_message=None, conversation_history=None, **kwargs):
        text = user_message if isinstance(user_message, str) else json.dumps(user_message)
        say = self.stream_delta_callback or (lambda _text: None)
        if {hold!r} in text:
            _hold(say, kwargs.get("task_id"))
        answer = "answer from " + LABEL
        say(answer)
        messages = [*(conversation_history or []), {{"role": "user", "content": text}},
                    {{"role": "assistant", "content": answer}}]
        return {{"final_response": answer, "messages": messages}}


def _hold(say, task):
    # The harness decides when this turn ends: it answers on its socket (no timer).
    # Should the harness go away, the connection closes and the turn ends too.
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(os.environ["HERMES_LAB_HOLD_SOCKET"])
        hello = {{"pid": os.getpid(), "label": LABEL, "task": task}}
        conn.sendall((json.dumps(hello) + "\\n").encode())
        say("held ")
        conn.recv(64)
'''


def agent_source(label: str, *, broken: bool = False) -> str:
    """The fake Agent's ``run_agent.py``; ``broken``: it does not import (a missing dependency)."""
    raise_line = 'raise ImportError("fake Agent: a dependency is missing")\n' if broken else ""
    return AGENT.format(label=label, hold=HOLD_WORD, broken=raise_line)


# -- processes we own ------------------------------------------------------------------


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot); None once it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[19])


def children(ppid: int) -> list[int]:
    """The pids whose parent is ``ppid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == ppid:
                    found.append(int(entry.name))
    return found


@dataclass(frozen=True)
class Owned:
    """A process we started (or our supervisord did), known by pid and start time."""

    pid: int
    start: int
    name: str

    @classmethod
    def of(cls, pid: int, name: str) -> Owned | None:
        start = start_time(pid)
        return cls(pid, start, name) if start is not None else None

    def alive(self) -> bool:
        return start_time(self.pid) == self.start  # pids wrap: the same pid is not enough

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM its process group (each of ours leads one), then SIGKILL; only if still ours."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self.alive():
                return
            try:
                os.killpg(self.pid, sig)  # a group we created, or supervisord's child's own
            except ProcessLookupError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, sig)  # not a group leader after all: the process alone
            deadline = time.monotonic() + timeout
            while self.alive() and time.monotonic() < deadline:
                wait_for_exit(self.pid, deadline - time.monotonic())


def wait_for_exit(pid: int, timeout: float) -> None:
    """Wait (pidfd, no polling) for ``pid`` to exit, at most ``timeout`` seconds."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        import select

        select.select([fd], [], [], max(0.0, timeout))
    finally:
        os.close(fd)


@dataclass
class Policy:
    """The daemon's restart policy: what ``stalewatch hermes setup`` writes, through supervisord."""

    settle: float = 2.0
    confirm_timeout: float = 30.0
    extra: dict[str, Any] = field(default_factory=dict)


class Lab:
    """One scenario's world. A context manager: everything is stopped and removed at exit.

    Args:
        run: the run's directory (holds ``srv/hermes-webui``, the WebUI copy).
        name: the scenario's name (its directory under ``run``).
        python: the Python running the WebUI (and the Agent's verify probe).
        board: where everything observed is posted.
        keep: keep the scenario's directory (logs, repositories) at exit.
    """

    def __init__(self, run: Path, name: str, python: str, board: Board, *, keep: bool = False) -> None:
        self.run, self.name, self.python, self.board, self.keep = run, name, python, board, keep
        self.dir = run / name
        self.webui = run / "srv" / "hermes-webui"
        self.agent = run / "srv" / "hermes-agent"
        self.upstream = self.dir / "upstream"
        self.home = self.dir / "home"
        self.hermes_home = self.home / ".hermes"
        self.socket = self.dir / "d.sock"
        self.conf = self.dir / "supervisord.conf"
        self.port = free_port()
        self.bin = Path(sys.executable).parent
        self.hold = Hold(self.dir / "hold.sock", board)
        self._procs: list[tuple[subprocess.Popen[bytes], Owned]] = []
        self.webui_pids: list[Owned] = []  # every WebUI process seen, for the reports and the cleanup
        self._daemon: Owned | None = None
        self._supervisord: Owned | None = None
        self._follower: threading.Thread | None = None
        self._follow_sock: socket.socket | None = None
        self._closers: list[Callable[[], None]] = []
        self.startup = 0.0  # seconds from supervisord's start to the WebUI's first /health 200
        self._pace = threading.Event()  # never set: a pause between two probes

    def __enter__(self) -> Lab:
        self.dir.mkdir(parents=True)
        self.home.mkdir()
        self.hold.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def on_close(self, closer: Callable[[], None]) -> None:
        """Run ``closer`` first at close (load loops, turns: before their server goes)."""
        self._closers.append(closer)

    def close(self) -> None:
        for closer in reversed(self._closers):
            closer()
        for proc, owned in reversed(self._procs):
            owned.stop()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=WAIT)
        for owned in self.webui_pids:  # supervisord stopped them; a survivor is stopped here
            owned.stop()
        if self._follow_sock is not None:
            with contextlib.suppress(OSError):
                self._follow_sock.shutdown(socket.SHUT_RDWR)
        if self._follower is not None:
            self._follower.join(timeout=WAIT)
        self.hold.close()
        if self.keep:  # everything observed, for a post-mortem
            with (self.dir / "board.jsonl").open("w") as out:
                for seen in self.board.seen:
                    out.write(json.dumps({"at": seen.at, "kind": seen.kind, **seen.data}, default=str) + "\n")
            if self.agent.exists():
                self.agent.rename(self.dir / "hermes-agent")
        else:
            shutil.rmtree(self.agent, ignore_errors=True)
            shutil.rmtree(self.dir, ignore_errors=True)

    def spawn(self, argv: list[str], log: str, env: dict[str, str] | None = None) -> Owned:
        with (self.dir / log).open("wb") as out:
            proc = subprocess.Popen(
                argv,
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env={**os.environ, **(env or {})},
                start_new_session=True,  # its own group: stopped whole at close
            )
        owned = Owned.of(proc.pid, argv[0]) or Owned(proc.pid, -1, argv[0])
        self._procs.append((proc, owned))
        return owned

    def log(self, name: str, tail: int = 4000) -> str:
        path = self.dir / name
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def starts(self) -> int:
        """How many times the WebUI's server started (its banner), re-execs included."""
        path = self.dir / "hermes-webui.out.log"
        return (
            path.read_text(errors="replace").count("Hermes Web UI -- startup config") if path.exists() else 0
        )

    # -- the Agent ---------------------------------------------------------------------

    def make_agent(self, label: str) -> str:
        """The upstream repository with the fake Agent, and the checkout cloned from it."""
        self.upstream.mkdir()
        git(self.upstream, "init", "-q", "-b", "main")
        (self.upstream / "run_agent.py").write_text(agent_source(label))
        git(self.upstream, "add", "run_agent.py")
        git(self.upstream, "commit", "-q", "-m", f"Agent {label}")
        shutil.rmtree(self.agent, ignore_errors=True)
        git(self.run, "clone", "-q", str(self.upstream), str(self.agent))
        return git(self.agent, "rev-parse", "HEAD")

    def publish(self, label: str, *, broken: bool = False) -> str:
        """A new Agent commit upstream (not pulled yet); its revision."""
        (self.upstream / "run_agent.py").write_text(agent_source(label, broken=broken))
        git(self.upstream, "commit", "-q", "-am", f"Agent {label}")
        return git(self.upstream, "rev-parse", "HEAD")

    def head(self) -> str:
        return git(self.agent, "rev-parse", "HEAD")

    def hermes_update(self, *, complete: bool = True) -> dict[str, float]:
        """``hermes update`` in the order the Agent's updater takes; the time of each step.

        PID marker, ``git pull``, ``.update-incomplete``, dependency install (nothing to
        install here), ``.lazy-refresh-incomplete``, clear both, remove the marker.
        ``complete=False``: the updater dies after the dependency install, leaving
        ``.update-incomplete`` behind (and no marker naming a live process).
        """
        marker = self.hermes_home / UPDATE_MARKER
        self.hermes_home.mkdir(parents=True, exist_ok=True)
        steps = {"start": time.time()}
        marker.write_text(f"{os.getpid()}\n{time.time()}\n")  # this process is the updater
        git(self.agent, "pull", "-q", "--ff-only")
        steps["pulled"] = time.time()
        (self.agent / RECOVERY_MARKERS[0]).write_text("update in progress\n")
        steps["dependencies"] = time.time()
        if not complete:
            marker.unlink()
            steps["end"] = time.time()
            return steps
        (self.agent / RECOVERY_MARKERS[1]).write_text("lazy refresh in progress\n")
        for name in RECOVERY_MARKERS:
            (self.agent / name).unlink()
        marker.unlink()
        steps["end"] = time.time()
        return steps

    # -- the daemon --------------------------------------------------------------------

    def start_daemon(self, policy: Policy) -> None:
        """``stalewatch daemon`` with the Hermes restart policy; returns once it is ready."""
        restart = {
            "action": [str(self.bin / "supervisorctl"), "-c", str(self.conf), "restart", PROGRAM],
            "settle": policy.settle,
            "update_marker": str(self.hermes_home / UPDATE_MARKER),
            "update_marker_max_age": 1200,
            "incomplete_markers": [str(self.agent / name) for name in RECOVERY_MARKERS],
            "verify": [self.python, "-c", "import run_agent"],
            "verify_timeout": 120,
            "confirm_timeout": policy.confirm_timeout,
            "action_timeout": 120,
            **policy.extra,
        }
        config = self.dir / "stalewatch.toml"
        config.write_text(
            f'socket = {json.dumps(str(self.socket))}\nlog_level = "info"\n\n[[checkout]]\n'
            f"path = {json.dumps(str(self.agent))}\n\n[checkout.restart]\n"
            + "".join(f"{key} = {json.dumps(value)}\n" for key, value in restart.items())
        )
        config.chmod(0o600)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # systemd's READY=1, stood in for
        notify.bind(str(self.dir / "notify"))
        notify.settimeout(WAIT)
        self._daemon = self.spawn(
            [sys.executable, "-m", "stalewatch", "daemon", "--config", str(config)],
            "daemon.log",
            {"NOTIFY_SOCKET": str(self.dir / "notify")},
        )
        try:
            while b"READY=1" not in notify.recv(4096):
                pass
        except TimeoutError:
            raise RuntimeError(f"the daemon never got ready:\n{self.log('daemon.log')}") from None
        finally:
            notify.close()  # later notifications fail on the daemon's side, harmlessly
        self._follow()

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
                        self.board.post("daemon", **json.loads(raw))

        self._follower = threading.Thread(target=run, name="lab-daemon-follower", daemon=True)
        self._follower.start()

    def status(self, *, as_json: bool = True) -> str:
        """``stalewatch status [--json] --socket S``: the daemon's snapshot line of the checkout."""
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "stalewatch",
                "status",
                *(["--json"] if as_json else []),
                "--socket",
                str(self.socket),
            ],
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )
        return (done.stdout or done.stderr).strip()

    def snapshot(self) -> dict[str, Any]:
        """The checkout's snapshot from ``status --json`` (``{}`` when the daemon does not answer)."""
        for line in self.status().splitlines():
            with contextlib.suppress(ValueError):
                found = json.loads(line)
                if isinstance(found, dict):
                    return found
        return {}

    # -- the WebUI under supervisord ---------------------------------------------------

    def start_webui(self) -> None:
        """supervisord running the WebUI's own ``start.sh --foreground``; returns once it answers."""
        env = {
            "HOME": str(self.home),
            "PATH": f"{Path(self.python).parent}:/usr/local/bin:/usr/bin:/bin",
            "HERMES_WEBUI_PORT": str(self.port),
            "HERMES_WEBUI_PYTHON": self.python,
            "STALEWATCH_SOCKET": str(self.socket),
            "HERMES_LAB_HOLD_SOCKET": str(self.hold.path),
        }
        environment = ",".join(f'{key}="{value}"' for key, value in env.items())
        # The program block of the WebUI's docs/supervisor.md; paths, port and the
        # lab's variables are ours, and no `user=` (we run as whoever runs this).
        self.conf.write_text(
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
                [program:{PROGRAM}]
                command=/bin/bash {self.webui / "start.sh"} --foreground
                directory={self.webui}
                autostart=true
                autorestart=true
                stopsignal=TERM
                stopwaitsecs=10
                stdout_logfile={self.dir / "hermes-webui.out.log"}
                stderr_logfile={self.dir / "hermes-webui.err.log"}
                environment={environment}
                """
            )
        )
        begun = time.monotonic()
        self._supervisord = self.spawn(
            [str(self.bin / "supervisord"), "-c", str(self.conf)], "supervisord.out"
        )
        if not self.wait_until_serving(WAIT):
            raise RuntimeError(f"the WebUI never answered /health:\n{self.log('hermes-webui.out.log')}")
        self.startup = time.monotonic() - begun

    def wait_until_serving(self, timeout: float) -> bool:
        """Until /health answers 200 (a readiness probe, paced by the board's clock)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if health(self.port) is not None:
                self.webui_pid()
                return True
            self._pace.wait(0.05)  # a readiness probe: asked again soon, up to the deadline
        return False

    def webui_pid(self) -> Owned | None:
        """The WebUI's process under supervisord now (start.sh execs into server.py)."""
        if self._supervisord is None:
            return None
        for pid in children(self._supervisord.pid):
            owned = Owned.of(pid, PROGRAM)
            if owned is not None:
                if owned not in self.webui_pids:
                    self.webui_pids.append(owned)
                return owned
        return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
