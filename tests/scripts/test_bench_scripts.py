"""The benchmark scripts run end to end (their figures are printed, never asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def run_quick(script: str) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


@pytest.mark.slow
def test_bench_quick_prints_every_figure() -> None:
    out = run_quick("bench.py")
    for label in (
        "check()  flag path",
        "check(strict=True)",
        "reference: 3 git subprocesses",
        "ref update -> flag flipped",
        "process CPU while idle",
        "RSS",
        "daemon: ref rename -> event at 1 subscriber",
        "daemon: fan-out to 5, last subscriber",
        "daemon idle",
        "check()  flag path, metrics on",
        "one scrape of GuardCollector",
        "daemon idle, metrics on, not scraped",
        "daemon idle, metrics on, scraped 1/s",
        "daemon CPU per scrape",
    ):
        assert label in out


@pytest.mark.slow
def test_bench_hermes_quick_prints_every_figure() -> None:
    out = run_quick("bench_hermes.py")
    for label in (
        "upstream: 3 git",
        "with accelerate()",
        "decided by the guard",
        "decided by the read",
        "WebUI today",
        "what moved HEAD",
        "3 entries since the loaded commit",
        "worst: 256 KiB",
    ):
        assert label in out


@pytest.mark.slow
def test_soak_quick_prints_every_figure() -> None:
    """A 10 s soak: the script exits 1 on a lost event, a gap, a dropped honest client or a dead daemon."""
    out = run_quick("soak.py")
    for label in (
        "lost events:",
        "generation gaps:",
        "honest clients dropped:",
        "hostile connections:",
        "slow connections:",
        "SIGHUPs:",
        "hooks run:",
        "daemon RSS (kB):",
        "daemon open fds:",
        "SIGTERM:",
    ):
        assert label in out


@pytest.mark.slow
def test_bench_restart_quick_prints_every_figure() -> None:
    out = run_quick("bench_restart.py")
    for label in ("commit -> restart confirmed", "commit -> every worker on the new", "requests lost"):
        assert label in out


@pytest.mark.slow
def test_bench_scale_quick_prints_every_figure() -> None:
    out = run_quick("bench_scale.py")
    for label in ("N=1 ", "N=10 ", "start", "threads", "inotify 1 instance(s)", "watches", "RSS"):
        assert label in out
    for label in ("polling 0", "burst", "idle CPU", "detection median", "large repository"):
        assert label in out
    for label in ("less run-queue waits", "hypervisor steal", "floor (scripts/floor.py"):
        assert label in out
    for label in ("check(strict=True)", "loose ref update -> event", "packed-refs rewrite -> event"):
        assert label in out


@pytest.mark.slow
def test_bench_deploy_quick_prints_the_switch_and_its_floor() -> None:
    out = run_quick("bench_deploy.py")
    assert "link renamed -> guard's event" in out
    assert "floor: bare inotify reader" in out
