"""stalewatch.core's process infrastructure, one implementation each: the bounded cache,
the shared instance, the at-fork registry, signal handling and its wake-up."""

from __future__ import annotations

import os
import signal
import time

import pytest

from stalewatch.core import forking, signals
from stalewatch.core.cache import BoundedCache
from stalewatch.core.shared import Shared
from tests.support.forks import report_from_fork


@pytest.mark.unit
def test_a_bounded_cache_keeps_the_newest_stored_and_reads_without_its_lock() -> None:
    cache: BoundedCache[str, int] = BoundedCache(3)
    for n, key in enumerate("abcd"):
        cache.put(key, n)
    assert list(cache.entries) == ["b", "c", "d"]  # "a", the oldest stored, went
    cache.put("b", 10)  # stored again: the newest now
    cache.put("e", 4)
    assert list(cache.entries) == ["d", "b", "e"]
    with cache.lock:  # a store in progress elsewhere does not hold a read
        assert cache.get("b") == 10 and cache.get("a") is None
    with pytest.raises(TypeError):
        cache.entries["x"] = 1  # type: ignore[index]  # a view, read-only
    cache.clear()
    assert not cache.entries


class _Thing:
    def __init__(self) -> None:
        self.alive = True
        self.forgotten = False


@pytest.mark.unit
def test_a_shared_instance_is_made_by_the_first_user_and_handed_back_by_the_last() -> None:
    made: list[_Thing] = []

    def make() -> _Thing:
        made.append(_Thing())
        return made[-1]

    shared: Shared[_Thing] = Shared(make, usable=lambda thing: thing.alive)
    first, second = shared.acquire(), shared.acquire()
    assert first is second and shared.users(first) == 2 and len(made) == 1
    assert shared.release(first) is False  # one user left
    assert shared.release(second) is True  # the last: the caller closes it
    assert shared.current is None
    third = shared.acquire()
    assert third is not first  # a new one, even while the old one is being closed
    third.alive = False  # dead (an inotify reader that died): never handed out again
    fourth = shared.acquire()
    assert fourth is not third and shared.users(third) == 1  # its user still holds it
    assert shared.release(third) is True  # ...and closes it; the current one stays
    assert shared.current is fourth


@pytest.mark.integration
def test_a_forked_child_runs_every_registered_callback_once_in_order() -> None:
    calls: list[str] = []

    class Owner:
        def __init__(self, name: str) -> None:
            self.name = name

        def forget(self) -> None:
            calls.append(self.name)

        def fail(self) -> None:
            calls.append(f"{self.name} failing")
            raise RuntimeError("one owner's bug")

    first, failing, gone = Owner("first"), Owner("second"), Owner("gone")
    forking.in_child(failing.fail)
    forking.in_child(gone.forget)  # held weakly...
    forking.in_child(first.forget)
    del gone  # ...so an owner that went away is not called
    code, report = report_from_fork(lambda: ",".join(calls))
    assert (code, report) == (0, "second failing,first")  # a failure stops no one after it
    assert calls == []  # the parent ran none of them


@pytest.mark.unit
def test_a_handled_signal_only_sets_a_flag_and_wakes_the_waiter() -> None:
    wakeup = signals.Wakeup()
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        with signals.handling({signal.SIGUSR1: wakeup.set}) as installed:
            assert installed
            os.kill(os.getpid(), signal.SIGUSR1)
            started = time.monotonic()
            assert wakeup.wait(5.0) and wakeup.is_set
            assert time.monotonic() - started < 1.0
        assert signal.getsignal(signal.SIGUSR1) is previous  # restored
    finally:
        wakeup.close()
    wakeup.set()  # closed: harmless
    wakeup.poke()


@pytest.mark.unit
def test_a_poke_wakes_a_waiter_without_setting_the_flag() -> None:
    wakeup = signals.Wakeup()
    try:
        wakeup.poke()
        started = time.monotonic()
        assert wakeup.wait(5.0) is False
        assert time.monotonic() - started < 1.0
    finally:
        wakeup.close()
