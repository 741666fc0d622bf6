"""stalewatch.watching.stamp, and the cheap periodic re-verification it makes possible."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from stalewatch import Guard, LocalSource
from stalewatch.git import files
from stalewatch.git.refs import GitDirs
from stalewatch.watching import stamp as stamp_module
from stalewatch.watching import watcher as watcher_module
from stalewatch.watching.stamp import take
from tests.support.recorder import Recorder
from tests.support.repos import Repo


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files count as settled at once (what RACY_NS of age does)."""
    monkeypatch.setattr(stamp_module, "RACY_NS", 0)


def test_an_untouched_settled_file_proves_nothing_changed(tmp_path: Path, settled: None) -> None:
    ref = tmp_path / "main"
    ref.write_text("a" * 40 + "\n")
    paths = (str(ref), str(tmp_path / "missing"))
    first = take(paths)
    assert first.files[1] is None
    assert take(paths).proves_unchanged_since(first)


def test_a_ref_replaced_as_git_does_changes_the_stamp_even_with_the_same_size_and_mtime(
    tmp_path: Path, settled: None
) -> None:
    ref = tmp_path / "main"
    ref.write_text("a" * 40 + "\n")
    before = take([str(ref)])
    lock = tmp_path / "main.lock"
    lock.write_text("b" * 40 + "\n")
    st = ref.stat()
    os.utime(lock, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime
    lock.replace(ref)
    assert not take([str(ref)]).proves_unchanged_since(before)


def test_a_file_changed_within_the_racy_window_never_proves_anything(tmp_path: Path) -> None:
    ref = tmp_path / "main"
    ref.write_text("a" * 40 + "\n")
    first = take([str(ref)])
    assert first.racy  # just written: one more write in this tick could keep every field
    assert not take([str(ref)]).proves_unchanged_since(first)


def test_a_missing_file_appearing_changes_the_stamp(tmp_path: Path, settled: None) -> None:
    ref = tmp_path / "main"
    before = take([str(ref)])
    ref.write_text("a" * 40 + "\n")
    assert not take([str(ref)]).proves_unchanged_since(before)


def test_periodic_verification_reads_head_only_when_the_stamp_changed(
    git_repo: Repo, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    real = files.Files.resolve_head

    def counted(store: files.Files, dirs: GitDirs, chain: list[Path] | None = None) -> str | None:
        reads.append(1)
        return real(store, dirs, chain)

    with Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=0.02)) as guard:
        assert guard.wait_ready(5)
        watcher = guard._watch
        assert isinstance(watcher, watcher_module.Watcher)
        verified = threading.Semaphore(0)
        watcher.on_verified = verified.release
        monkeypatch.setattr(files.Files, "resolve_head", counted)
        for _ in range(4 * watcher_module.READ_EVERY):
            assert verified.acquire(timeout=5)
        # Idle: HEAD was read only on every READ_EVERY-th verification (and maybe one
        # already under way), never on each.
        assert len(reads) <= 4 + 1
        # A change whose event is lost is still found by the next verification's stamp.
        rec = Recorder(guard)
        monkeypatch.setattr(watcher, "signal", lambda relevance: None)
        new = git_repo.commit("its event is lost")
        rec.wait_for("stale", new)
