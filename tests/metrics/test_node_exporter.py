"""Several daemons on one host, one node_exporter, one Prometheus job (issue 17).

Template units (``stalewatch@NAME``) run a daemon per web server, each writing its
textfile into node_exporter's directory. node_exporter refuses a series two files
both hold ("collected before with the same name and label values"), so every series
of a daemon carries its ``daemon`` label. Here two real daemons watch the same
checkout (the worst case: even the ``checkout`` labels agree) and write their files
beside each other; the real ``prometheus-node-exporter`` serves both, and a real
Prometheus scrapes them in one job.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
import time
import urllib.error
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.daemons import short_dir, start_daemon
from tests.support.metrics import get, samples, value, write_config
from tests.support.parts import CI_INSTALLS
from tests.support.prometheus import INSTALL, PROMETHEUS, free_port, prometheus
from tests.support.repos import Repo

pytestmark = pytest.mark.real_server

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
INSTALL_NODE = f"apt-get install prometheus-node-exporter (Debian's package; {CI_INSTALLS})"


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


@contextmanager
def node_exporter(workdir: Path, textfiles: Path) -> Iterator[tuple[str, Path]]:
    """node_exporter reading ``textfiles`` only: ``(its /metrics URL, its log)``; killed by pid."""
    assert NODE_EXPORTER is not None
    log = workdir / "node_exporter.log"
    for _ in range(3):  # a free port may be taken between the probe and the bind
        port = free_port()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    NODE_EXPORTER,
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--collector.disable-defaults",
                    "--collector.textfile",
                    f"--collector.textfile.directory={textfiles}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            if _answers(proc, url):
                yield url, log
                return
        finally:
            proc.kill()
            proc.wait(timeout=30)
    raise AssertionError(f"node_exporter never answered:\n{log.read_text()[-3000:]}")


def _answers(proc: subprocess.Popen[bytes], url: str, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False  # its port was taken: another one
        try:
            get(url)
        except (OSError, urllib.error.URLError):
            pause.wait(0.05)  # between two tries of another process's start-up
        else:
            return True
    return False


@pytest.mark.skipif(NODE_EXPORTER is None, reason=f"node_exporter is not installed: {INSTALL_NODE}")
def test_two_daemons_textfiles_merge_in_one_node_exporter(workdir: Path, git_repo: Repo) -> None:
    textfiles = workdir / "textfile_collector"
    textfiles.mkdir()
    with _two_daemons(workdir, textfiles, git_repo) as names, node_exporter(workdir, textfiles) as (url, log):
        status, _, body = get(url)
        assert status == 200
        found = samples(body.decode())  # the parser refuses a series twice
        assert value(found, "node_textfile_scrape_error") == 0.0, log.read_text()
        for name in ("stalewatch_build_info", "stalewatch_clients", "stalewatch_client_connections_total"):
            served = [dict(labels).get("daemon") for n, labels in found if n == name]
            assert len(served) == 2, f"{name}: one daemon's series only:\n{log.read_text()[-2000:]}"
            assert set(served) == names, name
        key = str(git_repo.path.resolve())
        for daemon in names:
            assert value(found, "stalewatch_stale", checkout=key, daemon=daemon) == 0.0
        assert "collected before" not in log.read_text()


@pytest.mark.skipif(NODE_EXPORTER is None, reason=f"node_exporter is not installed: {INSTALL_NODE}")
@pytest.mark.skipif(PROMETHEUS is None, reason=f"Prometheus is not installed: {INSTALL}")
def test_two_daemons_in_one_prometheus_job(workdir: Path, git_repo: Repo) -> None:
    textfiles = workdir / "textfile_collector"
    textfiles.mkdir()
    with (
        _two_daemons(workdir, textfiles, git_repo) as names,
        node_exporter(workdir, textfiles) as (url, _),
        prometheus(workdir, url.removeprefix("http://").removesuffix("/metrics"), job="node") as server,
    ):
        found, _ = server.wait_for('count by (daemon) (stalewatch_build_info{job="node"})', timeout=60)
        assert {series["metric"]["daemon"] for series in found} == names
        assert server.query('up{job="node"} == 1')
        key = str(git_repo.path.resolve())
        stale = server.query(f'stalewatch_stale{{job="node",checkout="{key}"}}')
        assert {series["metric"]["daemon"] for series in stale} == names


@contextmanager
def _two_daemons(workdir: Path, textfiles: Path, repo: Repo) -> Iterator[set[str]]:
    """Two daemons watching the same checkout, each with its textfile: their names."""
    names = set()
    with contextlib.ExitStack() as stack:
        for name in ("a", "b"):
            textfile = textfiles / f"stalewatch-{name}.prom"  # each instance its own file
            text = f'metrics_textfile = "{textfile}"\n[[checkout]]\npath = "{repo.path}"\n'
            config = write_config(workdir / f"{name}.toml", text)
            daemon = stack.enter_context(start_daemon(workdir, "--config", str(config), name=name))
            names.add(str(daemon.socket))  # the default name: the socket's path
        assert sorted(p.name for p in textfiles.iterdir()) == ["stalewatch-a.prom", "stalewatch-b.prom"]
        yield names
