"""A platform without Unix sockets (Windows): the library works, the daemon refuses to start.

Windows cannot run here. A real ``python`` process stands in for it: before stalewatch is
imported, ``fcntl`` cannot be imported and ``socket`` has no ``AF_UNIX``, the two things
the daemon needs that Windows' Python lacks; the watcher runs through watchdog's observer,
as it does on Windows (there, ReadDirectoryChangesW).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.repos import Repo

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_UNIX = "import socket, sys\nsys.modules['fcntl'] = None\ndel socket.AF_UNIX\n"


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "STALEWATCH_NOTIFIER": "observer"}
    command = [sys.executable, "-c", WITHOUT_UNIX + code, *args]
    return subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=60)


def test_the_daemon_refuses_to_start_without_unix_sockets_saying_why(git_repo: Repo, tmp_path: Path) -> None:
    code = "from stalewatch.cli.run import main\nsys.exit(main(sys.argv[1:]))\n"
    done = _run(code, "daemon", "--socket", str(tmp_path / "sw.sock"), str(git_repo.path))
    assert done.returncode == 2, done.stderr
    assert "the daemon needs AF_UNIX sockets and fcntl" in done.stderr
    assert "guards, barriers and SSE work here" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "sw.sock").exists()


def test_guard_barrier_and_sse_work_without_unix_sockets(git_repo: Repo) -> None:
    code = (
        "import subprocess\n"
        "from stalewatch import Guard\n"
        "from stalewatch.web import WSGIBarrier\n"
        "from stalewatch.sse import EventStream\n"
        "guard = Guard.for_checkout(sys.argv[1]).start()\n"
        "assert guard.wait_ready(10) and guard.snapshot().trusted\n"
        "EventStream(guard)\n"
        "seen = []\n"
        "app = WSGIBarrier(lambda environ, start: start('200 OK', []) or [b'ok'], guard, routes=['/'])\n"
        "def call():\n"
        "    app({'REQUEST_METHOD': 'POST', 'PATH_INFO': '/'}, lambda status, headers: seen.append(status))\n"
        "call()\n"
        "import threading\n"
        "stale = threading.Event()\n"
        "guard.subscribe(lambda event: stale.set() if event.status == 'stale' else None)\n"
        "git = ['git', '-C', sys.argv[1], '-c', 'user.name=t', '-c', 'user.email=t@t']\n"
        "subprocess.run([*git, 'commit', '-q', '--allow-empty', '-m', 'moved'], check=True)\n"
        "assert stale.wait(10)\n"
        "call()\n"
        "guard.stop()\n"
        "print(seen)\n"
    )
    done = _run(code, str(git_repo.path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['200 OK', '409 Conflict']"
