"""A few worker threads that run every watcher's turns, and the timers that start them.

Each :class:`Task` (a watcher) is run by whichever worker is free, never by two at
once; a wake-up while it is queued or running coalesces into one more turn after the
current one (C12: a write after a turn began always gets a turn of its own). Timers
live in one heap that one idle worker waits on, so no thread exists per checkout.

Wake-ups (a ref changed: someone waits) come first: the thread that saw the change runs
the turn itself if :mod:`.here` lets it and no turn runs, else an idle worker takes it
at once. First turns (``urgent=False``: a reload starts a thousand) and timers' turns
queue behind them, and wait while a wake-up's turn runs and for :data:`QUIET` after it,
for at most :data:`MAX_HOLD`: a turn beside the update's path takes the GIL in turns
with it at every system call (issue 17: 5 to 9 ms, against 2).

Workers start on demand, up to :data:`MAX_WORKERS`, so a subscriber that blocks one
delays only its own checkout. A worker that dies (``SystemExit`` from a callback) is
reported, its task told its turn was lost, and another takes its place.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Protocol

from ..core.shared import Shared
from . import here

__all__ = ["MAX_HOLD", "MAX_WORKERS", "QUIET", "Scheduler", "Slot", "Task", "acquire", "release"]

logger = logging.getLogger(__name__)

MAX_WORKERS = 4
QUIET = 0.005  # seconds after a wake-up's turn before a timer's or first turn starts
MAX_HOLD = 0.5  # seconds at most such a turn is held back while wake-ups keep coming
_NEVER = float("inf")


class Task(Protocol):
    """What a scheduler runs: a watcher."""

    def turn(self) -> float:
        """Run one turn; return the monotonic time of the next timer (``inf``: none)."""

    def turn_lost(self) -> None:
        """A worker died while running this task: distrust, and expect another turn."""


class Slot:
    """A task's place in a scheduler (its queue and timer state, under the lock)."""

    def __init__(self, task: Task) -> None:
        self.task: Task | None = task  # None once removed: it may stay in the heap (issue 17)
        self.active = True
        self.queued = False
        self.running: threading.Thread | None = None
        self.urgent = False  # queued among the wake-ups
        self.again = False  # woken while running: one more turn after this one
        self.deadline = _NEVER
        self.asked = _NEVER  # the earliest at() made while running: kept by _finish


class Scheduler:
    """Worker threads and a timer heap shared by every task of the process."""

    def __init__(self, max_workers: int = MAX_WORKERS) -> None:
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # idle workers wait here for work
        self._clock = threading.Condition(lock)  # the one idle worker keeping time waits here
        self._done = threading.Condition(lock)  # remove() waits here for a turn to end
        self._urgent: deque[Slot] = deque()  # wake-ups, first come first served
        self._ready: deque[Slot] = deque()  # first turns and timers' turns, behind them
        self._timers: list[tuple[float, int, Slot]] = []
        self._seq = itertools.count()
        self._workers: list[threading.Thread] = []
        self._names = itertools.count(1)
        self._idle = 0  # workers waiting on _cond
        self._keeper = False  # a worker waits on _clock
        self._running = 0  # turns under way
        self._urgent_running = 0  # wake-ups' turns under way: the others are held back
        self._quiet_at = 0.0  # and start no earlier than this (the last one's end + QUIET)
        self._held_since = _NEVER  # since when a turn has been held back (MAX_HOLD)
        self._max = max_workers
        self._closed = False
        self.slots = 0  # tasks added and not removed

    def add(self, task: Task) -> Slot:
        """Add ``task``; it runs once :meth:`wake` or a timer asks."""
        slot = Slot(task)
        with self._cond:
            self.slots += 1
        return slot

    def remove(self, slot: Slot, wait: float = 1.0) -> bool:
        """Run ``slot`` no more; wait up to ``wait`` s for a turn under way to end (False:
        it still runs, in a slow callback)."""
        deadline = time.monotonic() + wait
        with self._cond:
            self._halt([slot])
            while slot.running is not None and slot.running is not threading.current_thread():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
        return True

    def halt(self, slots: Iterable[Slot]) -> None:
        """Run ``slots`` no more, without waiting for a turn under way: one pass under the
        lock for thousands (a daemon's exit); :meth:`remove` still follows for each."""
        with self._cond:
            self._halt(slots)

    def _halt(self, slots: Iterable[Slot]) -> None:
        # Under _cond.
        for slot in slots:
            if slot.active:
                slot.active = False
                self.slots -= 1
            # Let the task go now: a turn under way already holds what it calls, and one
            # about to start runs nothing (the slot is inactive).
            slot.task = None
        # Dead heap entries (removed or re-timed slots) would stay for minutes after a
        # reload dropped thousands: dropped once they outnumber the live ones.
        if len(self._timers) > 2 * self.slots + 64:
            self._timers = [t for t in self._timers if t[2].active and t[2].deadline == t[0]]
            heapq.heapify(self._timers)

    def wake(self, slot: Slot, *, urgent: bool = True) -> None:
        """Run the task soon (coalesces with a pending or running turn); ``urgent``: ahead of
        first turns and timers (someone waits), on this thread if :mod:`.here` lets it."""
        with self._cond:
            if here.pending() is slot:
                return  # claimed by this thread, not begun: that turn serves this wake-up too
            free = slot.active and not (self._closed or slot.queued)  # and not running: none runs
            if urgent and free and not self._running and here.may_claim():
                self._begin(slot, True)  # running: a wake-up from elsewhere asks for one more
                here.claim(slot, lambda: self._run_claimed(slot))
            else:
                self._wake(slot, urgent=urgent)

    def _run_claimed(self, slot: Slot) -> None:
        # A SystemExit from a callback is a worker's death (its task is told), not this thread's.
        try:
            when = self._run(slot)
        except BaseException as exc:
            self._exit(slot, True, exc)
            return
        with self._cond:
            self._finish(slot, when, True)

    def _wake(self, slot: Slot, *, urgent: bool = True) -> None:
        # Under _cond.
        if not self._enqueue(slot, urgent=urgent):
            return
        if urgent:  # an idle worker takes it now, or the time keeper, or a new worker
            if self._idle:
                self._cond.notify()
            elif self._keeper:
                self._clock.notify()
            elif len(self._workers) < self._max:
                self._spawn()
        elif len(self._urgent) + len(self._ready) <= self._idle:
            self._cond.notify()
        elif self._keeper and len(self._urgent) + len(self._ready) <= self._idle + 1:
            self._clock.notify()
        elif len(self._workers) < self._max:
            self._spawn()

    def _enqueue(self, slot: Slot, *, urgent: bool) -> bool:
        """Under _cond: queue ``slot``; True if newly queued (a running one runs once more
        instead). Woken urgently while queued behind, it is in both queues; taken once."""
        if not slot.active or self._closed:
            return False
        if slot.running is not None:
            slot.again = True
            return False
        if slot.queued and (slot.urgent or not urgent):
            return False
        slot.queued = True
        slot.urgent = urgent
        (self._urgent if urgent else self._ready).append(slot)
        return True

    def at(self, slot: Slot, when: float) -> None:
        """Run the task at monotonic time ``when`` (replaces its earlier timer)."""
        with self._cond:
            self._set_timer(slot, when)

    def _set_timer(self, slot: Slot, when: float) -> None:
        # Under _cond.
        if slot.running is not None and slot.running is not threading.current_thread():
            # Asked from another thread during a turn, whose own answer comes later:
            # the earlier of the two wins (a grace timer must not be lost).
            slot.asked = min(slot.asked, when)
        if when == slot.deadline or not slot.active:
            return
        slot.deadline = when
        if when == _NEVER:
            return
        earliest = self._timers[0][0] if self._timers else _NEVER
        heapq.heappush(self._timers, (when, next(self._seq), slot))
        if when < earliest:  # the time keeper must shorten its wait
            if self._keeper:
                self._clock.notify()
            elif self._idle:
                self._cond.notify()  # it becomes the keeper
            elif len(self._workers) < self._max and threading.current_thread() not in self._workers:
                # Every worker is in a turn (a worker asking keeps time once its own
                # turn ends): a slow turn must not hold back the timers.
                self._spawn()

    def close(self, timeout: float = 1.0) -> None:
        """Stop every worker, joining them within ``timeout`` (not the calling one)."""
        with self._cond:
            self._closed = True
            for condition in (self._cond, self._clock, self._done):
                condition.notify_all()
            workers = list(self._workers)
        deadline = time.monotonic() + timeout
        for worker in workers:
            if worker is not threading.current_thread():
                worker.join(timeout=max(0.0, deadline - time.monotonic()))
                if worker.is_alive():
                    logger.warning("stalewatch: %s is still in a callback; it ends after it", worker.name)

    def workers(self) -> int:
        with self._cond:
            return len(self._workers)

    def _spawn(self) -> None:
        # Under _cond.
        if len(self._workers) >= self._max or self._closed:
            return
        name = f"stalewatch-worker-{next(self._names)}"
        worker = threading.Thread(target=self._work, name=name, daemon=True)
        self._workers.append(worker)
        worker.start()

    def _next(self) -> tuple[Slot, bool] | None:
        """The next slot to run and whether it was woken urgently, waiting for one or for
        a timer; ``None`` once closed."""
        # Under _cond.
        while not self._closed:
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                when, _, slot = heapq.heappop(self._timers)
                if slot.deadline == when:  # else replaced by a later at()
                    slot.deadline = _NEVER
                    # Behind wake-ups, for this worker to run in turn: a batch of
                    # verifications costs one thread wake-up, not one per idle worker.
                    self._enqueue(slot, urgent=False)
            taken = self._take(self._urgent)
            if taken is not None:
                return taken, True
            wait = self._timers[0][0] - now if self._timers else None
            hold = self._hold(now)
            if hold <= 0.0:
                taken = self._take(self._ready)
                if taken is not None:
                    return taken, False
            else:
                wait = hold if wait is None else min(wait, hold)
            if not self._keeper:
                self._keeper = True
                try:
                    self._clock.wait(wait)
                finally:
                    self._keeper = False
            else:
                self._idle += 1
                try:
                    self._cond.wait()
                finally:
                    self._idle -= 1
        return None

    @staticmethod
    def _take(queue: deque[Slot]) -> Slot | None:
        # Under _cond.
        while queue:
            slot = queue.popleft()
            if not slot.queued:
                continue  # taken from the other queue already
            if slot.active:
                return slot
            slot.queued = False  # removed while queued: never run again
        return None

    def _hold(self, now: float) -> float:
        """Under _cond: seconds before a turn of ``_ready`` may start (0: now)."""
        if not self._ready or (not self._urgent_running and now >= self._quiet_at):
            self._held_since = _NEVER
            return 0.0
        self._held_since = min(self._held_since, now)
        until = self._held_since + MAX_HOLD  # then they run, wake-ups or not
        if not self._urgent_running:
            until = min(until, self._quiet_at)
        return max(0.0, until - now)

    def _work(self) -> None:
        slot: Slot | None = None
        urgent = False
        cause: BaseException | None = None
        try:
            while True:
                with self._cond:
                    taken = self._next()
                    if taken is None:
                        return
                    slot, urgent = taken
                    self._begin(slot, urgent)
                when = self._run(slot)
                with self._cond:
                    self._finish(slot, when, urgent)
                slot = None
        except BaseException as exc:  # SystemExit from a callback, a bug here: report, replace
            cause = exc
        finally:
            self._exit(slot, urgent, cause)

    def _begin(self, slot: Slot, urgent: bool) -> None:
        # Under _cond.
        self._running += 1
        self._urgent_running += urgent
        slot.queued = slot.urgent = slot.again = False  # again: a later wake-up runs again
        slot.running = threading.current_thread()

    @staticmethod
    def _run(slot: Slot) -> float:
        task = slot.task
        try:
            return _NEVER if task is None else task.turn()
        except Exception:  # a task catches its own; this is the last line
            logger.exception("stalewatch: a watcher's turn failed")
            return time.monotonic() + 1.0

    def _finish(self, slot: Slot, when: float, urgent: bool) -> None:
        # Under _cond.
        self._running -= 1
        if urgent:
            self._urgent_running -= 1
            if not self._urgent_running:
                self._quiet_at = time.monotonic() + QUIET
                if self._ready and self._keeper:
                    self._clock.notify()  # it waits for this end: now it waits for the quiet
        slot.running = None
        when, slot.asked = min(when, slot.asked), _NEVER
        self._set_timer(slot, when)
        if slot.again:
            slot.again = False
            self._wake(slot)
        self._done.notify_all()  # remove() may be waiting for this turn to end

    def _exit(self, slot: Slot | None, urgent: bool, cause: BaseException | None) -> None:
        me = threading.current_thread()
        with self._cond:
            if me in self._workers:  # else a thread that claimed a turn (.here): a reader's end
                # would distrust every checkout of the process, so it goes on
                self._workers.remove(me)
            if cause is not None:  # else closed
                logger.error("stalewatch: %s died in a turn (%r); its task starts over", me.name, cause)
            if self._closed:
                return
            if slot is not None:
                self._finish(slot, time.monotonic(), urgent)
            if ((self._urgent or self._ready) and self._idle == 0) or (not self._workers and self._timers):
                self._spawn()
        task = None if slot is None else slot.task
        if task is not None:
            try:
                task.turn_lost()
            except Exception:
                logger.exception("stalewatch: error reporting a lost turn")


# -- the process's scheduler ---------------------------------------------------------------

_shared: Shared[Scheduler] = Shared(Scheduler)


def acquire(task: Task) -> tuple[Scheduler, Slot]:
    """Add ``task`` to the process's scheduler (started now if there is none)."""
    scheduler = _shared.acquire()  # counted first: a concurrent last release cannot close it
    return scheduler, scheduler.add(task)


def release(scheduler: Scheduler, slot: Slot, wait: float = 1.0) -> bool:
    """Remove ``slot``; the last task out stops the workers. False if a turn still runs
    after about ``wait`` s in all (a slow callback: its worker ends when it returns)."""
    deadline = time.monotonic() + wait
    finished = scheduler.remove(slot, wait)
    if _shared.release(scheduler):
        scheduler.close(max(0.05, deadline - time.monotonic()))
    return finished
