"""Symlinks and strangers planted at the paths the daemon creates (issue 12, item 6)."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch.cli import main
from stalewatch.server.listening import listen
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
