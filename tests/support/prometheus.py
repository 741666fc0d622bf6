"""A real Prometheus server for the tests (Debian's ``prometheus`` package), queried over its API."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["INSTALL", "PROMETHEUS", "PROMTOOL", "SCRAPE_INTERVAL", "Prometheus", "free_port", "prometheus"]

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
INSTALL = "apt-get install prometheus (Debian's package has prometheus and promtool; .ci/run installs it)"
SCRAPE_INTERVAL = 2.0  # seconds: two intervals leave room for one scrape lost to a loaded machine


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Prometheus:
    """A Prometheus server process, queried over its HTTP API."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc = proc
        self.port = port
        self.log = log

    def get(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())

    def query(self, promql: str) -> list[dict[str, Any]]:
        answer = self.get("/api/v1/query", query=promql)
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def wait_for(self, promql: str, timeout: float) -> tuple[list[dict[str, Any]], float]:
        """Query until the result is not empty; return it and when it was first seen.

        Each try is a real query; the deadline bounds the wait (Prometheus scrapes on
        its own schedule, which no socket of ours announces).
        """
        deadline = time.monotonic() + timeout
        pause = threading.Event()
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited {self.proc.returncode}:\n{self.log.read_text()}")
            result = self.query(promql)
            if result:
                return result, time.time()
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"{promql!r} still empty after {timeout} s:\n{self.log.read_text()[-3000:]}"
                )
            pause.wait(0.05)  # between two queries, not instead of a condition


@contextmanager
def prometheus(workdir: Path, target: str, job: str = "stalewatch") -> Iterator[Prometheus]:
    """Prometheus scraping ``target`` as ``job`` every SCRAPE_INTERVAL; killed by its pid at the end."""
    assert PROMETHEUS is not None
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {SCRAPE_INTERVAL:g}s\n"
        f"  scrape_timeout: {SCRAPE_INTERVAL:g}s\n"
        "scrape_configs:\n"
        f"  - job_name: {job}\n"
        "    static_configs:\n"
        f"      - targets: ['{target}']\n"
    )
    log = workdir / "prometheus.log"
    for _ in range(3):  # a free port may be taken between the probe and Prometheus' bind
        port = free_port()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        server = Prometheus(proc, port, log)
        try:
            if _wait_ready(server):
                yield server
                return
        finally:
            proc.kill()  # by its pid; Prometheus holds no state we need
            proc.wait(timeout=30)
    raise AssertionError(f"prometheus never became ready:\n{log.read_text()[-3000:]}")


def _wait_ready(server: Prometheus, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            return False  # e.g. its port was taken: the caller tries another
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/-/ready", timeout=5) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        pause.wait(0.05)
    return False
