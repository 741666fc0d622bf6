"""stalewatch.watching.plan: which directories are watched and which writes matter (C7, C11)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from stalewatch import Guard, Status
from stalewatch.git import files, reftable
from stalewatch.git.refs import GitDirs, find_git_dirs
from stalewatch.watching.plan import Planner, Relevance, plan
from tests.support.recorder import Recorder
from tests.support.repos import Repo


def dirs_of(repo: Repo) -> GitDirs:
    dirs = find_git_dirs(repo.path.resolve())
    assert dirs is not None
    return dirs


def test_watches_heads_git_dir_and_anchors_but_never_objects_or_remotes(git_repo: Repo) -> None:
    dirs = dirs_of(git_repo)
    p = plan(dirs)
    git = dirs.git_dir
    assert p.watch == {git, git / "refs/heads", dirs.worktree, dirs.worktree.parent}
    assert p.relevance(str(git / "refs/heads/main")) is Relevance.REF
    assert p.relevance(str(git / "HEAD")) is Relevance.REF
    assert p.relevance(str(git / "packed-refs")) is Relevance.REF
    assert p.relevance(str(git / "refs/heads/other")) is Relevance.NONE  # C7
    assert p.relevance(str(git / "refs/heads/main.lock")) is Relevance.NONE
    assert p.relevance(str(git / "index")) is Relevance.NONE
    assert p.relevance(str(dirs.worktree / "module.py")) is Relevance.NONE
    assert p.relevance(str(dirs.worktree / ".git")) is Relevance.ANCHOR
    assert p.relevance(str(dirs.worktree)) is Relevance.ANCHOR


def test_nested_branch_watches_its_own_directory(git_repo: Repo) -> None:
    git_repo.git("checkout", "-q", "-b", "feature/deep/x")
    dirs = dirs_of(git_repo)
    p = plan(dirs)
    heads = dirs.common_dir / "refs/heads"
    assert heads / "feature/deep" in p.watch
    assert heads not in p.watch
    # the directories on the way are REF: created or removed, they change the plan
    assert p.relevance(str(heads / "feature")) is Relevance.REF
    assert p.relevance(str(heads / "feature/deep")) is Relevance.REF


def test_branch_packed_away_watches_the_deepest_existing_directory(git_repo: Repo) -> None:
    git_repo.git("checkout", "-q", "-b", "feature/deep/x")
    git_repo.git("pack-refs", "--all")  # removes refs/heads/feature/ entirely
    dirs = dirs_of(git_repo)
    heads = dirs.common_dir / "refs/heads"
    assert not (heads / "feature").exists()
    p = plan(dirs)
    assert heads in p.watch  # sees refs/heads/feature being created again
    assert p.relevance(str(heads / "feature")) is Relevance.REF


def test_detached_head_watches_no_ref_directory(git_repo: Repo) -> None:
    git_repo.git("checkout", "-q", "--detach")
    dirs = dirs_of(git_repo)
    p = plan(dirs)
    assert not any("refs" in str(d) for d in p.watch)
    assert p.relevance(str(dirs.git_dir / "refs/heads/main")) is Relevance.NONE


def test_linked_worktree_watches_its_own_head_and_the_common_refs(git_repo: Repo, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    git_repo.git("worktree", "add", "-q", "-b", "wt/x", str(wt))
    dirs = find_git_dirs(wt.resolve())
    assert dirs is not None
    p = plan(dirs)
    assert dirs.git_dir in p.watch  # .git/worktrees/wt holds its HEAD
    assert dirs.common_dir / "refs/heads/wt" in p.watch
    assert p.relevance(str(dirs.git_dir / "HEAD")) is Relevance.REF
    assert p.relevance(str(dirs.common_dir / "refs/heads/wt/x")) is Relevance.REF
    assert p.relevance(str(dirs.common_dir / "refs/heads/main")) is Relevance.NONE
    refs = dirs.common_dir / "refs"  # the branch's directories are the common dir's
    assert p.parents == {str(refs), str(refs / "heads"), str(refs / "heads/wt")}


def test_planner_hands_back_the_same_plan_until_the_chain_or_a_directory_changes(git_repo: Repo) -> None:
    head_chain = files.STORE.head_chain
    from stalewatch.watching.plan import Planner

    git_repo.git("checkout", "-q", "-b", "feature/x")
    dirs = dirs_of(git_repo)
    planner = Planner(dirs)
    chain = head_chain(dirs)
    first = planner.plan(chain)
    assert planner.plan(chain) is first  # nothing moved: no rebuilding
    assert first == plan(dirs, chain)
    git_repo.git("pack-refs", "--all")  # refs/heads/feature disappears
    packed = planner.plan(chain)
    assert packed is not first and packed == plan(dirs, chain)
    assert dirs.common_dir / "refs/heads" in packed.watch
    git_repo.commit("re-creates refs/heads/feature/x")
    assert planner.plan(chain) == first  # the directory is back: watched again
    git_repo.git("checkout", "-q", "main")
    other = planner.plan(head_chain(dirs))
    assert other != first and str(dirs.common_dir / "refs/heads/main") in other.files


def test_names_per_directory_and_narrow_directories(git_repo: Repo) -> None:
    dirs = dirs_of(git_repo)
    p = plan(dirs)
    assert p.narrow == {dirs.worktree, dirs.worktree.parent}  # renames and deletions only
    assert p.names(dirs.worktree.parent) == {dirs.worktree.name}
    assert p.names(dirs.worktree) == {".git"}
    assert p.names(dirs.git_dir) == {"HEAD", "packed-refs", "refs"}
    assert p.names(dirs.common_dir / "refs/heads") == {"main"}


def test_an_event_on_a_watched_directory_itself_re_watches_at_an_anchor_and_re_plans_elsewhere(
    git_repo: Repo,
) -> None:
    dirs = dirs_of(git_repo)
    p = plan(dirs)
    heads = dirs.common_dir / "refs/heads"
    assert p.relevance_in(dirs.worktree.parent, "") is Relevance.ANCHOR  # narrow: where the checkout lives
    assert p.relevance_in(dirs.worktree, "") is Relevance.ANCHOR
    assert p.relevance_in(dirs.git_dir, "") is Relevance.ANCHOR  # an anchor, and watched wide
    assert p.relevance_in(heads, "") is Relevance.REF  # a ref directory went away
    assert p.relevance_in(heads, "main") is Relevance.REF
    assert p.relevance_in(heads, "other") is Relevance.NONE
    assert p.relevance_in(dirs.worktree, ".git") is Relevance.ANCHOR
    assert p.relevance_in(dirs.worktree, "module.py") is Relevance.NONE
    assert p.names(dirs.common_dir / "objects") == frozenset()  # not watched: no names


def test_the_directories_from_refs_to_a_branch_matter_and_no_others(git_repo: Repo) -> None:
    git_repo.git("checkout", "-q", "-b", "feature/deep/x")
    dirs = dirs_of(git_repo)
    p = plan(dirs)
    refs = dirs.common_dir / "refs"
    on_the_way = {refs, refs / "heads", refs / "heads/feature", refs / "heads/feature/deep"}
    assert p.parents == {str(d) for d in on_the_way}
    assert p.relevance(str(refs)) is Relevance.REF
    assert p.relevance(str(refs / "tags")) is Relevance.NONE
    assert p.relevance(str(dirs.common_dir / "logs/refs/heads/feature")) is Relevance.NONE
    assert p.files == {
        str(dirs.git_dir / "HEAD"),
        str(dirs.common_dir / "packed-refs"),
        str(refs / "heads/feature/deep/x"),
    }
    assert p.names(refs / "heads/feature/deep") == {"x"}
    assert p.names(dirs.git_dir) == {"HEAD", "packed-refs", "refs"}


def test_head_on_a_per_worktree_ref_watches_the_worktrees_own_refs(git_repo: Repo, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    git_repo.git("worktree", "add", "-q", "-b", "wt", str(wt))
    Repo(wt).git("update-ref", "refs/worktree/mine", git_repo.head())
    Repo(wt).git("symbolic-ref", "HEAD", "refs/worktree/mine")
    dirs = find_git_dirs(wt.resolve())
    assert dirs is not None
    p = plan(dirs)
    own = dirs.git_dir / "refs/worktree"
    assert own in p.watch
    assert dirs.common_dir / "refs/worktree" not in p.watch
    assert p.relevance(str(own / "mine")) is Relevance.REF
    assert p.relevance(str(dirs.common_dir / "refs/worktree/mine")) is Relevance.NONE
    assert p.parents == {str(own), str(dirs.git_dir / "refs")}
    assert p.names(own) == {"mine"}


def test_head_on_a_per_worktree_ref_not_yet_created_watches_the_deepest_existing_directory(
    git_repo: Repo, tmp_path: Path
) -> None:
    wt = tmp_path / "wt"
    git_repo.git("worktree", "add", "-q", "-b", "wt", str(wt))
    Repo(wt).git("symbolic-ref", "HEAD", "refs/worktree/later/mine")
    dirs = find_git_dirs(wt.resolve())
    assert dirs is not None
    assert not (dirs.git_dir / "refs").exists()
    p = plan(dirs)
    assert dirs.git_dir in p.watch  # the worktree's git dir: sees refs/ being created
    # Only directories that exist are watched: a missing one is seen being created.
    assert p.watch == {dirs.worktree.parent, dirs.worktree, dirs.git_dir, dirs.common_dir}
    assert p.names(dirs.git_dir) == {"HEAD", "refs"}
    refs = dirs.git_dir / "refs"
    assert p.parents == {str(refs), str(refs / "worktree"), str(refs / "worktree/later")}
    assert p.relevance(str(refs)) is Relevance.REF


def test_a_worktrees_first_per_worktree_ref_wakes_its_watcher_at_once(
    git_repo: Repo, tmp_path: Path, recorder: type[Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The git dir of a linked worktree has no refs/ until then: its creation is the event.
    monkeypatch.setenv("STALEWATCH_VERIFY_INTERVAL", "600")  # no verification comes to the rescue
    wt = Repo(tmp_path / "wt")
    git_repo.git("worktree", "add", "-q", "-b", "wt", str(wt.path))
    wt.git("symbolic-ref", "HEAD", "refs/worktree/later/mine")
    with Guard.for_checkout(wt.path, loaded_revision=git_repo.head()) as guard:
        guard.start()
        assert guard.wait_ready(5)
        rec = recorder(guard)
        assert guard.status is Status.UNREADABLE  # HEAD names a ref not written yet
        wt.git("update-ref", "refs/worktree/later/mine", git_repo.head())
        rec.wait_for("current", git_repo.head(), timeout=10)


def test_reftable_watches_the_tables_list_of_each_stack(git_repo: Repo, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    git_repo.git("worktree", "add", "-q", "-b", "wt", str(wt))
    linked = find_git_dirs(wt.resolve())
    assert linked is not None
    for base in (linked.git_dir, linked.common_dir):
        (base / "reftable").mkdir()  # what a reftable repository has: a stack per worktree
    dirs = GitDirs(linked.worktree, linked.git_dir, linked.common_dir, reftable.STORE)
    p = plan(dirs)
    for base in (dirs.git_dir, dirs.common_dir):
        assert base / "reftable" in p.watch
        assert base / "reftable" not in p.narrow
        assert p.relevance(str(base / "reftable/tables.list")) is Relevance.REF
        assert p.names(base / "reftable") == {"tables.list"}
    assert p.relevance(str(dirs.common_dir / "reftable/0x01.ref")) is Relevance.NONE
    assert not any("refs" in str(d) for d in p.watch)  # no loose refs to follow


def test_a_plain_repository_watches_no_reftable(git_repo: Repo) -> None:
    (git_repo.path / ".git/reftable").mkdir()
    dirs = dirs_of(git_repo)
    files_dirs = GitDirs(dirs.worktree, dirs.git_dir, dirs.common_dir, files.STORE)
    p = plan(files_dirs)
    assert dirs.git_dir / "reftable" not in p.watch
    assert str(dirs.git_dir / "reftable/tables.list") not in p.files


def test_a_long_life_of_branch_switches_keeps_the_planner_bounded(git_repo: Repo) -> None:
    from stalewatch.watching.plan import Planner

    dirs = dirs_of(git_repo)
    planner = Planner(dirs)
    heads = dirs.common_dir / "refs/heads"
    walks, plans = 0, 0
    for i in range(300):
        made = planner.plan([heads / f"b{i}"])
        assert made.names(heads) == {f"b{i}"}
        assert planner.plan([heads / f"b{i}"]) is made
        sizes = planner._walk.cache_info().currsize, planner._build.cache_info().currsize
        walks, plans = max(walks, sizes[0]), max(plans, sizes[1])
    assert (walks, plans) == (256, 64)  # remembered up to a bound


def test_a_per_worktree_ref_whose_own_directory_is_missing_watches_refs(
    git_repo: Repo, tmp_path: Path
) -> None:
    wt = Repo(tmp_path / "wt")
    git_repo.git("worktree", "add", "-q", "-b", "wt", str(wt.path))
    wt.git("update-ref", "refs/bisect/bad", git_repo.head())  # the worktree's refs/ exists now
    wt.git("symbolic-ref", "HEAD", "refs/worktree/mine")
    dirs = find_git_dirs(wt.path.resolve())
    assert dirs is not None
    p = plan(dirs)
    refs = dirs.git_dir / "refs"
    assert refs in p.watch and refs / "worktree" not in p.watch
    assert p.names(refs) == {"worktree"}  # its creation re-plans
    assert p.relevance(str(refs / "bisect/bad")) is Relevance.NONE


def test_a_plan_follows_the_chain_it_is_given_not_head_now(git_repo: Repo) -> None:
    git_repo.git("branch", "other")
    dirs = dirs_of(git_repo)
    other = dirs.common_dir / "refs/heads/other"
    p = plan(dirs, [other])  # the chain of the last resolution, HEAD has moved on since
    assert str(other) in p.files
    assert str(dirs.common_dir / "refs/heads/main") not in p.files
    assert plan(dirs, []).files == {str(dirs.git_dir / "HEAD"), str(dirs.packed_refs)}  # detached


def test_a_deploy_link_is_a_planned_name_in_its_directory(git_repo: Repo, tmp_path: Path) -> None:
    link = tmp_path / "current"
    link.symlink_to(git_repo.path)
    dirs = GitDirs(**{**vars(dirs_of(git_repo)), "deploy_link": link})
    p = plan(dirs)
    assert tmp_path in p.watch
    assert tmp_path in p.narrow  # renames and creations only: a log written beside it wakes nothing
    assert "current" in p.names(tmp_path)
    assert p.relevance_in(tmp_path, "current") is Relevance.REF
    assert p.relevance_in(tmp_path, "tmp-link") is Relevance.NONE


def test_behind_a_deploy_link_only_the_links_directory_is_an_anchor(tmp_path: Path) -> None:
    # A release switched away from is deleted in the normal course: never "checkout gone".
    release = tmp_path / "releases" / "1"
    release.mkdir(parents=True)
    p = plan(GitDirs.plain(release, tmp_path / "current"))
    assert p.anchors == {str(tmp_path)}
    assert p.relevance_in(tmp_path, "current") is Relevance.REF


def test_a_planner_dropped_is_freed_at_once_not_by_the_cycle_collector(git_repo: Repo) -> None:
    """A stopped watcher's planner, its GitDirs and its plans go with it, not when the
    cycle collector runs: the planner's caches never hold the planner."""
    dirs = find_git_dirs(git_repo.path)
    assert dirs is not None
    enabled = gc.isenabled()
    gc.disable()
    try:
        planner = Planner(dirs)
        planner.plan()
        gone = weakref.ref(planner)
        del planner
        assert gone() is None
    finally:
        if enabled:
            gc.enable()
