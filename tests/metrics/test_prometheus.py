"""Against a real Prometheus server and promtool (Debian's ``prometheus`` package).

Prometheus scrapes a real daemon on loopback every two seconds; a commit lands; a PromQL
query over Prometheus' HTTP API must show the checkout stale within two scrape
intervals. The example alerting rules pass ``promtool check rules``, and their unit
tests (``promtool test rules``) show the stale-code alert firing. CI installs the
package (``.ci/run``); elsewhere these tests skip, saying how to install it.
"""

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

import pytest

from tests.support.daemons import Subscriber, greet, short_dir, start_daemon
from tests.support.metrics import metrics_url, write_config
from tests.support.repos import Repo

pytestmark = pytest.mark.real_server

RULES = Path(__file__).resolve().parents[2] / "prometheus"
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
INSTALL = "apt-get install prometheus (Debian's package has prometheus and promtool; .ci/run installs it)"
SCRAPE_INTERVAL = 2.0  # seconds: two intervals leave room for one scrape lost to a loaded machine


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def _free_port() -> int:
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
def prometheus(workdir: Path, target: str) -> Iterator[Prometheus]:
    """Run Prometheus scraping ``target`` every SCRAPE_INTERVAL; kill it by its pid at the end."""
    assert PROMETHEUS is not None
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {SCRAPE_INTERVAL:g}s\n"
        f"  scrape_timeout: {SCRAPE_INTERVAL:g}s\n"
        "scrape_configs:\n"
        "  - job_name: stalewatch\n"
        "    static_configs:\n"
        f"      - targets: ['{target}']\n"
    )
    log = workdir / "prometheus.log"
    for _ in range(3):  # a free port may be taken between the probe and Prometheus' bind
        port = _free_port()
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


@pytest.mark.skipif(PROMETHEUS is None, reason=f"Prometheus is not installed: {INSTALL}")
def test_prometheus_sees_the_checkout_stale_within_two_scrape_intervals(
    workdir: Path, git_repo: Repo
) -> None:
    key = str(git_repo.path.resolve())
    config = write_config(
        workdir / "c.toml", f'metrics_address = "127.0.0.1:0"\n[[checkout]]\npath = "{git_repo.path}"\n'
    )
    started = time.monotonic()
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        target = metrics_url(daemon).removeprefix("http://").removesuffix("/metrics")
        with prometheus(workdir, target) as server:
            selector = f'{{job="stalewatch",checkout="{key}"}}'
            (current,), _ = server.wait_for(f"stalewatch_stale{selector} == 0", timeout=60)
            assert current["metric"]["instance"] == target
            assert server.query('up{job="stalewatch"} == 1')
            committed = time.time()
            new = git_repo.commit("lands while Prometheus watches")
            assert sub.next("event")["current_revision"] == new
            _, seen = server.wait_for(f"stalewatch_stale{selector} == 1", timeout=60)
            # The sample that first said stale: its timestamp is the scrape's.
            history = server.get("/api/v1/query", query=f"stalewatch_stale{selector}[5m]")
            (series,) = history["data"]["result"]
            first = next(float(at) for at, v in series["values"] if v == "1")
            assert first - committed <= 2 * SCRAPE_INTERVAL, (first - committed, series["values"])
            states = server.query(f"stalewatch_status{selector} == 1")
            assert [s["metric"]["stalewatch_status"] for s in states] == ["stale"]
            (info,) = server.query(f"stalewatch_revision_info{selector}")
            assert info["metric"]["current_revision"] == new
            since = float(server.query(f"stalewatch_stale_since_timestamp_seconds{selector}")[0]["value"][1])
            assert committed <= since <= first
    print(
        f"\nprometheus: commit -> first stale sample {first - committed:.3f} s, "
        f"-> seen by a PromQL query {seen - committed:.3f} s; test {time.monotonic() - started:.1f} s"
    )


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.skipif(PROMTOOL is None, reason=f"promtool is not installed: {INSTALL}")
def test_the_rules_file_passes_promtool_check_rules() -> None:
    done = _promtool("check", "rules", str(RULES / "stalewatch-rules.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 4 rules found" in done.stdout


@pytest.mark.skipif(PROMTOOL is None, reason=f"promtool is not installed: {INSTALL}")
def test_the_stale_code_alert_fires_in_promtools_unit_tests(tmp_path: Path) -> None:
    done = _promtool("test", "rules", str(RULES / "stalewatch-rules.test.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    # The unit test can fail: with the threshold at an hour, the alert it expects at
    # 18 minutes does not fire.
    rules = (RULES / "stalewatch-rules.yml").read_text()
    assert rules.count("> 15 * 60") == 1
    (tmp_path / "stalewatch-rules.yml").write_text(rules.replace("> 15 * 60", "> 60 * 60"))
    shutil.copy(RULES / "stalewatch-rules.test.yml", tmp_path)
    broken = _promtool("test", "rules", str(tmp_path / "stalewatch-rules.test.yml"))
    assert broken.returncode != 0
    assert "StalewatchStaleCode" in broken.stdout + broken.stderr
