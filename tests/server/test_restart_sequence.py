"""The restart sequence's own bookkeeping, without a daemon (pure logic around a real guard)."""

from __future__ import annotations

import threading

import pytest

from stalewatch import Guard
from stalewatch.core.phases import RestartState
from stalewatch.server.registry import Registry
from stalewatch.server.restart.policy import RestartPolicy
from stalewatch.server.restart.sequence import Restarter
from tests.support.daemons import WAIT
from tests.support.repos import Repo


def test_a_sequence_thread_that_could_not_start_is_started_by_the_next_submit(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of threads once (RuntimeError) must not leave the checkout without restarts."""
    guard = Guard.for_checkout(git_repo.path)
    restarter = Restarter(
        "checkout",
        git_repo.path,
        RestartPolicy(action=("true",)),
        guard=guard,
        registry=Registry(),
        publish=lambda state: None,
        rebind=lambda revision: None,
    )
    ran = threading.Event()
    monkeypatch.setattr(restarter, "_run", ran.set)
    start = threading.Thread.start
    calls = []

    def start_once_failing(thread: threading.Thread) -> None:
        calls.append(thread.name)
        if len(calls) == 1:
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_once_failing)
    with pytest.raises(RuntimeError):
        restarter.submit()
    restarter.submit()
    try:
        assert ran.wait(WAIT), calls
    finally:
        restarter.stop()


def test_a_submit_during_an_internal_error_is_not_lost(git_repo: Repo) -> None:
    """The failing thread is still registered when another thread submits: it must look again."""
    states: list[RestartState] = []
    restarter = Restarter(
        "checkout",
        git_repo.path,
        RestartPolicy(action=("true",)),
        guard=Guard.for_checkout(git_repo.path),
        registry=Registry(),
        publish=states.append,
        rebind=lambda revision: None,
    )
    looked_again = threading.Event()
    calls = []

    def wanted() -> str | None:
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            restarter.submit()  # as the watcher's thread would, while this one runs
            raise RuntimeError("a bug")
        looked_again.set()
        return None

    restarter._wanted = wanted  # type: ignore[method-assign]
    restarter.submit()
    try:
        assert looked_again.wait(WAIT), calls
        assert states[0].reason == "internal error (logged)"
    finally:
        restarter.stop()
