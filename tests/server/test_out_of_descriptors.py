"""A daemon out of descriptors (a real ``RLIMIT_NOFILE`` lowered under it) never reports
``unreadable`` for a checkout that is fine, and reads again as soon as it can."""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemons import DaemonProcess, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def _lowest_free_fd(pid: int) -> int:
    used = {int(name) for name in (p.name for p in Path(f"/proc/{pid}/fd").iterdir())}
    return next(fd for fd in range(len(used) + 1) if fd not in used)


def _wait_for_log(daemon: DaemonProcess, *texts: str, timeout: float = 10.0) -> None:
    """Until the daemon's log holds one of ``texts``."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not any(text in daemon.log_text() for text in texts):
        assert time.monotonic() < deadline, f"none of {texts} logged"
        pause.wait(0.02)  # between two reads of another process's log


def test_a_daemon_out_of_descriptors_tells_no_unreadable_and_reads_again(
    workdir: Path, git_repo: Repo
) -> None:
    with start_daemon(workdir, str(git_repo.path)) as daemon, Subscriber(daemon.socket) as sub:
        _, (snapshot,) = greet(sub)
        pid = daemon.proc.pid
        _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        low = _lowest_free_fd(pid)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (low, hard))  # every open fails: EMFILE
        try:
            new = git_repo.commit()
            _wait_for_log(daemon, "cannot read HEAD", "is unreadable")  # its watcher tried
            sub.send(b'{"type":"ping","id":1}\n')  # served meanwhile, and nothing came before it
            assert sub.next("pong", "event")["type"] == "pong"
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (max(low, 1024), hard))
        event = sub.next("event", timeout=10)  # read again within the backoff (<= 2 s)
        assert (event["status"], event["current_revision"]) == ("stale", new)
        assert event["generation"] == snapshot["generation"] + 1  # no unreadable in between
    assert "unreadable" not in daemon.log_text()
