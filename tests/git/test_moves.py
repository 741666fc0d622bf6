"""stalewatch.git.moves: what a reflog action means, on real git histories and on git's messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalewatch.git import moves, reflog
from stalewatch.git.files import STORE
from stalewatch.git.refs import find_git_dirs
from tests.support.repos import Repo

resolve_head = STORE.resolve_head  # the files store's


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


# -- git's reflog messages, one by one (as git 2.39 writes them) ---------------------------

CHILD, MERGE, FORWARD, SIBLING, OTHER = moves.CHILD, moves.MERGE, moves.FORWARD, moves.SIBLING, moves.OTHER
SHA = "3587e18098218ff3eb2d0330ceaa815eb9a6d028"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("commit: f1", ("commit", None, CHILD, 0)),
        ("commit: feat: x", ("commit", None, CHILD, 0)),
        ("commit (initial): root", ("commit", "initial", OTHER, 0)),
        ("commit (amend): amended", ("amend", None, SIBLING, 0)),
        ("commit (merge): Merge branch 'side'", ("merge", "commit", MERGE, 0)),
        ("commit (cherry-pick): x", ("commit", "cherry-pick", CHILD, 0)),
        ("pull -q --ff-only: Fast-forward", ("pull", "fast-forward", FORWARD, 0)),
        ("pull: Merge made by the 'ort' strategy.", ("pull", "merge", MERGE, 0)),
        ("pull -q --rebase (start): checkout " + SHA, ("pull", "rebase start", OTHER, 0)),
        ("pull -q --rebase (pick): local", ("pull", "rebase pick", CHILD, 0)),
        ("pull --rebase (squash): local", ("pull", "rebase squash", SIBLING, 0)),
        ("pull -q --rebase (finish): returning to refs/heads/main", ("pull", "rebase finish", OTHER, 0)),
        ("pull --rebase: checkout x", ("pull", "rebase", OTHER, 0)),
        ("pull (finish): returning to refs/heads/main", ("pull", "rebase finish", OTHER, 0)),
        ("pull: checkout x", ("pull", None, OTHER, 0)),
        ("merge feat: Fast-forward", ("merge", "fast-forward", FORWARD, 0)),
        ("merge other: Merge made by the 'ort' strategy.", ("merge", "merge", MERGE, 0)),
        ("merge other: Merge made by recursive.", ("merge", "merge", MERGE, 0)),
        ("merge (x): conflict", ("merge", "x", OTHER, 0)),
        ("rebase (start): checkout HEAD~3", ("rebase", "start", OTHER, 0)),
        ("rebase (pick): f2", ("rebase", "pick", CHILD, 0)),
        ("rebase -i (pick): f2", ("rebase", "pick", CHILD, 0)),
        ("rebase (reword): f1", ("rebase", "reword", CHILD, 0)),
        ("rebase (edit): f1", ("rebase", "edit", CHILD, 0)),
        ("rebase (continue): f1", ("rebase", "continue", CHILD, 0)),
        ("rebase (squash): f1", ("rebase", "squash", SIBLING, 0)),
        ("rebase (fixup): f1", ("rebase", "fixup", SIBLING, 0)),
        ("rebase (finish): returning to refs/heads/feat", ("rebase", "finish", OTHER, 0)),
        ("rebase ( Pick ): f2", ("rebase", "pick", CHILD, 0)),
        ("rebase (): f2", ("rebase", None, OTHER, 0)),
        ("reset: moving to HEAD~1", ("reset", "HEAD~1", OTHER, 1)),
        ("reset: moving to HEAD", ("reset", "HEAD", OTHER, 0)),
        ("reset: moving to " + SHA, ("reset", SHA, OTHER, 0)),
        ("reset: moving to " + "x" * 60, ("reset", "x" * 40, OTHER, 0)),
        ("reset: HEAD~2", ("reset", "HEAD~2", OTHER, 2)),
        ("reset: moving to  HEAD~2 ", ("reset", " HEAD~2 ", OTHER, 2)),
        ("reset", ("reset", None, OTHER, 0)),
        ("checkout: moving from main to feat", ("checkout", "to feat", OTHER, 0)),
        ("checkout: moving from main to HEAD~1", ("checkout", "to HEAD~1", OTHER, 0)),
        ("checkout: moving from a to b to c", ("checkout", "to c", OTHER, 0)),
        ("checkout: moving from main to " + "y" * 60, ("checkout", "to " + "y" * 40, OTHER, 0)),
        ("switch: moving from a to b", ("checkout", "to b", OTHER, 0)),
        ("checkout: moving from a", ("checkout", None, OTHER, 0)),
        ("checkout: moving from a to ", ("checkout", None, OTHER, 0)),
        ("cherry-pick: subject", ("cherry-pick", None, CHILD, 0)),
        ('revert: Revert "x"', ("revert", None, CHILD, 0)),
        ("am: subject", ("am", None, CHILD, 0)),
        ("am (x): subject", ("am", "x", CHILD, 0)),
        ("clone: from /tmp/up", ("clone", None, OTHER, 0)),
        ("branch: Created from HEAD", ("branch", None, OTHER, 0)),
        ("fetch (x): fast-forward", ("fetch", "x", OTHER, 0)),
        ("fetch origin main:main: fast-forward", ("fetch", None, OTHER, 0)),  # a branch's own log
        ("clone --depth 1 /tmp/up: from /tmp/up", ("clone", None, OTHER, 0)),
        ("branch -f side HEAD~1: Reset to HEAD~1", ("branch", None, OTHER, 0)),
        ("", ("other", None, OTHER, 0)),
        ("(start): x", ("other", "start", OTHER, 0)),
        ("-x: y", ("other", None, OTHER, 0)),
        ("9lives: z", ("other", None, OTHER, 0)),
        ("Hermes   Update: moving to " + SHA, ("hermes update", None, OTHER, 0)),
        ("hermes --force update (apply): x", ("hermes update", "apply", OTHER, 0)),
        ("deploy (v2) update: x", ("deploy (v2) update", None, OTHER, 0)),
        ("deploy (v2) (finish): x", ("deploy (v2)", "finish", OTHER, 0)),
        ("deploy v2): x", ("deploy v2)", None, OTHER, 0)),
        ("COMMIT: loud", ("commit", None, CHILD, 0)),
        ("z" * 60 + ": long", ("z" * 40, None, OTHER, 0)),
    ],
)
def test_each_reflog_message_names_its_action_and_how_it_moved(
    message: str, expected: tuple[str, str | None, str, int]
) -> None:
    assert moves.classify(message) == expected


@pytest.mark.parametrize(
    ("target", "steps"),
    [
        ("HEAD~", 1),
        ("HEAD~1", 1),
        ("HEAD~12", 12),
        ("HEAD~9999", 9999),
        ("HEAD^", 1),
        ("HEAD^1", 1),
        ("HEAD^^", 2),
        ("HEAD~2^1~", 4),
        ("@~", 1),
        ("@^^^", 3),
        ("HEAD~0", 0),
        ("HEAD~10000", 0),  # past the bound: not counted
        ("HEAD^2", 0),  # a second parent is no first-parent step
        ("HEAD", 0),
        ("main~1", 0),
        ("HEAD~1x", 0),
        ("xHEAD~1", 0),
        (SHA, 0),
    ],
)
def test_reset_targets_count_first_parent_steps(target: str, steps: int) -> None:
    assert moves.classify(f"reset: moving to {target}")[3] == steps


SAME, UNKNOWN = moves.SAME, moves.UNKNOWN


@pytest.mark.parametrize(
    ("rel", "kind", "back", "expected"),
    [
        (SAME, CHILD, 0, ("ahead", 1, 0)),
        (("ahead", 2, 0), CHILD, 0, ("ahead", 3, 0)),
        (("ahead", None, 0), CHILD, 0, ("ahead", None, 0)),
        (SAME, MERGE, 0, ("ahead", None, 0)),
        (("ahead", 2, 0), MERGE, 0, ("ahead", None, 0)),
        (("behind", 0, 2), CHILD, 0, ("diverged", 1, 2)),
        (("behind", 0, 2), MERGE, 0, ("diverged", None, 2)),
        (("diverged", 1, 2), CHILD, 0, ("diverged", 2, 2)),
        (("diverged", 1, 2), MERGE, 0, ("diverged", None, 2)),
        (SAME, FORWARD, 0, ("ahead", None, 0)),
        (("ahead", 3, 0), FORWARD, 0, ("ahead", None, 0)),
        (("behind", 0, 1), FORWARD, 0, UNKNOWN),
        (("diverged", 1, 1), FORWARD, 0, UNKNOWN),
        (SAME, SIBLING, 0, ("diverged", 1, 1)),
        (("behind", 0, 2), SIBLING, 0, ("diverged", 1, 3)),
        (("ahead", 2, 0), SIBLING, 0, ("ahead", 2, 0)),
        (("diverged", 2, 1), SIBLING, 0, ("diverged", 2, 1)),
        (SAME, OTHER, 0, UNKNOWN),
        (("ahead", 1, 0), OTHER, 0, UNKNOWN),
        (UNKNOWN, CHILD, 0, UNKNOWN),
        (UNKNOWN, OTHER, 2, UNKNOWN),
        (("ahead", 3, 0), OTHER, 1, ("ahead", 2, 0)),
        (("ahead", 3, 0), CHILD, 1, ("ahead", 2, 0)),  # a reset's count wins over its kind
    ],
)
def test_a_move_composes_with_the_relation_of_its_old_commit(
    rel: moves.Rel, kind: str, back: int, expected: moves.Rel
) -> None:
    assert moves.step(rel, kind, back) == expected


@pytest.mark.parametrize(
    ("rel", "k", "expected"),
    [
        (SAME, 1, ("behind", 0, 1)),
        (SAME, 3, ("behind", 0, 3)),
        (("behind", 0, 2), 3, ("behind", 0, 5)),
        (("behind", 0, None), 1, ("behind", 0, None)),
        (("ahead", 3, 0), 1, ("ahead", 2, 0)),
        (("ahead", 3, 0), 2, ("ahead", 1, 0)),
        (("ahead", 3, 0), 3, SAME),
        (("ahead", 3, 0), 5, ("behind", 0, 2)),
        (("ahead", None, 0), 1, UNKNOWN),
        (("diverged", 2, 3), 1, ("diverged", 1, 3)),
        (("diverged", 2, 3), 2, ("behind", 0, 3)),  # back to the fork point
        (("diverged", 2, 3), 4, ("behind", 0, 5)),
        (("diverged", None, 3), 1, UNKNOWN),
        (("diverged", 1, None), 1, ("behind", 0, None)),
    ],
)
def test_a_reset_goes_back_along_the_first_parent_line(rel: moves.Rel, k: int, expected: moves.Rel) -> None:
    assert moves.back(rel, k) == expected
