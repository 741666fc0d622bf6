"""scripts/torture.py: random git operations, audited exactly; and the audit itself."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import torture
from stalewatch import Event, Status

KINDS = {name[3:] for name in dir(torture.Torture) if name.startswith("op_")}


@pytest.mark.slow
def test_c3_c7_c8_c10_c11_c12_random_git_operations_are_tracked_exactly(tmp_path: Path) -> None:
    result = torture.run(ops=80, seed=20261129, workdir=tmp_path)
    assert result.operations == 80
    assert set(result.by_op) == KINDS  # every kind ran at least once
    assert {"rename_branch", "switch_packed", "cherry_pick", "reflog_expire"} <= KINDS
    assert sum(result.skipped.values()) < 10  # and most of them really did something
    assert result.head_changes > 10  # the run really moved HEAD
    # Each HEAD change was named by an event, and every event was audited.
    assert result.events >= result.head_changes
    assert len(result.seen) == len(result.phases) == result.events
    # Both barrier paths were compared with the truth after every operation.
    assert result.flag_checks == result.strict_checks == 80
    assert result.problems == []
    assert (result.misses, result.false_alarms, result.disorders) == (0, 0, 0)
    assert result.watcher_errors == []  # and the watcher never had to recover from itself
    assert result.ok


def _event(status: Status, previous: Status, loaded: str, current: str | None, generation: int) -> Event:
    return Event(Path("/x"), status, previous, loaded, current, generation, 0.0)


def test_the_audit_counts_unreadable_unknown_commits_wrong_statuses_and_disorder(tmp_path: Path) -> None:
    t = torture.Torture(tmp_path, random.Random(1))  # noqa: S311 - a test seed
    a, b, c = t.loaded, "b" * 40, "c" * 40
    t.result.steps = [torture.Step(0, "commit", a, b, {a, b}), torture.Step(1, "gc", b, b, {b})]
    current, stale, unreadable = Status.CURRENT, Status.STALE, Status.UNREADABLE
    t.result.seen = [
        _event(stale, current, a, b, 1),  # right
        _event(current, stale, a, a, 2),  # operation 0's commit, delivered during 1: late
        _event(unreadable, current, a, None, 3),  # nothing here makes HEAD unreadable
        _event(stale, unreadable, a, c, 4),  # HEAD never pointed at c
        _event(current, stale, a, b, 6),  # b is not the loaded commit; generation 5 missing
    ]
    t.result.phases = [0, 1, 1, 1, 1]
    t._audit()
    assert t.result.false_alarms == 3
    assert t.result.disorders == 1
    assert t.result.late == 1
    assert [p.split(":")[0] for p in t.result.problems] == [
        "false alarm in #1 gc",
        "false alarm in #1 gc",
        "disorder in #1 gc",
        "false alarm in #1 gc",
    ]
    assert not t.result.ok


@pytest.mark.slow
def test_issue11_random_operations_across_many_checkouts_watched_by_one_process(tmp_path: Path) -> None:
    result = torture.run_many(ops=60, seed=20261130, checkouts=6, workdir=tmp_path)
    assert result.operations == 60
    assert result.head_changes > 5
    assert result.events >= result.head_changes
    assert result.flag_checks == result.strict_checks == 60
    assert result.problems == []
    assert (result.misses, result.false_alarms, result.disorders) == (0, 0, 0)
    assert result.watcher_errors == []
