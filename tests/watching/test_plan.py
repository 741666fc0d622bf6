"""stalewatch.watching.plan: which directories are watched and which writes matter (C7, C11)."""

from __future__ import annotations

from pathlib import Path

from stalewatch.git.refs import GitDirs, find_git_dirs
from stalewatch.watching.plan import Relevance, plan
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
    git_repo.git("worktree", "add", "-q", "-b", "wt", str(wt))
    dirs = find_git_dirs(wt.resolve())
    assert dirs is not None
    p = plan(dirs)
    assert dirs.git_dir in p.watch  # .git/worktrees/wt holds its HEAD
    assert dirs.common_dir / "refs/heads" in p.watch
    assert p.relevance(str(dirs.git_dir / "HEAD")) is Relevance.REF
    assert p.relevance(str(dirs.common_dir / "refs/heads/wt")) is Relevance.REF
    assert p.relevance(str(dirs.common_dir / "refs/heads/main")) is Relevance.NONE


def test_planner_hands_back_the_same_plan_until_the_chain_or_a_directory_changes(git_repo: Repo) -> None:
    from stalewatch.git.refs import head_chain
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
    assert p.names(dirs.git_dir) == {"HEAD", "packed-refs"}
    assert p.names(dirs.common_dir / "refs/heads") == {"main"}
