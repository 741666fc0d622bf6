"""stalewatch.watching.watches: one checkout's registrations follow its plan."""

from __future__ import annotations

import threading
from pathlib import Path

from stalewatch.watching.notifier import Registration
from stalewatch.watching.plan import Plan
from stalewatch.watching.watches import Watches
from tests.support.notifiers import NOTIFIER


class Listener:
    def on_event(self, registration: Registration, name: bytes, deleted: bool) -> None:
        pass

    def on_overflow(self) -> None:
        pass

    def on_reader_died(self) -> None:
        pass


def plan_of(*dirs: Path) -> Plan:
    return Plan(
        frozenset(dirs), frozenset(), frozenset(), frozenset(), interest={d: frozenset() for d in dirs}
    )


def test_a_directory_missing_when_watched_is_watched_once_it_exists_under_the_same_plan(
    tmp_path: Path,
) -> None:
    present, missing = tmp_path / "heads", tmp_path / "heads-feature"
    present.mkdir()
    asked = threading.Event()
    watches = Watches(Listener(), asked.set, NOTIFIER)
    plan = plan_of(present, missing)
    try:
        watches.open(plan)
        assert asked.is_set()  # git removed it meanwhile: the caller plans again
        assert watches.count() == 1
        missing.mkdir()  # the next plan is the same object (same chain, same directories)
        assert watches.follow(plan, plan)  # so it must still notice what is left to watch
        assert watches.count() == 2
        assert not watches.follow(plan, plan)  # and then nothing more to do
    finally:
        watches.close(final=True)


def test_a_directory_replaced_is_rewatched_on_recheck(tmp_path: Path) -> None:
    directory = tmp_path / "heads"
    directory.mkdir()
    watches = Watches(Listener(), lambda: None, NOTIFIER)
    plan = plan_of(directory)
    try:
        watches.open(plan)
        directory.rename(tmp_path / "old")  # moved away: the watch follows the old inode
        directory.mkdir()
        assert watches.lost()
        assert watches.follow(plan, plan, recheck=True)
        assert not watches.lost()
    finally:
        watches.close(final=True)


def test_closed_for_good_refuses_to_watch(tmp_path: Path) -> None:
    watches = Watches(Listener(), lambda: None, NOTIFIER)
    watches.close(final=True)
    try:
        watches.open(plan_of(tmp_path))
    except OSError as exc:
        assert "stopping" in str(exc)
    else:
        raise AssertionError("watched after close(final=True)")
    assert watches.instance is None
