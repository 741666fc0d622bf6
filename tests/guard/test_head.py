"""stalewatch.guard.head: the states git passes through are looked at again, not reported (C4)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from stalewatch.core.errors import RefError
from stalewatch.git.files import HEAD_MISSING
from stalewatch.guard.head import MISSING_REF_GRACE, read_settled

pytestmark = pytest.mark.unit

A = "a" * 40
HEAD = Path("/srv/co/.git/HEAD")


def reads(*answers: str | RefError | None) -> tuple[Callable[[list[Path]], str | None], list[int]]:
    """A ``read`` that gives ``answers`` in turn (the last one for ever), and its count."""
    count = [0]

    def read(chain: list[Path]) -> str | None:
        answer = answers[min(count[0], len(answers) - 1)]
        count[0] += 1
        if isinstance(answer, RefError):
            raise answer
        return answer

    return read, count


@pytest.mark.parametrize(
    "passing",
    [RefError(HEAD, HEAD_MISSING), None],
    ids=[
        "HEAD unlinked before its new symlink (core.preferSymlinkRefs)",
        "branch renamed before HEAD (branch -m)",
    ],
)
def test_a_passing_state_is_read_again_and_what_follows_is_what_counts(passing: RefError | None) -> None:
    read, count = reads(passing, passing, A)
    assert read_settled(read, [], known=True) == (A, None)
    assert count[0] == 3


def test_a_head_missing_for_good_is_reported_after_the_grace() -> None:
    read, count = reads(RefError(HEAD, HEAD_MISSING))
    assert read_settled(read, [], known=True) == (None, f"{HEAD}: {HEAD_MISSING}")
    assert count[0] == 1 + len(MISSING_REF_GRACE)


def test_without_a_known_revision_nothing_is_read_again() -> None:
    read, count = reads(RefError(HEAD, HEAD_MISSING), A)
    assert read_settled(read, [], known=False) == (None, f"{HEAD}: {HEAD_MISSING}")
    assert count[0] == 1


def test_other_errors_are_reported_at_once() -> None:
    read, count = reads(RefError(HEAD, "HEAD is corrupt"), A)
    assert read_settled(read, [], known=True) == (None, f"{HEAD}: HEAD is corrupt")
    assert count[0] == 1
