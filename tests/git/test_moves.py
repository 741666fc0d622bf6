"""stalewatch.git.moves: what a reflog action means, on real git histories and on git's messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Repo
from stalewatch.git import reflog
from stalewatch.git.refs import find_git_dirs, resolve_head


def cause_of(repo: Repo, loaded: str) -> reflog.Cause:
    """What moved HEAD since ``loaded``, read as the guard reads it."""
    dirs = find_git_dirs(repo.path.resolve())
    assert dirs is not None
    chain: list[Path] = []
    current = resolve_head(dirs, chain)
    assert current is not None
    cause = reflog.explain(dirs, chain, loaded, current)
    assert cause is not None
    return cause


def counts(cause: reflog.Cause) -> tuple[str, int | None, int | None]:
    return cause.relation, cause.ahead, cause.behind


def test_a_commit_whose_subject_has_a_colon_is_a_commit_one_ahead(git_repo: Repo) -> None:
    loaded = git_repo.head()
    git_repo.git("commit", "-q", "--allow-empty", "-m", "feat: x")
    cause = cause_of(git_repo, loaded)
    assert cause.message == "commit: feat: x"
    assert (cause.action, cause.detail) == ("commit", None)
    assert counts(cause) == ("ahead", 1, None)


def conflicting_merge(repo: Repo) -> None:
    """Merge a branch that conflicts with main, resolve it and commit (``commit (merge)``)."""
    repo.git("checkout", "-q", "-b", "side")
    repo.write("both.txt", "side\n")
    repo.git("add", "both.txt")
    repo.git("commit", "-q", "-m", "side")
    repo.git("checkout", "-q", "main")
    repo.write("both.txt", "main\n")
    repo.git("add", "both.txt")
    repo.git("commit", "-q", "-m", "main")
    repo.git("merge", "-q", "side", check=False)
    assert (repo.path / ".git/MERGE_HEAD").exists(), "the merge did not stop on a conflict"
    repo.write("both.txt", "resolved\n")
    repo.git("add", "both.txt")
    repo.git("commit", "-q", "--no-edit")


def test_a_merge_committed_after_resolving_conflicts_is_ahead(git_repo: Repo) -> None:
    loaded = git_repo.head()
    conflicting_merge(git_repo)
    cause = cause_of(git_repo, loaded)
    assert cause.message.startswith("commit (merge): ")
    assert (cause.action, cause.detail) == ("merge", "commit")
    assert counts(cause) == ("ahead", None, None)  # a merge brings in an unknown count


def test_a_commit_after_a_merge_on_top_stays_ahead_by_an_unknown_count(git_repo: Repo) -> None:
    loaded = git_repo.head()
    git_repo.git("commit", "-q", "--allow-empty", "-m", "one")
    git_repo.git("checkout", "-q", "-b", "feature", "HEAD~1")
    git_repo.git("commit", "-q", "--allow-empty", "-m", "feature")
    git_repo.git("checkout", "-q", "main")
    git_repo.git("merge", "-q", "--no-ff", "--no-edit", "feature")
    assert counts(cause_of(git_repo, loaded)) == ("ahead", None, None)
    git_repo.git("commit", "-q", "--allow-empty", "-m", "after the merge")
    cause = cause_of(git_repo, loaded)
    assert cause.action == "commit"
    assert counts(cause) == ("ahead", None, None)


@pytest.mark.parametrize(
    ("target", "behind"),
    [("HEAD~", 1), ("@~", 1), ("@^", 1), ("@~2", 2), ("HEAD^1~1", 2), ("HEAD~~", 2), ("HEAD~1^", 2)],
)
def test_reset_by_first_parent_steps_is_behind_by_that_many(git_repo: Repo, target: str, behind: int) -> None:
    for n in range(3):
        git_repo.git("commit", "-q", "--allow-empty", "-m", f"c{n}")
    loaded = git_repo.head()
    git_repo.git("reset", "-q", "--hard", target)
    cause = cause_of(git_repo, loaded)
    assert cause.message == f"reset: moving to {target}"
    assert (cause.action, cause.detail) == ("reset", target)
    assert counts(cause) == ("behind", None, behind)


def test_reset_to_a_merges_second_parent_is_not_counted_as_behind(git_repo: Repo) -> None:
    git_repo.git("checkout", "-q", "-b", "feature")
    git_repo.git("commit", "-q", "--allow-empty", "-m", "feature")
    git_repo.git("checkout", "-q", "main")
    git_repo.git("commit", "-q", "--allow-empty", "-m", "main")
    git_repo.git("merge", "-q", "--no-ff", "--no-edit", "feature")
    loaded = git_repo.head()
    git_repo.git("reset", "-q", "--hard", "HEAD^2")
    cause = cause_of(git_repo, loaded)
    assert (cause.action, cause.detail) == ("reset", "HEAD^2")
    assert cause.relation == "unknown"  # not a first-parent step: the count is not in the log


def test_commits_on_a_diverged_state_add_to_its_ahead_count(git_repo: Repo) -> None:
    git_repo.git("commit", "-q", "--allow-empty", "-m", "loaded")
    loaded = git_repo.head()
    git_repo.git("reset", "-q", "--hard", "HEAD~1")
    git_repo.git("commit", "-q", "--allow-empty", "-m", "other one")
    assert counts(cause_of(git_repo, loaded)) == ("diverged", 1, 1)
    git_repo.git("commit", "-q", "--allow-empty", "-m", "other two")
    cause = cause_of(git_repo, loaded)
    assert cause.action == "commit"
    assert counts(cause) == ("diverged", 2, 1)
    git_repo.git("reset", "-q", "--hard", "HEAD~1")
    assert counts(cause_of(git_repo, loaded)) == ("diverged", 1, 1)
    git_repo.git("reset", "-q", "--hard", "HEAD~1")
    assert counts(cause_of(git_repo, loaded)) == ("behind", None, 1)
