"""Where the docs' examples run: real repositories and directories standing in for the
paths the examples name, the installed ``stalewatch`` on ``PATH``, and processes that a
test always stops.

The examples are run as written except for these substitutions, applied to their text:
the system paths they name (``/path/to/checkout``, ``/srv/app``, ``/run/stalewatch``,
``/tmp/stalewatch-demo.sock``, ...) become directories of a throwaway tree under
``/tmp`` (short: a Unix socket path holds 107 bytes), and fixed TCP ports become free
ones, so that parallel runs do not collide.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.daemons import LineReader
from tests.support.repos import GIT_ENV, Repo, make_agent, make_repo

WAIT = 20.0
BIN = Path(sys.executable).parent  # the environment's `stalewatch` and `python`
NOBODY = 65534
_LONG_RUNNING = ("stalewatch watch", "stalewatch events", "stalewatch daemon", "python scripts/example_")


def commit_file(repo: Repo, name: str, text: str) -> None:
    repo.write(name, text)
    repo.git("add", name)
    repo.git("commit", "-q", "-m", f"add {name}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Sandbox:
    """A throwaway tree holding every path the examples name."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="sw-doc-", dir="/tmp"))
        self.checkout = make_repo(self.root / "checkout")
        commit_file(self.checkout, "run_agent.py", "class AIAgent:\n    pass\n")
        self.app = make_repo(self.root / "srv" / "app")
        self.agent = make_agent(self.root / "srv" / "hermes-agent")
        self.home = self.root / "home"
        for folder in ("run/stalewatch", "run/app", "etc/stalewatch", "textfile", "home", "bin"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.user: int | None = None
        self.processes: list[Background] = []

    def substitutions(self) -> list[tuple[str, str]]:
        r = self.root
        return [
            ("/tmp/stalewatch-demo.sock", f"{r}/demo.sock"),
            ("/run/stalewatch/stalewatch.sock", f"{r}/run/stalewatch/stalewatch.sock"),
            ("/run/stalewatch", f"{r}/run/stalewatch"),
            ("/run/app", f"{r}/run/app"),
            ("/etc/stalewatch", f"{r}/etc/stalewatch"),
            ("/srv/hermes-agent", f"{r}/srv/hermes-agent"),
            ("/srv/app", f"{r}/srv/app"),
            ("/path/to/checkout", f"{r}/checkout"),
            ("/var/lib/node_exporter/textfile_collector", f"{r}/textfile"),
            ("127.0.0.1:9840", "127.0.0.1:0"),  # port 0: any free port (a documented setting)
            ("--port 8000", "--port 0"),  # the example servers print the port they got
            ("127.0.0.1:8000", f"127.0.0.1:{self.port}"),
            ('"127.0.0.1", 8000', f'"127.0.0.1", {self.port}'),
            ("start_http_server(9841)", f"start_http_server({self.port})"),
        ]

    def sub(self, text: str) -> str:
        """``text`` with every substitution made in one pass (a replaced path is never
        matched again by a shorter one)."""
        table = dict(self.substitutions())
        pattern = "|".join(re.escape(old) for old in sorted(table, key=len, reverse=True))
        return re.sub(pattern, lambda m: table[m.group(0)], text)

    def as_normal_user(self) -> bool:
        """Run this sandbox's commands as an unprivileged user: ``nobody`` when the tests
        run as root, else the user the tests run as (already unprivileged). Returns
        whether they run unprivileged: not when root's interpreter is out of other users'
        reach (a Python under /root, as pyenv installs it here), and then they run as root.
        """
        if os.geteuid() != 0:
            return True
        if not _reachable_by_others(Path(sys.executable).resolve()):
            return False
        for path in [self.root, *self.root.rglob("*")]:
            os.lchown(path, NOBODY, NOBODY)
        self.user = NOBODY
        return True

    def env(self, **extra: str) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("STALEWATCH_", "HERMES_", "XDG_"))}
        keep.pop("NOTIFY_SOCKET", None)
        keep.pop("JOURNAL_STREAM", None)
        return {
            **keep,
            **GIT_ENV,
            "HOME": str(self.home),
            "PATH": f"{self.root / 'bin'}:{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "PYTHONDONTWRITEBYTECODE": "1",
            **extra,
        }

    def _user_kwargs(self) -> dict[str, Any]:
        return {} if self.user is None else {"user": self.user, "group": self.user, "extra_groups": []}

    def run(self, command: str, cwd: Path | None = None, **env: str) -> str:
        """Run one shell command as written; its stdout. Fails on a non-zero exit."""
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd or self.root,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=WAIT * 3,
            check=False,
            **self._user_kwargs(),
        )
        assert done.returncode == 0, f"{command!r} exited {done.returncode}: {done.stderr}"
        return done.stdout

    def python(self, code: str, cwd: Path | None = None, **env: str) -> str:
        """Run Python code in a fresh interpreter of this environment; its stdout."""
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=cwd or self.root,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=WAIT * 3,
            check=False,
            **self._user_kwargs(),
        )
        assert done.returncode == 0, f"exited {done.returncode}:\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        return done.stdout

    def start(self, command: str, cwd: Path | None = None, **env: str) -> Background:
        """Start a long-running command in a session of its own (a terminal of its own)."""
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=cwd or self.root,
            env=self.env(**env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            **self._user_kwargs(),
        )
        background = Background(command, proc)
        self.processes.append(background)
        return background

    def close(self) -> None:
        for background in self.processes:
            background.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def _reachable_by_others(executable: Path) -> bool:
    """Whether a user other than its owner may run ``executable`` (o+x all the way down)."""
    return all(part.stat().st_mode & 0o001 for part in [*executable.parents, executable])


def long_running(command: str) -> bool:
    return command.startswith(_LONG_RUNNING)


class Background:
    """A command running in its own process group, read line by line with timeouts."""

    def __init__(self, command: str, proc: subprocess.Popen[bytes]) -> None:
        self.command = command
        self.proc = proc
        self.out = LineReader(proc.stdout)
        self.first = ""  # its first line, once a caller waited for it

    def line(self, timeout: float = WAIT) -> str:
        try:
            return self.out.line(timeout)
        except AssertionError as exc:
            raise AssertionError(f"{self.command}: {exc}; stderr: {self.stderr()}") from None

    def line_starting(self, prefix: str, timeout: float = WAIT) -> str:
        """The next line starting with ``prefix`` (earlier lines are skipped)."""
        deadline = time.monotonic() + timeout
        while not (line := self.line(max(0.0, deadline - time.monotonic()))).startswith(prefix):
            pass
        return line

    def stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return "(running)"
        return self.proc.stderr.read().decode(errors="replace")

    def interrupt(self, signum: int = signal.SIGINT) -> int:
        """Send ``signum`` to the process group (Ctrl-C: SIGINT); its exit status."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signum)
        return self.proc.wait(timeout=WAIT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=WAIT)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def wait_for_port(port: int, server: Background) -> None:
    """Until ``port`` accepts on loopback; fails at once if the server exited."""
    deadline = time.monotonic() + WAIT
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"{server.command}: port {port} never accepted")
        try:  # waits on the process (a bounded wait that ends early if it exits)
            server.proc.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            continue
        raise AssertionError(f"{server.command} exited {server.proc.returncode}: {server.stderr()}")
