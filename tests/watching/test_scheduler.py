"""stalewatch.watching.scheduler: turns coalesce, never overlap, timers fire, workers are bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from stalewatch.watching import scheduler as scheduler_module
from stalewatch.watching.scheduler import MAX_HOLD, MAX_WORKERS, QUIET, Scheduler, Slot

NEVER = float("inf")


class Task:
    """A task whose turns the test drives: each turn runs ``body`` and is recorded."""

    def __init__(self, body: Callable[[], float] | None = None) -> None:
        self.body = body or (lambda: NEVER)
        self.turns = 0
        self.running = 0
        self.overlapped = False
        self.lost = threading.Event()
        self.turned = threading.Semaphore(0)
        self.threads: set[str] = set()

    def turn(self) -> float:
        self.running += 1
        self.overlapped |= self.running > 1
        self.turns += 1
        self.threads.add(threading.current_thread().name)
        try:
            return self.body()
        finally:
            self.running -= 1
            self.turned.release()

    def turn_lost(self) -> None:
        self.lost.set()

    def wait_turns(self, n: int, timeout: float = 5.0) -> None:
        for _ in range(n):
            assert self.turned.acquire(timeout=timeout), f"only {self.turns} turns"


@pytest.fixture
def sched() -> Iterator[Scheduler]:
    scheduler = Scheduler()
    yield scheduler
    scheduler.close()


def added(sched: Scheduler, task: Task) -> Slot:
    return sched.add(task)


def test_wake_ups_during_a_turn_coalesce_into_exactly_one_more(sched: Scheduler) -> None:
    entered, release = threading.Event(), threading.Event()

    def body() -> float:
        if not entered.is_set():
            entered.set()
            release.wait(5)
        return NEVER

    task = Task(body)
    slot = added(sched, task)
    sched.wake(slot)
    assert entered.wait(5)
    for _ in range(50):  # a burst while the first turn runs
        sched.wake(slot)
    release.set()
    task.wait_turns(2)
    assert not task.turned.acquire(timeout=0.2)  # and no third
    assert task.turns == 2 and not task.overlapped


def test_one_task_never_runs_on_two_workers_at_once(sched: Scheduler) -> None:
    task = Task(lambda: time.sleep(0.001) or NEVER)  # type: ignore[func-returns-value]
    others = [Task() for _ in range(8)]
    slots = [added(sched, t) for t in (task, *others)]
    for _ in range(20):  # bursts of wake-ups from every side, while turns run
        for _ in range(10):
            for slot in slots:
                sched.wake(slot)
        task.wait_turns(1)
    for slot in slots:
        assert sched.remove(slot, wait=5)  # returns once its turn in progress ended
    assert task.turns >= 20
    assert not task.overlapped and not any(t.overlapped for t in others)
    assert sched.workers() <= MAX_WORKERS


def test_timers_fire_in_order_without_a_thread_per_task(sched: Scheduler) -> None:
    order: list[int] = []
    lock = threading.Lock()
    tasks = []
    for i in range(20):

        def body(i: int = i) -> float:
            with lock:
                order.append(i)
            return NEVER

        tasks.append(Task(body))
    now = time.monotonic()
    for i, task in enumerate(tasks):
        sched.at(added(sched, task), now + 0.2 + 0.01 * (19 - i))  # the last added fires first
    for task in tasks:
        task.wait_turns(1)
    assert order == list(range(19, -1, -1))
    assert sched.workers() <= MAX_WORKERS


def test_a_later_timer_replaces_an_earlier_one(sched: Scheduler) -> None:
    task = Task()
    slot = added(sched, task)
    sched.at(slot, time.monotonic() + 0.05)
    sched.at(slot, time.monotonic() + 3600)  # rescheduled: the first must not fire
    assert not task.turned.acquire(timeout=0.3)


def test_a_turn_returns_its_next_timer(sched: Scheduler) -> None:
    task = Task(lambda: time.monotonic() + 0.02 if task.turns < 3 else NEVER)
    sched.wake(added(sched, task))
    task.wait_turns(3)
    assert not task.turned.acquire(timeout=0.2)


def test_a_worker_killed_by_a_turn_is_replaced_and_the_task_told(
    sched: Scheduler, caplog: pytest.LogCaptureFixture
) -> None:
    def body() -> float:
        if task.turns == 1:
            raise SystemExit("a callback called sys.exit()")
        return NEVER

    task = Task(body)
    slot = added(sched, task)
    sched.wake(slot)
    assert task.lost.wait(5)
    task.wait_turns(2)  # the lost turn is rerun by a new worker
    assert len(task.threads) == 2
    assert "died" in caplog.text
    sched.wake(slot)
    task.wait_turns(1)


def test_a_turn_whose_own_ending_fails_is_ended_once(
    sched: Scheduler, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The end of a turn can raise after its counts are taken back (a thread that cannot
    # start, "can't start new thread"): the worker's exit must not take them back twice,
    # or the scheduler believes -1 turns run and holds every later one back.
    failed: list[Slot] = []
    set_timer = sched._set_timer

    def once(slot: Slot, when: float) -> None:
        if slot.task is task and not failed:
            failed.append(slot)
            raise RuntimeError("can't start new thread")
        set_timer(slot, when)

    monkeypatch.setattr(sched, "_set_timer", once)
    task = Task()
    slot = added(sched, task)
    sched.wake(slot)
    assert task.lost.wait(5)
    with sched._cond:
        assert (sched._running, sched._urgent_running) == (0, 0)


def test_removed_tasks_do_not_run_and_remove_waits_for_a_running_turn(sched: Scheduler) -> None:
    entered, release = threading.Event(), threading.Event()

    def body() -> float:
        entered.set()
        release.wait(5)
        return time.monotonic()  # would run again at once

    task = Task(body)
    slot = added(sched, task)
    sched.wake(slot)
    assert entered.wait(5)
    assert not sched.remove(slot, wait=0.1)  # still in its turn
    release.set()
    assert sched.remove(slot, wait=5)
    task.wait_turns(1)  # the turn that was running
    sched.wake(slot)
    assert not task.turned.acquire(timeout=0.2)  # and none after, though it asked for one
    assert task.turns == 1


def test_close_joins_every_worker(sched: Scheduler) -> None:
    tasks = [Task(lambda: time.sleep(0.01) or NEVER) for _ in range(8)]  # type: ignore[func-returns-value]
    for task in tasks:
        sched.wake(added(sched, task))
    for task in tasks:
        task.wait_turns(1)
    assert 1 <= sched.workers() <= MAX_WORKERS
    sched.close()
    assert sched.workers() == 0


def test_a_timer_asked_for_during_a_turn_is_not_lost_to_the_turns_own_answer(sched: Scheduler) -> None:
    # The reader thread asks for a turn in 50 ms (HEAD being replaced) while a turn
    # runs, which then answers "no timer": the earlier of the two must stand.
    entered, release = threading.Event(), threading.Event()

    def body() -> float:
        if not entered.is_set():
            entered.set()
            release.wait(5)
        return NEVER

    task = Task(body)
    slot = added(sched, task)
    sched.wake(slot)
    assert entered.wait(5)
    sched.at(slot, time.monotonic() + 0.05)
    release.set()
    task.wait_turns(2)  # the first, then the one asked for


def test_a_task_removed_while_queued_never_runs() -> None:
    sched = Scheduler(max_workers=1)
    try:
        entered, release = threading.Event(), threading.Event()

        def block() -> float:
            entered.set()
            release.wait(5)
            return NEVER

        busy, queued = Task(block), Task()
        busy_slot, queued_slot = sched.add(busy), sched.add(queued)
        sched.wake(busy_slot)
        assert entered.wait(5)  # the only worker is taken
        sched.wake(queued_slot)  # so this one waits in the queue
        assert sched.remove(queued_slot, wait=1)
        release.set()
        busy.wait_turns(1)
        sched.wake(busy_slot)
        busy.wait_turns(1)  # the worker went round the queue since
        assert queued.turns == 0
    finally:
        sched.close()


def test_a_wake_up_goes_before_first_turns_and_timers_queued_earlier() -> None:
    """A reload queues a thousand first turns, a verification pass its timers; an update
    that comes after them still runs first (issue 17: 9-22 ms updates at 1,000 checkouts)."""
    sched = Scheduler(max_workers=1)  # one worker: the order is the queue's
    order: list[str] = []
    entered, release = threading.Event(), threading.Event()

    def blocker() -> float:
        entered.set()
        release.wait(5)
        return NEVER

    def recorder(name: str) -> Task:
        return Task(lambda: order.append(name) or NEVER)  # type: ignore[func-returns-value]

    try:
        sched.wake(sched.add(Task(blocker)))
        assert entered.wait(5)  # the one worker is busy
        firsts = [recorder(f"first-{n}") for n in range(20)]
        for task in firsts[:10]:
            sched.wake(sched.add(task), urgent=False)  # first turns, as Watcher.start queues them
        update = recorder("update")
        sched.wake(sched.add(update))
        earlier = recorder("earlier-update")
        for task in firsts[10:]:
            sched.wake(sched.add(task), urgent=False)
        release.set()
        for task in firsts:
            task.wait_turns(1)
        update.wait_turns(1)
        assert order[0] == "update"
        assert order[1:] == [f"first-{n}" for n in range(20)]  # first come, first served
        # Woken urgently while queued behind the others: it moves ahead, and runs once.
        entered.clear()
        release.clear()
        sched.wake(sched.add(Task(blocker)))
        assert entered.wait(5)
        slot = sched.add(earlier)
        sched.wake(slot, urgent=False)
        for _ in range(20):
            sched.wake(sched.add(recorder("again")), urgent=False)
        sched.wake(slot)
        release.set()
        earlier.wait_turns(1)
        assert not earlier.turned.acquire(timeout=0.2)  # once, not twice
        assert order[21] == "earlier-update"
    finally:
        sched.close()


class Blocker(Task):
    """A wake-up's turn that runs until the test releases it, and notes when it ended."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.ended = 0.0
        super().__init__(self._block)

    def _block(self) -> float:
        self.entered.set()
        self.release.wait(10)
        self.ended = time.monotonic()
        return NEVER


def stamped(starts: list[float]) -> Task:
    return Task(lambda: starts.append(time.monotonic()) or NEVER)  # type: ignore[func-returns-value]


def test_timers_and_first_turns_wait_while_a_wake_ups_turn_runs_and_just_after(
    sched: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verification beside an update's turn takes the GIL from it at every system call
    (issue 17: such updates took 5 to 9 ms at 1,000 checkouts, against 2 ms)."""
    monkeypatch.setattr(scheduler_module, "MAX_HOLD", 60.0)  # the bound is the next test's
    update = Blocker()
    sched.wake(added(sched, update))
    assert update.entered.wait(5)
    starts: list[float] = []
    timed, first = stamped(starts), stamped(starts)
    sched.at(added(sched, timed), time.monotonic())  # due now: a verification
    sched.wake(added(sched, first), urgent=False)  # a reload's new watcher
    assert not timed.turned.acquire(timeout=0.3)  # a worker is free, but they wait
    assert first.turns == 0
    update.release.set()
    timed.wait_turns(1)
    first.wait_turns(1)
    assert min(starts) >= update.ended + QUIET


def test_a_wake_ups_turn_that_never_ends_holds_the_others_back_for_max_hold_at_most(sched: Scheduler) -> None:
    """A checkout written without pause cannot starve every other checkout's backstop."""
    update = Blocker()
    sched.wake(added(sched, update))
    assert update.entered.wait(5)
    starts: list[float] = []
    timed = stamped(starts)
    due = time.monotonic()
    sched.at(added(sched, timed), due)
    timed.wait_turns(1, timeout=5 + MAX_HOLD)
    assert update.running == 1 and update.ended == 0.0  # still in its turn
    assert starts[0] >= due + MAX_HOLD
    update.release.set()
    update.wait_turns(1)


def test_a_worker_killed_in_a_wake_ups_turn_holds_nothing_back(
    sched: Scheduler, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(scheduler_module, "MAX_HOLD", 60.0)  # a leaked hold would last it

    def body() -> float:
        raise SystemExit("a callback called sys.exit()")

    killer = Task(body)
    sched.wake(added(sched, killer))
    assert killer.lost.wait(5)
    starts: list[float] = []
    timed = stamped(starts)
    sched.at(added(sched, timed), time.monotonic())
    timed.wait_turns(1, timeout=5)
    assert "died" in caplog.text


def test_halted_tasks_run_no_more_turns_and_halting_never_waits_for_one_under_way() -> None:
    """A daemon's exit halts thousands of watchers in one pass before stopping each: the
    workers must not go on turning the ones not stopped yet (issue 17: SIGTERM 9-15 s)."""
    sched = Scheduler(max_workers=1)  # one worker: the queue's order decides
    try:
        entered, release = threading.Event(), threading.Event()

        def block() -> float:
            entered.set()
            release.wait(5)
            return time.monotonic()  # asks for another turn at once

        busy, queued, sentinel = Task(block), [Task() for _ in range(100)], Task()
        busy_slot = sched.add(busy)
        slots = [sched.add(task) for task in queued]
        sentinel_slot = sched.add(sentinel)
        sched.wake(busy_slot)
        assert entered.wait(5)  # the only worker is in busy's turn
        for slot in slots:
            sched.wake(slot, urgent=False)  # first turns, queued behind it
        sched.halt([busy_slot, *slots])  # returns while busy's turn is under way
        sched.halt([busy_slot, *slots])  # and twice is harmless
        assert sched.slots == 1  # only the sentinel counts
        release.set()
        sched.wake(sentinel_slot)
        sentinel.wait_turns(1)  # the worker went round the queue since
        sched.wake(busy_slot)
        sched.wake(sentinel_slot)
        sentinel.wait_turns(1)
        assert busy.turns == 1 and all(task.turns == 0 for task in queued)
        assert sched.remove(busy_slot, wait=1) and sched.slots == 1  # remove still follows
    finally:
        sched.close()
