"""Symlinks and strangers planted at the paths the daemon creates (issue 12, item 6)."""

from __future__ import annotations

import fcntl
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch.cli import main
from stalewatch.server import listening
from stalewatch.server.listening import listen, release
from tests.support.daemons import Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def test_a_symlink_planted_at_the_lock_creates_nothing(
    workdir: Path, git_repo: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "created-through-the-link"
    (workdir / "s.sock.lock").symlink_to(target)
    assert main(["daemon", "--socket", str(workdir / "s.sock"), str(git_repo.path)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert not target.exists()
    assert not (workdir / "s.sock").exists()


def test_a_symlink_to_an_existing_file_at_the_lock_leaves_it_alone(
    workdir: Path, git_repo: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    precious = workdir / "precious"
    precious.write_text("data")
    precious.chmod(0o600)
    (workdir / "s.sock.lock").symlink_to(precious)
    assert main(["daemon", "--socket", str(workdir / "s.sock"), str(git_repo.path)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert precious.read_text() == "data"
    assert stat.S_IMODE(precious.stat().st_mode) == 0o600


def test_a_fifo_at_the_lock_is_refused_without_hanging(
    workdir: Path, git_repo: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(workdir / "s.sock.lock")
    assert main(["daemon", "--socket", str(workdir / "s.sock"), str(git_repo.path)]) == 2
    assert "not a regular file" in capsys.readouterr().err


def test_the_socket_gets_its_mode_at_bind_never_by_chmod(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chmod after bind follows a symlink swapped in meanwhile: there must be none."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"chmod called: {args}")

    monkeypatch.setattr(os, "chmod", refuse)
    monkeypatch.setattr(Path, "chmod", refuse)
    sock, lock = listen(workdir / "s.sock")
    try:
        assert stat.S_IMODE((workdir / "s.sock").lstat().st_mode) == 0o660
        assert stat.S_IMODE(os.fstat(lock).st_mode) & 0o007 == 0
        assert os.get_inheritable(lock) is False  # O_CLOEXEC: hooks do not inherit it
    finally:
        sock.close()
        os.close(lock)


def test_a_symlink_at_the_socket_path_is_neither_followed_nor_removed(
    workdir: Path, git_repo: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    other = workdir / "other.sock"
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(other))  # a dead socket: connecting is refused
    (workdir / "s.sock").symlink_to(other)
    assert main(["daemon", "--socket", str(workdir / "s.sock"), str(git_repo.path)]) == 2
    assert "not a socket" in capsys.readouterr().err
    assert (workdir / "s.sock").is_symlink() and stat.S_ISSOCK(other.lstat().st_mode)


def test_a_link_swapped_in_for_our_socket_survives_our_exit(workdir: Path, git_repo: Repo) -> None:
    with start_daemon(workdir, str(git_repo.path)) as daemon:
        with Subscriber(daemon.socket) as sub:
            greet(sub)
        moved = workdir / "moved.sock"
        daemon.socket.rename(moved)
        daemon.socket.symlink_to(moved)  # the link leads to our very socket
        assert daemon.stop() == 0
    assert daemon.socket.is_symlink()  # not ours: left in place
    assert moved.exists()


def test_stale_socket_swapped_for_a_file_before_removal_is_kept(workdir: Path) -> None:
    """The stale socket is unlinked only while it still is the one probed."""
    from stalewatch.server import listening

    path = workdir / "s.sock"
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(path))
    os.link(path, workdir / "hard-link")  # keeps the inode number from being reused
    seen = path.lstat()
    replacement = workdir / "replacement"
    replacement.write_text("a file that took its place")
    replacement.replace(path)
    listening.unlink_if_same(path, seen)
    assert path.read_text() == "a file that took its place"


def test_the_lock_file_goes_with_its_daemon_and_a_refused_daemon_leaves_it(
    workdir: Path, git_repo: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = Path(f"{workdir / 'd.sock'}.lock")
    with start_daemon(workdir, str(git_repo.path)) as daemon:
        assert lock.is_file()
        # A second daemon on the same socket is refused and must not take the lock away.
        assert main(["daemon", "--socket", str(daemon.socket), str(git_repo.path)]) == 2
        assert "another stalewatch daemon is running" in capsys.readouterr().err
        assert lock.is_file()
        assert daemon.stop() == 0
    assert not lock.exists() and not daemon.socket.exists()


def test_a_lock_file_removed_by_its_owner_as_we_opened_it_is_not_the_one_we_hold(workdir: Path) -> None:
    """The owner removes the file on its way out: a daemon that opened that file just
    before can then lock it, and must see that the path no longer names it (else it and
    a third daemon, locking the new file, would both serve the socket)."""
    path = workdir / "s.sock"
    lock_path = Path(f"{path}.lock")
    first_sock, first = listen(path)
    early = os.open(lock_path, os.O_RDWR)  # another daemon opened it, and waits for the lock
    try:
        first_sock.close()
        release(path, first)  # the owner leaves: the file is gone, its lock free
        assert not lock_path.exists()
        fcntl.flock(early, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the early opener gets it...
        assert not listening._names(lock_path, early)  # ...and sees it is nobody's lock now
        second_sock, second = listen(path)  # the next daemon locks a new file the path names
        try:
            assert listening._names(lock_path, second)
        finally:
            second_sock.close()
            release(path, second)
    finally:
        os.close(early)
