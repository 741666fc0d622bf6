"""Metrics as a textfile for node_exporter: atomic, never through a symlink, kept fresh, removed at exit."""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stalewatch.core.files import write_atomically
from stalewatch.metrics.textfile import TextfileWriter
from tests.support.daemons import WAIT, Subscriber, daemon_command, greet, short_dir, start_daemon
from tests.support.metrics import samples, value, write_config
from tests.support.repos import Repo


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def _wait_until(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Until ``predicate()`` holds, looking again every few ms; fail at the deadline.

    A file written by another thread or process announces nothing: the deadline bounds
    the wait, the condition ends it.
    """
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        pause.wait(0.01)


def test_write_atomically_replaces_the_file_readable_by_others(tmp_path: Path) -> None:
    target = tmp_path / "a.prom"
    old_umask = os.umask(0o077)  # as under systemd's UMask=0007, or stricter
    try:
        identity = write_atomically(target, b"one 1\n")
        write_atomically(target, b"two 2\n")
    finally:
        os.umask(old_umask)
    assert target.read_bytes() == b"two 2\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # node_exporter runs as another user
    assert identity != (target.stat().st_dev, target.stat().st_ino)  # a new file each time
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.prom"]  # no temporary left


def test_a_symlink_planted_at_the_target_is_replaced_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    target = tmp_path / "a.prom"
    target.symlink_to(victim)
    write_atomically(target, b"x 1\n")
    assert victim.read_text() == "precious\n"
    assert not target.is_symlink() and target.read_bytes() == b"x 1\n"


def test_a_failed_write_leaves_no_temporary_and_names_the_error(tmp_path: Path) -> None:
    target = tmp_path / "a.prom"
    target.mkdir()  # rename over a directory fails
    with pytest.raises(OSError):
        write_atomically(target, b"x 1\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.prom"]
    with pytest.raises(OSError):
        write_atomically(tmp_path / "missing" / "a.prom", b"x 1\n")


def test_the_writer_writes_soon_after_a_change_and_removes_its_file_at_stop(tmp_path: Path) -> None:
    target = tmp_path / "a.prom"
    generation = [0]

    def render() -> bytes:
        return f"stalewatch_test_generation {generation[0]}\n".encode()

    writer = TextfileWriter(target, render, interval=3600, min_gap=0.05)
    writer.write_now()
    writer.start()
    try:
        assert target.read_text() == "stalewatch_test_generation 0\n"
        for n in range(1, 4):
            generation[0] = n
            writer.changed()
            _wait_until(lambda n=n: target.read_text().endswith(f" {n}\n"), f"generation {n} written")  # type: ignore[misc]
        assert writer.writes <= 1 + 3 + 1  # one per change, not a loop
    finally:
        writer.stop()
    assert not target.exists()
    writer.stop()  # harmless twice


def test_the_writer_rewrites_every_interval_without_changes(tmp_path: Path) -> None:
    target = tmp_path / "a.prom"
    writer = TextfileWriter(target, lambda: b"x 1\n", interval=0.05)
    writer.start()
    try:
        _wait_until(lambda: writer.writes >= 3, "three periodic writes")
    finally:
        writer.stop()


def test_stop_leaves_a_file_someone_else_put_there(tmp_path: Path) -> None:
    target = tmp_path / "a.prom"
    writer = TextfileWriter(target, lambda: b"x 1\n", interval=3600)
    writer.write_now()
    write_atomically(target, b"another daemon's\n")
    writer.stop()
    assert target.read_bytes() == b"another daemon's\n"


def test_a_failing_write_is_logged_once_and_the_writer_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "collector"
    directory.mkdir()
    target = directory / "a.prom"
    writer = TextfileWriter(target, lambda: b"x 1\n", interval=0.02, min_gap=0.02)
    writer.write_now()
    directory.rename(tmp_path / "gone")  # the directory disappears under the writer
    with caplog.at_level(logging.WARNING, logger="stalewatch.metrics.textfile"):
        writer.start()
        try:
            _wait_until(lambda: "cannot write the metrics textfile" in caplog.text, "a logged failure")
            directory.mkdir()
            _wait_until(target.exists, "written again once the directory is back")
        finally:
            writer.stop()
    assert caplog.text.count("cannot write the metrics textfile") == 1  # not once per try


def test_the_daemon_keeps_the_textfile_fresh_and_removes_it_when_it_stops(
    workdir: Path, git_repo: Repo
) -> None:
    key = str(git_repo.path.resolve())
    target = workdir / "collector" / "stalewatch.prom"
    target.parent.mkdir()
    config = write_config(
        workdir / "c.toml",
        f'metrics_textfile = "{target}"\nmetrics_interval = 3600\n[[checkout]]\npath = "{git_repo.path}"\n',
    )
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        first = samples(target.read_text())  # written before READY=1
        assert value(first, "stalewatch_stale", checkout=key) == 0
        assert not any(name.startswith("process_") for name, _ in first)  # node_exporter has its own
        new = git_repo.commit()
        assert sub.next("event")["current_revision"] == new
        # Written again within a second of the change (not after metrics_interval).
        _wait_until(
            lambda: value(samples(target.read_text()), "stalewatch_stale", checkout=key) == 1,
            "the textfile says stale",
            timeout=5,
        )
        daemon.signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=WAIT) == 0
    assert not target.exists()
    assert [p.name for p in target.parent.iterdir()] == []


def test_a_textfile_that_cannot_be_written_at_start_exits_2(workdir: Path, git_repo: Repo) -> None:
    target = workdir / "stalewatch.prom"
    target.mkdir()  # not a file: the first write fails
    config = write_config(workdir / "c.toml", f'metrics_textfile = "{target}"\n')
    done = subprocess.run(
        daemon_command("--socket", str(workdir / "d.sock"), "--config", str(config), str(git_repo.path)),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert f"metrics_textfile: cannot write {target}" in done.stderr
