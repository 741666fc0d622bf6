"""The runnable examples in scripts/: started as real processes, driven over HTTP."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.repos import Repo
from tests.support.web import SSEReader, request

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.mark.parametrize(
    "name",
    ["example_wsgi.py", pytest.param("example_asgi.py", marks=pytest.mark.real_server)],  # uvicorn
)
def test_example_serves_a_page_a_barrier_and_events(name: str, git_repo: Repo) -> None:
    with subprocess.Popen(
        [sys.executable, str(SCRIPTS / name), str(git_repo.path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        reader = None
        try:
            line = proc.stdout.readline()
            assert line.startswith("serving "), proc.stderr.read() if proc.stderr else line
            port = int(line.rsplit(":", 1)[1].strip().rstrip("/"))
            status, _, body = request(port, "GET", "/")
            assert status == 200
            assert b"EventSource" in body
            assert request(port, "POST", "/api/chat", b"hello")[0] == 200

            reader = SSEReader(port)
            assert reader.message()["event"] == "current"
            git_repo.commit("update")
            assert reader.message()["event"] == "stale"
            status, _, body = request(port, "POST", "/api/chat", b"hello")
            assert status == 409
            assert b'"retryable": false' in body  # no daemon: nothing restarts it

            # Stopping with a stream still open ends the stream and the process.
            proc.send_signal(signal.SIGINT)
            with pytest.raises(EOFError):
                reader.block()
            assert proc.wait(timeout=20) == 0
            assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")
        finally:
            if reader is not None:
                reader.close()
            if proc.poll() is None:
                proc.kill()
