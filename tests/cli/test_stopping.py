"""SIGTERM and SIGINT stop ``events`` at once: the handler sets a flag and wakes the loop."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.support.daemons import WAIT, short_dir, start_daemon
from tests.support.repos import Repo


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_events_stops_at_once_while_the_daemon_is_silent(git_repo: Repo, stop_signal: int) -> None:
    with short_dir() as workdir:
        config = workdir / "c.toml"
        config.write_text(f"keepalive = 60.0\n[[checkout]]\npath = {json.dumps(str(git_repo.path))}\n")
        config.chmod(0o600)
        with start_daemon(workdir, "--config", str(config)) as daemon:
            tail = subprocess.Popen(
                [sys.executable, "-m", "stalewatch", "events", "--json", "--socket", str(daemon.socket)],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert tail.stdout is not None
                assert '"type":"hello"' in tail.stdout.readline()
                assert '"type":"snapshot"' in tail.stdout.readline()  # then silence: no ping for 60 s
                started = time.monotonic()
                tail.send_signal(stop_signal)
                assert tail.wait(timeout=WAIT) == 0
                assert time.monotonic() - started < 2.0  # woken, not left waiting for a line
            finally:
                tail.kill()
                tail.wait()
                if tail.stdout is not None:
                    tail.stdout.close()
