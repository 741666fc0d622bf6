"""R1: reading what an updater leaves behind, safely, with real files, FIFOs and processes."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from stalewatch.server.restart import markers
from stalewatch.server.restart.effects import TakeLock
from stalewatch.server.restart.markers import GO, MAX_MARKER, Verdict, assess, exists, read_pid_marker
from stalewatch.server.restart.policy import RestartPolicy
from stalewatch.server.restart.work import Work
from tests.support.forks import report_from_fork

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
    ours = _work(tmp_path, path)
    assert ours.carry(TakeLock(1)).acquired
    assert ours.carry(TakeLock(2)).acquired  # held already
    # flock(1), as an updater would run it: cannot take the lock while we hold it.
    busy = subprocess.run(["flock", "-n", str(path), "true"], check=False, timeout=10)
    assert busy.returncode != 0
    ours.release_lock()
    ours.release_lock()  # harmless twice
    assert subprocess.run(["flock", "-n", str(path), "true"], check=False, timeout=10).returncode == 0
    with path.open("w") as held:  # an updater holding it: we wait
        fcntl.flock(held, fcntl.LOCK_EX)
        answer = _work(tmp_path, path).carry(TakeLock(3))
        assert (answer.acquired, answer.detail, answer.error) == (False, f"{path} is held", None)
    link = tmp_path / "link.lock"
    link.symlink_to(tmp_path / "elsewhere")
    answer = _work(tmp_path, link).carry(TakeLock(4))
    assert (
        not answer.acquired
        and answer.error is not None
        and answer.error.startswith("[Errno 40] cannot open the lock")
    )
    assert not (tmp_path / "elsewhere").exists()  # never created through the link


def _work(tmp_path: Path, lock: Path) -> Work:
    """What carries out the machine's requests, for a policy with ``lock``."""
    policy = RestartPolicy(action=("true",), lock=lock)
    guard: Any = SimpleNamespace(loaded_revision=None)  # only what the commands' variables read
    return Work("c", tmp_path, policy, guard=guard, drain=None, stop=threading.Event())


# -- issue 20: what the mutation run found unchecked ---------------------------------------


def _as_nobody_judging(path: Path, pid: int) -> str:
    """In a forked child run as ``nobody``: the verdict on a marker naming ``pid`` (root's)."""

    def body() -> str:
        os.setgid(65534)
        os.setuid(65534)
        try:
            os.kill(pid, 0)
        except PermissionError:
            pass
        else:
            return "kill(pid, 0) did not answer EPERM"
        verdict = read_pid_marker(path, DAY)
        return f"{verdict.action}|{verdict.reason}"

    code, report = report_from_fork(body, timeout=20)
    assert code == 0, report
    return report


def test_r1_an_updater_run_by_another_user_is_alive_and_waited_for(tmp_path: Path) -> None:
    # kill(pid, 0) answers EPERM for a live process of another user: the update runs.
    if os.geteuid() == 0:
        shared = Path(tempfile.mkdtemp(prefix="sw-marker-"))
        try:
            shared.chmod(0o755)
            path = marker(shared / "m", os.getpid(), time.time() - 5)  # root's process, to nobody
            path.chmod(0o644)
            report = _as_nobody_judging(path, os.getpid())
        finally:
            shutil.rmtree(shared)
        assert report == f"wait|update-running: pid {os.getpid()} since 5 s", report
        return
    try:
        os.kill(1, 0)
    except PermissionError:
        pass
    else:
        pytest.skip("pid 1 is this user's here and we are not root: no process of another user to name")
    verdict = read_pid_marker(marker(tmp_path / "m", 1, time.time() - 5), DAY)
    assert (verdict.action, verdict.reason) == ("wait", "update-running: pid 1 since 5 s")


@pytest.mark.parametrize(
    ("error", "alive"),
    [
        (PermissionError(errno.EPERM, "Operation not permitted"), True),
        (ProcessLookupError(errno.ESRCH, "No such process"), False),
        (OSError(errno.EINVAL, "Invalid argument"), True),  # not known dead: never refuse on doubt
    ],
)
def test_r1_only_no_such_process_is_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: OSError, alive: bool
) -> None:
    def kill(pid: int, sig: int) -> None:
        assert (pid, sig) == (4242, 0)
        raise error

    path = marker(tmp_path / "m", 4242, time.time())
    monkeypatch.setattr(markers.os, "kill", kill)
    verdict = read_pid_marker(path, DAY)
    assert verdict.action == ("wait" if alive else "refuse")
    if not alive:
        assert verdict.reason == f"update-marker: pid 4242 in {path} is not running: the update did not end"


def test_r1_assess_judges_the_marker_at_the_time_it_is_given(tmp_path: Path) -> None:
    started = 1_000_000.0
    path = marker(tmp_path / "m", os.getpid(), started)
    policy = RestartPolicy(action=("true",), update_marker=path, update_marker_max_age=600)
    assert assess(policy, now=started + 10) == Verdict(
        "wait", f"update-running: pid {os.getpid()} since 10 s"
    )
    assert assess(policy, now=started + 601) == Verdict(
        "refuse", f"update-marker: {path} is 601 s old (over 600 s): the update did not end"
    )
    assert assess(policy).action == "refuse"  # now: decades after it started


def test_r1_the_maximum_age_and_the_clock_skew_are_inclusive(tmp_path: Path) -> None:
    started = 1_000_000.0
    path = marker(tmp_path / "m", os.getpid(), started)
    assert read_pid_marker(path, 600, now=started + 600).action == "wait"
    assert read_pid_marker(path, 600, now=started + 600.5).action == "refuse"
    # Up to a minute in the future is the updater's clock, not a forged date.
    assert read_pid_marker(path, 600, now=started - 60) == Verdict(
        "wait", f"update-running: pid {os.getpid()} since 0 s"
    )
    assert read_pid_marker(path, 600, now=started - 61) == Verdict(
        "refuse", f"update-marker: {path} is dated 61 s in the future"
    )


def test_r1_a_marker_with_trailing_lines_and_blanks_is_read(tmp_path: Path) -> None:
    path = tmp_path / "m"
    path.write_bytes(f"  {os.getpid()} \n 1000000.5 \nextra\n".encode())
    assert read_pid_marker(path, DAY, now=1_000_010.0) == Verdict(
        "wait", f"update-running: pid {os.getpid()} since 10 s"
    )


@pytest.mark.parametrize("content", [b"", b"12\n", b"12\nnan\n", b"x\n1\n"])
def test_r1_a_malformed_marker_is_named(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "m"
    path.write_bytes(content)
    assert read_pid_marker(path, DAY) == Verdict(
        "refuse", f"update-marker: {path} is malformed (expected PID and UNIX time)"
    )


def test_r1_what_cannot_be_told_is_named(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to("loop")  # any path through it: ELOOP, neither there nor absent
    beside_a_file = tmp_path / "file"
    beside_a_file.touch()
    assert read_pid_marker(beside_a_file / "m", DAY) == GO  # ENOTDIR: absent
    reason = os.strerror(errno.ELOOP)
    assert read_pid_marker(loop / "m", DAY) == Verdict(
        "wait", f"update-marker: cannot read {loop / 'm'}: {reason}"
    )
    unknown = RestartPolicy(action=("true",), incomplete_markers=(tmp_path / "none", loop / "x"))
    assert assess(unknown) == Verdict("refuse", f"incomplete: cannot tell whether {loop / 'x'} exists")
    held = RestartPolicy(action=("true",), hold_while=(tmp_path / "none", loop / "h"))
    assert assess(held) == Verdict("wait", f"hold: {loop / 'h'} cannot be checked")
    present = tmp_path / "incomplete"
    present.touch()
    first = RestartPolicy(action=("true",), incomplete_markers=(present, loop / "x"), hold_while=(present,))
    assert assess(first) == Verdict("refuse", f"incomplete: {present} exists; the update did not finish")
    assert assess(RestartPolicy(action=("true",), hold_while=(tmp_path / "none", present))) == Verdict(
        "wait", f"hold: {present} exists"
    )
    assert assess(RestartPolicy(action=("true",), hold_while=(tmp_path / "none",))) == GO
    assert (exists(present), exists(tmp_path / "none"), exists(loop / "x"), exists(beside_a_file / "m")) == (
        True,
        False,
        None,
        False,
    )


class _Between:
    """``os.open`` as markers calls it, changing the file right before (a real race, made certain)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, change: Callable[[Path], None]) -> None:
        self._real = os.open
        self._change = change
        monkeypatch.setattr(markers.os, "open", self)

    def __call__(self, path: Path, flags: int, mode: int = 0o777) -> int:
        self._change(Path(path))
        return self._real(path, flags, mode)


def test_r1_a_marker_removed_after_its_stat_lets_the_restart_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = marker(tmp_path / "m", os.getpid(), time.time())
    _Between(monkeypatch, Path.unlink)
    assert read_pid_marker(path, DAY) == GO


def test_r1_a_marker_replaced_by_a_symlink_after_its_stat_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = marker(tmp_path / "real", os.getpid(), time.time())
    path = marker(tmp_path / "m", os.getpid(), time.time())

    def swap(p: Path) -> None:
        p.unlink()
        p.symlink_to(real)

    _Between(monkeypatch, swap)
    assert read_pid_marker(path, DAY) == Verdict(
        "refuse", f"update-marker: {path} is a symlink; the update did not end cleanly"
    )


@pytest.mark.timeout(10)
def test_r1_a_marker_replaced_by_a_fifo_after_its_stat_is_refused_without_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = marker(tmp_path / "m", os.getpid(), time.time())

    def swap(p: Path) -> None:
        p.unlink()
        os.mkfifo(p)

    _Between(monkeypatch, swap)
    assert read_pid_marker(path, DAY) == Verdict("refuse", f"update-marker: {path} is not a regular file")


def test_r1_a_marker_grown_after_its_stat_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = marker(tmp_path / "m", os.getpid(), time.time())
    _Between(monkeypatch, lambda p: p.write_bytes(p.read_bytes() + b"#" * MAX_MARKER))
    assert read_pid_marker(path, DAY) == Verdict(
        "refuse", f"update-marker: {path} is larger than {MAX_MARKER} bytes"
    )


def test_r1_a_marker_of_exactly_the_bound_is_read(tmp_path: Path) -> None:
    path = tmp_path / "m"
    head = f"{os.getpid()}\n1000000\n".encode()
    path.write_bytes(head + b"#" * (MAX_MARKER - len(head)))
    assert path.stat().st_size == MAX_MARKER == 4096
    assert read_pid_marker(path, DAY, now=1_000_001.0).action == "wait"
    path.write_bytes(head + b"#" * (MAX_MARKER + 1 - len(head)))
    assert read_pid_marker(path, DAY, now=1_000_001.0) == Verdict(
        "refuse", f"update-marker: {path} is larger than {MAX_MARKER} bytes"
    )


@pytest.mark.parametrize("call", ["open", "read"])
def test_r1_a_marker_that_cannot_be_opened_or_read_means_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    # Out of descriptors, or an I/O error: nothing is known, so nothing is restarted yet.
    path = marker(tmp_path / "m", os.getpid(), time.time())
    error = errno.EMFILE if call == "open" else errno.EIO

    def failing(*args: object) -> object:
        raise OSError(error, os.strerror(error))

    opened: list[int] = []
    real_close = os.close
    monkeypatch.setattr(markers.os, call, failing)
    monkeypatch.setattr(markers.os, "close", lambda fd: (opened.append(fd), real_close(fd)))
    assert read_pid_marker(path, DAY) == Verdict(
        "wait", f"update-marker: cannot read {path}: {os.strerror(error)}"
    )
    assert len(opened) == (1 if call == "read" else 0)  # the descriptor opened is closed


def test_r1_a_symlink_or_special_file_is_named_at_its_stat(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    assert read_pid_marker(link, DAY) == Verdict(
        "refuse", f"update-marker: {link} is a symlink; the update did not end cleanly"
    )
    assert read_pid_marker(tmp_path, DAY) == Verdict(
        "refuse", f"update-marker: {tmp_path} is not a regular file"
    )
    assert Verdict("go").go and not Verdict("wait").go and not Verdict("refuse").go
