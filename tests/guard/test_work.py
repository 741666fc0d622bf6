"""A guard's work in flight (R8): units of ``guard.work()`` plus outside counters."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from stalewatch import Guard
from stalewatch.guard.work import WorkInFlight
from tests.support.repos import Repo


@pytest.mark.unit
def test_r8_work_counts_one_unit_while_the_block_runs_and_nests() -> None:
    work = WorkInFlight()
    assert work.total() == 0
    with work:
        assert work.total() == 1
        with work:
            assert work.total() == 2
        assert work.total() == 1
    assert work.total() == 0


@pytest.mark.unit
def test_r8_a_unit_ends_when_its_block_raises() -> None:
    work = WorkInFlight()
    with pytest.raises(ValueError), work:
        raise ValueError("the request failed")
    assert work.total() == 0


@pytest.mark.unit
def test_r8_enter_and_exit_may_be_called_apart_as_a_barrier_does() -> None:
    work = WorkInFlight()
    work.__enter__()  # the request arrives
    work.__enter__()  # another one
    assert work.total() == 2
    work.__exit__(None, None, None)  # the first response closed, on another call
    assert work.total() == 1
    work.__exit__(None, None, None)
    work.__exit__(None, None, None)  # one too many (a fork cleared it): no error, no debt
    assert work.total() == 0


@pytest.mark.unit
def test_r8_outside_counters_add_up_until_removed() -> None:
    work = WorkInFlight()
    streams = {"a": 1, "b": 2}
    remove_streams = work.add(lambda: len(streams))
    remove_fixed = work.add(lambda: 3)
    with work:
        assert work.total() == 1 + 2 + 3
    del streams["a"]
    assert work.total() == 1 + 3
    remove_fixed()
    remove_fixed()  # harmless twice
    assert work.total() == 1
    remove_streams()
    assert work.total() == 0


def _divide() -> int:
    return 1 // 0


@pytest.mark.unit
@pytest.mark.parametrize(
    ("answer", "warned"),
    [(lambda: None, 0), (lambda: -1, 1), (lambda: True, 1), (lambda: 2.5, 1), (lambda: "3", 1), (_divide, 1)],
    ids=["none", "negative", "bool", "float", "str", "raises"],
)
def test_r8_a_counter_that_cannot_tell_adds_nothing_and_is_logged_once(
    answer: Callable[[], object], warned: int, caplog: pytest.LogCaptureFixture
) -> None:
    work = WorkInFlight()
    work.add(answer)  # type: ignore[arg-type]
    work.add(lambda: 4)
    with caplog.at_level(logging.WARNING, logger="stalewatch.guard.work"):
        assert [work.total() for _ in range(3)] == [4, 4, 4]
    assert len([r for r in caplog.records if r.name == "stalewatch.guard.work"]) == warned


@pytest.mark.unit
def test_r8_count_work_refuses_what_is_not_callable() -> None:
    with pytest.raises(TypeError, match="callable"):
        WorkInFlight().add(3)  # type: ignore[arg-type]


@pytest.mark.unit
def test_r8_a_forked_child_forgets_the_parents_units_and_keeps_its_counters() -> None:
    work = WorkInFlight()
    work.add(lambda: 2)
    work.__enter__()
    work.after_fork_in_child()  # what the at-fork hook runs in the child
    assert work.total() == 2
    work.__exit__(None, None, None)  # the forking thread's own unit ends: no error
    assert work.total() == 2


def test_r8_work_is_exact_under_threads_and_the_guard_adds_its_counters(git_repo: Repo) -> None:
    guard = Guard.for_checkout(git_repo.path)  # never started: counting needs no watcher
    remove = guard.count_work(lambda: 5)
    threads, rounds = 8, 20_000
    inside = threading.Barrier(threads + 1)
    leave = threading.Event()

    def worker() -> None:
        for _ in range(rounds):
            with guard.work():
                pass
        with guard.work():  # one unit held by each thread until the test says
            inside.wait(10)
            leave.wait(10)

    workers = [threading.Thread(target=worker, name=f"test-work-{n}") for n in range(threads)]
    for thread in workers:
        thread.start()
    try:
        inside.wait(10)
        assert guard.inflight() == threads + 5
    finally:
        leave.set()
        for thread in workers:
            thread.join(10)
    assert guard.inflight() == 5
    remove()
    assert guard.inflight() == 0
    assert guard.work() is guard.work()  # one object for every caller: nothing allocated
