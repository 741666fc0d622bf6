"""Without the metrics extra: the daemon runs as before, and asking for metrics says what to install.

Each test runs a real process in which ``prometheus_client`` cannot be imported
(``sys.modules["prometheus_client"] = None``, what an environment without the extra
gives), since the test environment itself has it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemons import Subscriber, greet, short_dir, start_daemon
from tests.support.metrics import write_config
from tests.support.repos import Repo

_WITHOUT = "import sys; sys.modules['prometheus_client'] = None; "
EXTRA = "pip install 'stalewatch[metrics]'"


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT + code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "setting", ['metrics_address = "127.0.0.1:0"', 'metrics_textfile = "{workdir}/s.prom"']
)
def test_a_daemon_asked_for_metrics_without_the_extra_exits_2_naming_it(
    workdir: Path, git_repo: Repo, setting: str
) -> None:
    config = write_config(workdir / "c.toml", setting.format(workdir=workdir) + "\n")
    done = _python(
        "from stalewatch.cli import main; sys.exit(main(sys.argv[1:]))",
        "daemon",
        "--socket",
        str(workdir / "d.sock"),
        "--config",
        str(config),
        str(git_repo.path),
    )
    assert done.returncode == 2, done.stderr
    key = setting.split(maxsplit=1)[0]
    assert f"{key}: needs the prometheus_client library, which is not installed: {EXTRA}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (workdir / "d.sock").exists() and not (workdir / "s.prom").exists()


def test_without_metrics_configured_the_daemon_never_imports_the_library(
    workdir: Path, git_repo: Repo
) -> None:
    prelude = ["-c", _WITHOUT + "import runpy; runpy.run_module('stalewatch', run_name='__main__')"]
    with (
        start_daemon(workdir, str(git_repo.path), python=[sys.executable, *prelude]) as daemon,
        Subscriber(daemon.socket) as sub,
    ):
        greet(sub)
        new = git_repo.commit()
        assert sub.next("event")["current_revision"] == new
    assert "Traceback" not in daemon.log_text()


def test_the_package_imports_and_a_collector_names_the_extra() -> None:
    done = _python(
        "import stalewatch.metrics as m\n"
        "assert not m.available()\n"
        "try:\n"
        "    from stalewatch.metrics import GuardCollector\n"
        "except ImportError as exc:\n"
        "    assert isinstance(exc, m.MetricsUnavailableError), type(exc)\n"
        "    print(exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "stalewatch.metrics.GuardCollector: needs the prometheus_client library" in done.stdout
    assert EXTRA in done.stdout
