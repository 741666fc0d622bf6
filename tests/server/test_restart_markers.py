"""R1: reading what an updater leaves behind, safely, with real files, FIFOs and processes."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stalewatch.core.errors import LockError
from stalewatch.server.restart.lock import HandoffLock
from stalewatch.server.restart.markers import MAX_MARKER, assess, read_pid_marker
from stalewatch.server.restart.policy import RestartPolicy

DAY = 86400.0


def marker(path: Path, pid: int, started: float) -> Path:
    path.write_text(f"{pid}\n{started}\n")
    return path


def test_r1_absent_marker_lets_the_restart_go(tmp_path: Path) -> None:
    assert read_pid_marker(tmp_path / "none", DAY).action == "go"


def test_r1_live_updater_younger_than_the_maximum_age_means_wait(tmp_path: Path) -> None:
    verdict = read_pid_marker(marker(tmp_path / "m", os.getpid(), time.time() - 5), DAY)
    assert verdict.action == "wait"
    assert verdict.reason.startswith("update-running") and str(os.getpid()) in verdict.reason


def test_r1_dead_updater_means_the_update_did_not_end_cleanly(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a pid that existed and is gone (reaped)
    verdict = read_pid_marker(marker(tmp_path / "m", child.pid, time.time()), DAY)
    assert verdict.action == "refuse"
    assert "not running" in verdict.reason


def test_r1_marker_over_the_maximum_age_refuses_even_with_a_live_pid(tmp_path: Path) -> None:
    verdict = read_pid_marker(marker(tmp_path / "m", os.getpid(), time.time() - 3600), 600)
    assert verdict.action == "refuse" and "old" in verdict.reason


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"abc\n",
        b"12\n",
        b"12\nnot-a-time\n",
        b"-5\n1\n",
        b"0\n1\n",
        b"12\nnan\n",
        b"12\ninf\n",
        b"\xff\xfe\n",
    ],
)
def test_r1_malformed_marker_refuses(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "m"
    path.write_bytes(content)
    assert read_pid_marker(path, DAY).action == "refuse"


def test_r1_marker_from_the_future_refuses(tmp_path: Path) -> None:
    verdict = read_pid_marker(marker(tmp_path / "m", os.getpid(), time.time() + 3600), DAY)
    assert verdict.action == "refuse" and "future" in verdict.reason


def test_r1_oversized_marker_refuses_without_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "m"
    path.write_bytes(f"{os.getpid()}\n{time.time()}\n".encode() + b"#" * (MAX_MARKER * 100))
    verdict = read_pid_marker(path, DAY)
    assert verdict.action == "refuse" and "larger" in verdict.reason


def test_r1_symlinked_marker_refuses_and_is_not_followed(tmp_path: Path) -> None:
    real = marker(tmp_path / "real", os.getpid(), time.time())
    (tmp_path / "m").symlink_to(real)
    verdict = read_pid_marker(tmp_path / "m", DAY)
    assert verdict.action == "refuse" and "symlink" in verdict.reason


@pytest.mark.timeout(10)
def test_r1_fifo_marker_refuses_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "m")
    verdict = read_pid_marker(tmp_path / "m", DAY)  # a blocking open would hang here
    assert verdict.action == "refuse" and "regular" in verdict.reason


def test_r1_order_a_live_update_waits_even_while_its_recovery_marker_exists(tmp_path: Path) -> None:
    live = marker(tmp_path / "updating", os.getpid(), time.time())
    incomplete = tmp_path / ".update-incomplete"
    incomplete.touch()
    policy = RestartPolicy(action=("true",), update_marker=live, incomplete_markers=(incomplete,))
    assert assess(policy).action == "wait"
    live.unlink()  # the update is over but left its recovery marker: it did not finish
    verdict = assess(policy)
    assert verdict.action == "refuse" and verdict.reason.startswith("incomplete")
    incomplete.unlink()
    assert assess(policy).go


def test_r1_hold_file_waits_and_a_dangling_symlink_holds_too(tmp_path: Path) -> None:
    hold = tmp_path / ".updating"
    policy = RestartPolicy(action=("true",), hold_while=(hold,))
    assert assess(policy).go
    hold.symlink_to(tmp_path / "nowhere")
    verdict = assess(policy)
    assert verdict.action == "wait" and verdict.reason.startswith("hold")


@pytest.mark.skipif(
    shutil.which("flock") is None, reason="needs flock(1) from util-linux: apt-get install util-linux"
)
def test_r3_lock_is_exclusive_with_flock_1_and_not_followed_through_a_symlink(tmp_path: Path) -> None:
    path = tmp_path / "update.lock"
    ours = HandoffLock(path)
    assert ours.try_acquire()
    # flock(1), as an updater would run it: cannot take the lock while we hold it.
    busy = subprocess.run(["flock", "-n", str(path), "true"], check=False, timeout=10)
    assert busy.returncode != 0
    ours.release()
    ours.release()  # harmless twice
    assert subprocess.run(["flock", "-n", str(path), "true"], check=False, timeout=10).returncode == 0
    with path.open("w") as held:  # an updater holding it: we wait
        fcntl.flock(held, fcntl.LOCK_EX)
        assert not HandoffLock(path).try_acquire()
    link = tmp_path / "link.lock"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(LockError):
        HandoffLock(link).try_acquire()
    assert not (tmp_path / "elsewhere").exists()  # never created through the link
