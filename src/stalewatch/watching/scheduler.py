"""A few worker threads that run every watcher's turns, and the timers that start them.

Each :class:`Task` (a watcher) is run by whichever worker is free, never by two at
once; a wake-up while it is queued or running coalesces into one more turn after the
current one (C12: a write after a turn began always gets a turn of its own). Timers
live in one heap that one idle worker (the time keeper) waits on, so no thread exists
per checkout.

One queue, a heap: wake-ups (a ref changed: someone waits) first, then first turns
(``urgent=False``: a reload starts a thousand) and timers' turns, each in the order
they came. The thread that saw a change runs the turn itself if :mod:`.here` lets it
and no turn runs. The others wait while a wake-up's turn runs and for :data:`QUIET`
after it, for at most :data:`MAX_HOLD`: a turn beside the update's path takes the GIL
in turns with it at every system call (issue 17: 5 to 9 ms, against 2).

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
from collections.abc import Iterable
from typing import Protocol

from ..core.shared import Shared
from . import here

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
    """A task's place in a scheduler (under its lock)."""

    def __init__(self, task: Task) -> None:
        self.task: Task | None = task  # None once removed: it may stay in the heaps (issue 17)
        self.ticket = 0  # its entry in the queue (0: not queued); older entries are dead
        self.urgent = False  # queued among the wake-ups
        self.running: threading.Thread | None = None
        self.again = False  # woken while running: one more turn after this one
        self.deadline = _NEVER
        self.asked = _NEVER  # the earliest at() made while running: kept by _finish


class Scheduler:
    """Worker threads and a timer heap shared by every task of the process."""

    def __init__(self, max_workers: int = MAX_WORKERS) -> None:
        self._lock = lock = threading.Lock()  # the conditions' lock (wake() takes it bare: issue 27)
        self._cond = threading.Condition(lock)  # idle workers wait here for work
        self._clock = threading.Condition(lock)  # the time keeper waits here
        self._done = threading.Condition(lock)  # remove() waits here for a turn to end
        self._queue: list[tuple[bool, int, Slot]] = []  # (not urgent, ticket, slot)
        self._timers: list[tuple[float, int, Slot]] = []
        self._seq = itertools.count(1)
        self._workers: list[threading.Thread] = []
        self._names = itertools.count(1)
        self._idle = 0  # workers waiting on _cond, not yet told
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
        with self._cond:
            self.slots += 1
        return Slot(task)

    def remove(self, slot: Slot, wait: float = 1.0) -> bool:
        """Run ``slot`` no more; wait up to ``wait`` s for a turn under way to end (False:
        it still runs, in a slow callback)."""
        self.halt([slot])
        me = threading.current_thread()
        with self._cond:
            return self._done.wait_for(lambda: slot.running in (None, me), wait)

    def halt(self, slots: Iterable[Slot]) -> None:
        """Run ``slots`` no more, without waiting for a turn under way: one pass under the
        lock for thousands (a daemon's exit); :meth:`remove` still follows for each."""
        with self._cond:  # a turn under way already holds its task; one about to start runs nothing
            for slot in slots:
                self.slots -= slot.task is not None
                slot.task = None
            # Dead heap entries would stay for minutes after a reload dropped thousands.
            if len(self._timers) > 2 * self.slots + 64:
                self._timers = [t for t in self._timers if t[2].task is not None and t[2].deadline == t[0]]
                heapq.heapify(self._timers)

    def wake(self, slot: Slot, *, urgent: bool = True) -> None:
        """Run the task soon (coalesces with a pending or running turn); ``urgent``: ahead of
        first turns and timers (someone waits), on this thread if :mod:`.here` lets it."""
        with self._lock:
            if here.pending() is slot:
                return  # claimed by this thread, not begun: that turn serves this wake-up too
            free = slot.task is not None and not (self._closed or slot.ticket)  # none runs: nor it
            if urgent and free and not self._running and here.may_claim():
                self._begin(slot, True)  # running: a wake-up from elsewhere asks for one more
                here.claim(slot, lambda: self._run_claimed(slot))
            else:
                self._wake(slot, urgent=urgent)

    def _run_claimed(self, slot: Slot) -> None:
        # A SystemExit from a callback is a worker's death (its task is told), not this thread's.
        try:
            self._turn(slot, True)
        except BaseException as exc:
            self._exit(slot, True, exc)

    def _wake(self, slot: Slot, *, urgent: bool = True, notify: bool = True) -> None:
        """Under the lock: queue ``slot`` (a running one runs once more instead; one queued
        behind is queued again, ahead, when woken urgently). ``notify``: an idle worker takes
        it now, or the time keeper; a burst gets more."""
        if slot.task is None or self._closed:
            return
        if slot.running is not None:
            slot.again = True
            return
        if slot.ticket and (slot.urgent or not urgent):
            return
        slot.ticket, slot.urgent = next(self._seq), urgent
        heapq.heappush(self._queue, (not urgent, slot.ticket, slot))
        if not notify:
            return
        if self._idle:
            self._idle -= 1
            self._cond.notify()
            return
        if self._keeper:
            self._clock.notify()
        if not self._keeper or len(self._queue) > 1:
            self._spawn()

    def at(self, slot: Slot, when: float) -> None:
        """Run the task at monotonic time ``when`` (replaces its earlier timer)."""
        with self._cond:
            self._set_timer(slot, when)

    def _set_timer(self, slot: Slot, when: float) -> None:
        # Under the lock.
        if slot.running not in (None, threading.current_thread()):
            # Asked from another thread during a turn, whose own answer comes later:
            # the earlier of the two wins (a grace timer must not be lost).
            slot.asked = min(slot.asked, when)
        if when == slot.deadline or slot.task is None:
            return
        slot.deadline = when
        if when == _NEVER:
            return
        earliest = self._timers[0][0] if self._timers else _NEVER
        heapq.heappush(self._timers, (when, next(self._seq), slot))
        if when >= earliest:
            return
        if self._keeper:  # it must shorten its wait
            self._clock.notify()
        elif self._idle:  # one becomes the keeper
            self._idle -= 1
            self._cond.notify()
        elif threading.current_thread() not in self._workers:
            self._spawn()  # every worker is in a turn: a slow one must not hold back the timers

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
        # Under the lock.
        if len(self._workers) < self._max and not self._closed:
            worker = threading.Thread(
                target=self._work, name=f"stalewatch-worker-{next(self._names)}", daemon=True
            )
            self._workers.append(worker)
            worker.start()

    def _next(self) -> tuple[Slot, bool] | None:
        """Under the lock: the next slot to run, begun, and whether it was woken urgently,
        waiting for one or for a timer; ``None`` once closed."""
        while not self._closed:
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                when, _, slot = heapq.heappop(self._timers)
                if slot.deadline == when:  # else replaced by a later at()
                    slot.deadline = _NEVER
                    # Behind wake-ups, for this worker to run in turn: a batch of
                    # verifications costs one thread wake-up, not one per idle worker.
                    self._wake(slot, urgent=False, notify=False)
            hold = 0.0
            while self._queue:
                later, ticket, slot = self._queue[0]
                live = slot.ticket == ticket and slot.task is not None
                if live and later and (hold := self._hold(now)) > 0.0:
                    break
                heapq.heappop(self._queue)
                if live:  # else woken since (queued again, ahead), or removed
                    self._begin(slot, not later)
                    return slot, not later
            if not self._queue:
                self._held_since = _NEVER
            wait = min(self._timers[0][0] - now if self._timers else _NEVER, hold or _NEVER)
            if not self._keeper:
                self._keeper = True
                try:
                    self._clock.wait(None if wait == _NEVER else wait)
                finally:
                    self._keeper = False
            else:
                if hold:
                    self._clock.notify()  # the keeper waits for the hold's end too
                self._idle += 1
                self._cond.wait()
        return None

    def _hold(self, now: float) -> float:
        """Under the lock: seconds before a turn that is not a wake-up's may start (0: now)."""
        if not self._urgent_running and now >= self._quiet_at:
            self._held_since = _NEVER
            return 0.0
        self._held_since = min(self._held_since, now)
        quiet = _NEVER if self._urgent_running else self._quiet_at
        return max(0.0, min(self._held_since + MAX_HOLD, quiet) - now)  # MAX_HOLD: wake-ups or not

    def _work(self) -> None:
        taken: tuple[Slot, bool] | None = None
        cause: BaseException | None = None
        try:
            while True:
                with self._cond:
                    taken = self._next()
                if taken is None:
                    break
                self._turn(*taken)
                taken = None  # ended: a failure from here on is no turn's
        except BaseException as exc:  # SystemExit from a callback, a bug here: report, replace
            cause = exc
        finally:
            slot, urgent = taken or (None, False)
            self._exit(slot, urgent, cause)

    def _begin(self, slot: Slot, urgent: bool) -> None:
        # Under the lock.
        self._running += 1
        self._urgent_running += urgent
        slot.ticket, slot.urgent, slot.again = 0, False, False  # again: a later wake-up runs again
        slot.running = threading.current_thread()

    def _turn(self, slot: Slot, urgent: bool) -> None:
        """Run ``slot``'s turn, begun; a ``BaseException`` goes to the caller."""
        task = slot.task
        try:
            when = _NEVER if task is None else task.turn()
        except Exception:  # a task catches its own; this is the last line
            logger.exception("stalewatch: a watcher's turn failed")
            when = time.monotonic() + 1.0
        with self._cond:
            self._finish(slot, when, urgent)

    def _finish(self, slot: Slot, when: float, urgent: bool) -> None:
        # Under the lock.
        self._running -= 1
        if urgent:
            self._urgent_running -= 1
            if not self._urgent_running:
                self._quiet_at = time.monotonic() + QUIET
                if self._keeper:
                    self._clock.notify()  # it waits for this end: now it waits for the quiet
        slot.running = None
        when, slot.asked = min(when, slot.asked), _NEVER
        self._set_timer(slot, when)
        if slot.again:  # reset when its next turn begins
            self._wake(slot)
        self._done.notify_all()  # remove() may be waiting for this turn to end

    def _exit(self, slot: Slot | None, urgent: bool, cause: BaseException | None) -> None:
        # A worker's end (closed, or ``cause``); or a claimed turn's death (.here): a
        # reader's end would distrust every checkout of the process, so it goes on.
        me = threading.current_thread()
        with self._cond:
            if me in self._workers:
                self._workers.remove(me)
            if cause is not None:
                logger.error("stalewatch: %s died in a turn (%r); its task starts over", me.name, cause)
            if self._closed:
                return
            if slot is not None and slot.running is me:  # not if its own _finish raised
                self._finish(slot, time.monotonic(), urgent)
            if (self._queue and not self._idle) or (self._timers and not self._workers):
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
