"""Releases switched by a symlink (issue 28): the link retargeted is the code moving.

Real git worktrees and clones, git-sync's publishing and Capistrano's and Deployer's
switches done as they do them (tests/support/deploys.py), real watchers.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import pytest

from stalewatch import BindError, Guard, LocalSource, RefError, StaleError, Status
from stalewatch.guard.release import DeployLink, read_release
from stalewatch.watching.watcher import Watcher
from tests.support.deploys import GitSync, Releases
from tests.support.recorder import Recorder
from tests.support.repos import Repo, make_repo


def started(guard: Guard) -> Guard:
    guard.start()
    assert guard.wait_ready(5), "watcher never became ready"
    return guard


@pytest.fixture
def origin(tmp_path: Path) -> Repo:
    return make_repo(tmp_path / "origin")


def test_git_sync_switch_is_stale_with_both_releases_and_a_deploy_cause(origin: Repo, tmp_path: Path) -> None:
    first = origin.head()
    sync = GitSync(tmp_path / "root", origin, keep=True)
    sync.sync(first)
    with started(Guard.for_file(sync.link / "module.py")) as guard:
        assert isinstance(guard.binding.link, DeployLink)
        assert guard.checkout == sync.link  # what every release shares (a daemon's key too)
        rec = Recorder(guard)
        second = origin.commit("two")
        sync.sync(second)
        event = rec.wait_for("stale", second)
        with pytest.raises(StaleError) as info:
            guard.check()
        assert (info.value.loaded_revision, info.value.current_revision) == (first, second)
        cause = event.cause  # type: ignore[attr-defined]
        assert cause.action == "deploy"
        assert cause.message == f"app switched .worktrees/{first} -> .worktrees/{second}"
        assert f"app switched .worktrees/{first}" in str(info.value)
        sync.sync(first)  # swapped back: the loaded release again
        rec.wait_for("current", first)
        guard.check()


def test_git_sync_default_removes_the_loaded_worktree_nothing_crashes_or_hangs(
    origin: Repo, tmp_path: Path
) -> None:
    first = origin.head()
    sync = GitSync(tmp_path / "root", origin)  # --stale-worktree-timeout=0: removed at once
    sync.sync(first)
    guard = started(Guard.for_checkout(sync.link))
    try:
        rec = Recorder(guard)
        second = origin.commit("two")
        sync.sync(second)
        assert not sync.worktree(first).exists()
        rec.wait_for("stale", second)
        # Still watching natively (the link's directory), not "checkout gone" and polling.
        assert guard.wait_ready(5)
        assert guard.snapshot().trusted
        with pytest.raises(StaleError):
            guard.check(strict=True)
        third = origin.commit("three")
        sync.sync(third)  # the watcher of a deleted release still follows the link
        rec.wait_for("stale", third)
    finally:
        began = time.monotonic()
        guard.stop()
        assert time.monotonic() - began < 2.0


def test_a_module_imported_through_the_link_on_sys_path_binds_to_it(origin: Repo, tmp_path: Path) -> None:
    origin.write("deployed_app_mod.py", "VALUE = 1\n")
    origin.git("add", "deployed_app_mod.py")
    origin.git("commit", "-q", "-m", "app")
    sync = GitSync(tmp_path / "root", origin, keep=True)
    sync.sync(origin.head())
    sys.path.insert(0, str(sync.link))  # PYTHONPATH=/srv/app/current, --pythonpath: kept as given
    try:
        module = importlib.import_module("deployed_app_mod")
        assert module.__file__ == str(sync.link / "deployed_app_mod.py")  # what Python kept
        with started(Guard.for_module("deployed_app_mod")) as guard:
            assert guard.binding.link is not None
            rec = Recorder(guard)
            sync.sync(origin.commit("two"))
            rec.wait_for("stale")
    finally:
        sys.path.remove(str(sync.link))
        sys.modules.pop("deployed_app_mod", None)


def test_capistrano_exports_with_revision_files(origin: Repo, tmp_path: Path) -> None:
    first = origin.head()
    deploys = Releases(tmp_path / "deploy", origin)
    one = deploys.export("20261203110000", first)
    deploys.capistrano_switch(one)
    assert deploys.current.resolve() == one
    with started(Guard.for_file(deploys.current / "module.py")) as guard:
        assert guard.status is Status.CURRENT
        assert guard.loaded_revision == first
        rec = Recorder(guard)
        second = origin.commit("two")
        two = deploys.export("20261203120000", second)
        deploys.capistrano_switch(two)
        event = rec.wait_for("stale", second)
        assert event.cause.message == (  # type: ignore[attr-defined]
            "current switched releases/20261203110000 -> releases/20261203120000"
        )
        deploys.capistrano_switch(one)  # cap deploy:rollback
        rec.wait_for("current", first)


def test_deployer_mv_t_onto_clones(origin: Repo, tmp_path: Path) -> None:
    first = origin.head()
    deploys = Releases(tmp_path / "deploy", origin)
    deploys.deployer_switch(deploys.clone("1", first))
    with started(Guard.for_checkout(deploys.current)) as guard:
        rec = Recorder(guard)
        second = origin.commit("two")
        deploys.deployer_switch(deploys.clone("2", second))
        rec.wait_for("stale", second)


def test_a_link_to_a_missing_release_is_unreadable_never_current(origin: Repo, tmp_path: Path) -> None:
    deploys = Releases(tmp_path / "deploy", origin)
    deploys.capistrano_switch(deploys.export("1", origin.head()))
    with started(Guard.for_checkout(deploys.current)) as guard:
        rec = Recorder(guard)
        deploys.deployer_switch(tmp_path / "deploy" / "releases" / "gone")
        rec.wait_for("unreadable")
        with pytest.raises(StaleError) as info:
            guard.check(strict=True)
        assert info.value.status is Status.UNREADABLE
        assert "names no release" in (guard.snapshot().error or "")


def test_deploy_link_named_when_the_path_lost_it(origin: Repo, tmp_path: Path) -> None:
    deploys = Releases(tmp_path / "deploy", origin)
    one = deploys.export("1", origin.head())
    deploys.capistrano_switch(one)
    # gunicorn --chdir current: the working directory, hence __file__, is the release.
    assert Guard.for_file(one / "module.py").binding.dirs is None  # no link seen: untracked
    with started(Guard.for_file(one / "module.py", deploy_link=deploys.current)) as guard:
        rec = Recorder(guard)
        deploys.capistrano_switch(deploys.export("2", origin.commit("two")))
        rec.wait_for("stale")


def test_a_named_deploy_link_must_be_a_symlink_to_the_code(origin: Repo, tmp_path: Path) -> None:
    deploys = Releases(tmp_path / "deploy", origin)
    one = deploys.export("1", origin.head())
    deploys.capistrano_switch(one)
    with pytest.raises(BindError, match="must be a symlink"):
        Guard.for_file(one / "module.py", deploy_link=one)
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_text("x = 1\n")
    with pytest.raises(BindError, match="in none of the releases"):
        Guard.for_file(elsewhere, deploy_link=deploys.current)
    # Code in a git checkout that is no release of the link: a mistyped link, refused
    # (not a guard stale from its first request).
    with pytest.raises(BindError, match="in none of the releases"):
        Guard.for_file(origin.path / "module.py", deploy_link=deploys.current)


def test_a_symlink_above_a_checkout_is_no_deploy_link(git_repo: Repo, tmp_path: Path) -> None:
    # /home -> /data/home: a link to a directory holding the checkout, not naming it.
    (tmp_path / "home").symlink_to(tmp_path)
    guard = Guard.for_file(tmp_path / "home" / "checkout" / "module.py")
    assert guard.binding.link is None
    assert guard.binding.dirs is not None and guard.binding.dirs.deploy_link is None


def test_the_link_is_watched_by_name_in_its_directory(origin: Repo, tmp_path: Path) -> None:
    sync = GitSync(tmp_path / "root", origin, keep=True)
    sync.sync(origin.head())
    with started(Guard.for_checkout(sync.link)) as guard:
        dirs = guard.binding.dirs
        assert dirs is not None and dirs.deploy_link == sync.link
        # A write beside the link wakes nothing; only the rename onto its name counts.
        rec = Recorder(guard)
        (sync.root / "unrelated").write_text("x")
        (sync.root / "unrelated").rename(sync.root / "also-unrelated")
        sync.sync(origin.commit("two"))
        rec.wait_for("stale")
        assert [e.status for e in rec.events] == [Status.STALE]


def test_bound_after_the_switch_the_loaded_release_is_the_one_the_code_came_from(
    origin: Repo, tmp_path: Path
) -> None:
    # A worker that imports the old release (gunicorn's trap) after the deploy switched.
    first = origin.head()
    deploys = Releases(tmp_path / "deploy", origin)
    one = deploys.export("1", first)
    second = origin.commit("two")
    deploys.capistrano_switch(deploys.export("2", second))
    guard = Guard.for_file(one / "module.py", deploy_link=deploys.current)
    assert (guard.status, guard.loaded_revision, guard.snapshot().current_revision) == (
        Status.STALE,
        first,
        second,
    )


def test_a_link_switched_onto_a_file_or_replaced_by_a_directory_is_unreadable(
    origin: Repo, tmp_path: Path
) -> None:
    deploys = Releases(tmp_path / "deploy", origin)
    deploys.capistrano_switch(deploys.export("1", origin.head()))
    guard = Guard.for_checkout(deploys.current)  # never started: every check reads (C9)
    stray = tmp_path / "deploy" / "stray"
    stray.write_text("not a release\n")
    deploys.deployer_switch(stray)
    with pytest.raises(StaleError):
        guard.check()
    assert guard.status is Status.UNREADABLE
    assert "not a directory" in (guard.snapshot().error or "")
    deploys.current.unlink()
    deploys.current.mkdir()
    with pytest.raises(StaleError):
        guard.check()
    with pytest.raises(RefError, match="no longer a symlink"):
        read_release(deploys.current)


def test_polling_sees_a_switch(origin: Repo, tmp_path: Path) -> None:
    # Without notification (a filesystem without it, or the user's limits): the link's
    # lstat is in the stamp each poll compares (tests/watching/test_plan.py: it is planned).
    sync = GitSync(tmp_path / "root", origin, keep=True)
    sync.sync(origin.head())
    source = LocalSource(poll=True, poll_interval=0.05)
    with started(Guard.for_checkout(sync.link, source=source)) as guard:
        rec = Recorder(guard)
        second = origin.commit("two")
        sync.sync(second)
        rec.wait_for("stale", second)


def test_a_link_in_a_symlinked_directory_is_watched_where_it_is(origin: Repo, tmp_path: Path) -> None:
    # /var/www -> /data/www, the link /var/www/app/current: its directory is itself a link.
    sync = GitSync(tmp_path / "root", origin, keep=True)
    sync.sync(origin.head())
    alias = tmp_path / "alias"
    alias.symlink_to(sync.root)
    with started(Guard.for_checkout(alias / "app")) as guard:
        assert guard.checkout == alias / "app"
        watcher = guard._watch
        assert isinstance(watcher, Watcher)
        # Every planned directory is watched (a watch of the alias itself fails: the
        # watcher would plan again on every turn, a busy loop).
        assert watcher._watches.count() == len(watcher.plan.watch)
        rec = Recorder(guard)
        second = origin.commit("two")
        sync.sync(second)
        rec.wait_for("stale", second)
        assert guard.snapshot().trusted
