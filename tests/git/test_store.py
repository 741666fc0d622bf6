"""The ref store interface (issue 27): a layout is one class, and every caller asks it.

A store invented here keeps HEAD's commit in one file of its own; listed in
``refs._STORES``, it is found, resolved, watched (by a real watcher), tallied and its
reflog read, without any other module knowing it exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from stalewatch import Guard, LocalSource
from stalewatch.git import files, refs, reftable
from stalewatch.git.refs import GitDirs
from stalewatch.git.store import RefStore
from stalewatch.metrics.tally import newest_ref_write
from stalewatch.watching.plan import Relevance, plan
from tests.support.recorder import Recorder
from tests.support.repos import Repo


@dataclass(frozen=True)
class Mirror:
    """HEAD's commit in ``<common dir>/mirror``, its reflog in ``mirror.log``."""

    name = "mirror"

    def found_in(self, common_dir: Path) -> bool:
        return (common_dir / "mirror").is_file()

    def resolve_head(self, dirs: GitDirs, chain: list[Path] | None = None) -> str | None:
        return (dirs.common_dir / "mirror").read_text().strip() or None

    def head_chain(self, dirs: GitDirs) -> list[Path]:
        return []

    def watched(self, dirs: GitDirs) -> tuple[Path, ...]:
        return (dirs.common_dir / "mirror",)

    def reflogs(self, dirs: GitDirs, chain: Sequence[Path] = ()) -> list[Path]:
        return [dirs.common_dir / "mirror.log"]


MIRROR: RefStore = Mirror()  # mypy: the class is a RefStore


def mirror(git_repo: Repo, old: str, new: str) -> None:
    """Move the mirror to ``new`` as git moves a ref: a lock file renamed over it."""
    common = git_repo.path / ".git"
    with (common / "mirror.log").open("a") as log:
        log.write(f"{old} {new} A U Thor <author@example.com> 1700000000 +0000\tpull: Fast-forward\n")
    lock = common / "mirror.lock"
    lock.write_text(new + "\n")
    lock.replace(common / "mirror")


def test_each_store_is_found_by_its_own_marker(git_repo: Repo) -> None:
    dirs = refs.find_git_dirs(git_repo.path.resolve())
    assert dirs is not None and dirs.store is files.STORE  # the default
    (git_repo.path / ".git/reftable").mkdir()
    dirs = refs.find_git_dirs(git_repo.path.resolve())
    assert dirs is not None and dirs.store is reftable.STORE
    assert [store.name for store in refs._STORES] == ["reftable", "files"]  # files: last, claims any


def test_a_new_store_is_one_class_every_caller_asks(git_repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(refs, "_STORES", (MIRROR, *refs._STORES))
    loaded = git_repo.head()
    mirror(git_repo, "0" * 40, loaded)
    dirs = refs.find_git_dirs(git_repo.path.resolve())
    assert dirs is not None and dirs.store is MIRROR
    # What to watch: the store's file, not the files store's packed-refs nor loose refs.
    watched = plan(dirs)
    assert watched.relevance(str(dirs.common_dir / "mirror")) is Relevance.REF
    assert watched.relevance(str(dirs.packed_refs)) is Relevance.NONE
    assert newest_ref_write(dirs) is not None
    with Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=3600)) as guard:
        guard.start()
        assert guard.wait_ready(5)
        assert guard.binding.dirs is not None and guard.binding.dirs.store is MIRROR
        rec = Recorder(guard)
        moved = git_repo.commit("a commit the mirror does not show yet")
        assert guard.snapshot().current_revision == loaded  # git's own refs are not this store's
        mirror(git_repo, loaded, moved)
        event = rec.wait_for("stale", moved)
    # The cause is the store's reflog's (logs/HEAD says "commit"): every caller asked it.
    assert event.cause is not None and (event.cause.action, event.cause.relation) == ("pull", "ahead")
    newest = newest_ref_write(dirs)
    assert newest is not None and newest.identity[0] == str(dirs.common_dir / "mirror")
