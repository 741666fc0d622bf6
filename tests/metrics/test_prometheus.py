"""Against a real Prometheus server and promtool (Debian's ``prometheus`` package).

Prometheus scrapes a real daemon on loopback every two seconds; a commit lands; a PromQL
query over Prometheus' HTTP API must show the checkout stale within two scrape
intervals. The example alerting rules pass ``promtool check rules``, and their unit
tests (``promtool test rules``) show the stale-code alert firing. CI installs the
package (``.ci/run``); elsewhere these tests skip, saying how to install it.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemons import Subscriber, greet, short_dir, start_daemon
from tests.support.metrics import metrics_url, write_config
from tests.support.prometheus import INSTALL, PROMETHEUS, PROMTOOL, SCRAPE_INTERVAL, prometheus
from tests.support.repos import Repo

pytestmark = pytest.mark.real_server

RULES = Path(__file__).resolve().parents[2] / "prometheus"


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


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
