"""stalewatch.core.guard: the flag, the barrier and events, against real repos and watchers."""

from __future__ import annotations

import shutil
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from stalewatch import BindError, Event, Guard, StaleError, Status
from stalewatch.core.revisions import is_object_id
from stalewatch.guard.head import checked_revision
from tests.support.recorder import Recorder
from tests.support.repos import Repo


def started(guard: Guard) -> Guard:
    guard.start()
    assert guard.wait_ready(5), "watcher never became ready"
    return guard


def test_c3_commit_makes_the_barrier_raise_a_runtime_error(git_repo: Repo) -> None:
    loaded = git_repo.head()
    with started(Guard.for_checkout(git_repo.path)) as guard:
        rec = Recorder(guard)
        guard.check()
        new = git_repo.commit("update")
        rec.wait_for("stale", new)
        assert guard.stale
        with pytest.raises(StaleError) as info:
            guard.check()
    err = info.value
    assert isinstance(err, RuntimeError)
    assert (err.loaded_revision, err.current_revision) == (loaded, new)
    assert err.status is Status.STALE
    assert err.checkout == git_repo.path.resolve()
    message = str(err)
    assert "updated while this process was running" in message
    assert loaded[:7] in message
    assert new[:7] in message
    assert "restart" in message


def test_c4_deleted_checkout_is_unreadable_and_blocks(git_repo: Repo) -> None:
    with started(Guard.for_checkout(git_repo.path)) as guard:
        rec = Recorder(guard)
        shutil.rmtree(git_repo.path / ".git")
        rec.wait_for("unreadable")
        with pytest.raises(StaleError, match="can no longer be read") as info:
            guard.check()
        assert info.value.status is Status.UNREADABLE
        assert guard.status is not Status.UNTRACKED


def test_c4_corrupt_head_is_unreadable_even_without_watcher(git_repo: Repo) -> None:
    guard = Guard.for_checkout(git_repo.path)  # never started: every check re-reads (C9)
    (git_repo.path / ".git/HEAD").write_text("garbage\n")
    with pytest.raises(StaleError):
        guard.check()
    assert guard.status is Status.UNREADABLE
    assert "not a commit id" in (guard.snapshot().error or "")


def test_c4_moving_head_to_an_unborn_branch_is_unreadable(git_repo: Repo) -> None:
    guard = Guard.for_checkout(git_repo.path)
    git_repo.git("checkout", "-q", "--orphan", "fresh")
    with pytest.raises(StaleError):
        guard.check(strict=True)
    assert guard.status is Status.UNREADABLE


def test_c5_rebinding_while_unreadable_fails_closed_and_keeps_the_known_revision(
    git_repo: Repo,
) -> None:
    module = types.ModuleType("stalewatch_c5")
    module.__file__ = str(git_repo.path / "module.py")
    sys.modules[module.__name__] = module
    try:
        first = Guard.for_module(module.__name__)
        known = first.loaded_revision
        (git_repo.path / ".git/HEAD").write_text("garbage\n")
        with pytest.raises(BindError):
            Guard.for_module(module.__name__)  # a second import never downgrades
        with pytest.raises(StaleError):
            first.check()
        assert first.loaded_revision == known
        assert first.status is Status.UNREADABLE
    finally:
        del sys.modules[module.__name__]


def test_c5_explicit_loaded_revision_survives_an_unreadable_head(git_repo: Repo) -> None:
    known = git_repo.head()
    (git_repo.path / ".git/HEAD").write_text("garbage\n")
    guard = Guard.for_checkout(git_repo.path, loaded_revision=known)
    assert guard.loaded_revision == known
    assert guard.status is Status.UNREADABLE


def test_loaded_revision_must_be_a_full_commit_id(git_repo: Repo) -> None:
    with pytest.raises(BindError, match="full commit id"):
        Guard.for_checkout(git_repo.path, loaded_revision="abc123")


def test_c6_swapping_the_module_object_is_not_staleness(git_repo: Repo, tmp_path: Path) -> None:
    module = types.ModuleType("stalewatch_c6")
    module.__file__ = str(git_repo.path / "module.py")
    sys.modules[module.__name__] = module
    try:
        with started(Guard.for_module(module.__name__)) as guard:
            other = types.ModuleType("stalewatch_c6")
            other.__file__ = str(tmp_path / "elsewhere.py")
            sys.modules[module.__name__] = other
            guard.check(strict=True)
            assert guard.status is Status.CURRENT
    finally:
        del sys.modules[module.__name__]


def test_c8_rollback_returns_to_current_with_an_event_per_transition(git_repo: Repo) -> None:
    a = git_repo.head()
    with started(Guard.for_checkout(git_repo.path)) as guard:
        rec = Recorder(guard)
        b = git_repo.commit("b")
        rec.wait_for("stale", b)
        git_repo.git("reset", "-q", "--hard", a)
        rec.wait_for("current", a)
        guard.check()
    assert [e.status for e in rec.events] == [Status.STALE, Status.CURRENT]
    assert [e.previous_status for e in rec.events] == [Status.CURRENT, Status.STALE]


def test_c8_latch_stays_stale_after_rollback(git_repo: Repo) -> None:
    a = git_repo.head()
    guard = Guard.for_checkout(git_repo.path, latch=True)
    git_repo.commit("b")
    with pytest.raises(StaleError):
        guard.check(strict=True)
    git_repo.git("reset", "-q", "--hard", a)
    with pytest.raises(StaleError):
        guard.check(strict=True)
    assert guard.status is Status.STALE
    assert guard.snapshot().current_revision == a


def test_c10_strict_check_sees_a_commit_completed_just_before(git_repo: Repo) -> None:
    with started(Guard.for_checkout(git_repo.path)) as guard:
        for i in range(20):
            git_repo.git("commit", "-q", "--allow-empty", "-m", f"c{i}")
            with pytest.raises(StaleError):
                guard.check(strict=True)  # no waiting for the watcher
            git_repo.git("reset", "-q", "--hard", "HEAD~1")
            guard.check(strict=True)


def test_c12_events_once_in_order_with_increasing_generation(git_repo: Repo) -> None:
    a = git_repo.head()
    with started(Guard.for_checkout(git_repo.path)) as guard:
        recs = [Recorder(guard) for _ in range(3)]
        for i in range(5):
            b = git_repo.commit(f"b{i}")
            recs[0].wait_for("stale", b)
            git_repo.git("reset", "-q", "--hard", a)
            recs[0].wait_for("current", a)
    for rec in recs:
        generations = [e.generation for e in rec.events]
        assert generations == list(range(1, len(generations) + 1))
        assert rec.events == recs[0].events
    assert recs[0].events[-1].status is Status.CURRENT


def test_c12_a_raising_subscriber_stops_neither_watcher_nor_others(git_repo: Repo) -> None:
    def boom(event: Event) -> None:
        raise ValueError("subscriber bug")

    with started(Guard.for_checkout(git_repo.path)) as guard:
        guard.subscribe(boom)
        rec = Recorder(guard)
        first = git_repo.commit("one")
        rec.wait_for("stale", first)
        second = git_repo.commit("two")
        rec.wait_for("stale", second)
        assert guard.snapshot().trusted


def test_c12_unsubscribe_stops_delivery(git_repo: Repo) -> None:
    guard = Guard.for_checkout(git_repo.path)
    seen: list[Event] = []
    unsubscribe = guard.subscribe(seen.append)
    git_repo.commit("one")
    guard.refresh()
    unsubscribe()
    unsubscribe()
    git_repo.commit("two")
    guard.refresh()
    assert len(seen) == 1


def test_c12_subscriber_calling_check_does_not_deadlock(git_repo: Repo) -> None:
    guard = Guard.for_checkout(git_repo.path)
    outcomes: list[str] = []

    def reentrant(event: Event) -> None:
        try:
            guard.check(strict=True)
            outcomes.append("passed")
        except StaleError:
            outcomes.append("raised")

    guard.subscribe(reentrant)
    git_repo.commit("one")
    guard.refresh()
    assert outcomes == ["raised"]


def test_many_threads_see_old_or_new_status_never_torn(git_repo: Repo) -> None:
    with started(Guard.for_checkout(git_repo.path)) as guard:
        rec = Recorder(guard)
        go = threading.Event()
        results: list[set[str]] = []

        def reader() -> None:
            seen: set[str] = set()
            go.wait(5)
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                try:
                    guard.check()
                    seen.add("ok")
                except StaleError as exc:
                    seen.add(f"stale:{exc.current_revision}")
                snap = guard.snapshot()
                assert snap.status.blocks == (snap.current_revision != snap.loaded_revision)
            results.append(seen)

        threads = [threading.Thread(target=reader) for _ in range(8)]
        for t in threads:
            t.start()
        go.set()
        new = git_repo.commit("flip")
        rec.wait_for("stale", new)
        for t in threads:
            t.join(5)
    assert len(results) == 8
    for seen in results:
        assert seen <= {"ok", f"stale:{new}"}


def test_stop_joins_within_a_second_and_twice_is_harmless(git_repo: Repo) -> None:
    guard = started(Guard.for_checkout(git_repo.path))
    t0 = time.monotonic()
    guard.stop()
    assert time.monotonic() - t0 < 1.0
    guard.stop()
    assert not guard.snapshot().trusted
    assert not any(t.name.startswith("stalewatch") for t in threading.enumerate())


def test_stopped_guard_still_blocks_by_rereading(git_repo: Repo) -> None:
    guard = started(Guard.for_checkout(git_repo.path))
    guard.stop()
    git_repo.commit("while stopped")
    with pytest.raises(StaleError):
        guard.check()


def test_snapshot_and_event_are_frozen_and_json(git_repo: Repo) -> None:
    guard = Guard.for_checkout(git_repo.path)
    seen: list[Event] = []
    guard.subscribe(seen.append)
    git_repo.commit("one")
    guard.refresh()
    snap = guard.snapshot()
    with pytest.raises(AttributeError):
        snap.status = Status.CURRENT  # type: ignore[misc]
    assert snap.generation == 1
    import json

    data = json.loads(seen[0].to_json())
    assert data["status"] == "stale"
    assert data["generation"] == 1
    assert data["checkout"] == str(git_repo.path.resolve())


def test_c7_renaming_the_checked_out_branch_is_not_a_false_alarm(git_repo: Repo) -> None:
    # git renames the ref before rewriting HEAD: for a moment HEAD names a missing ref.
    with started(Guard.for_checkout(git_repo.path)) as guard:
        rec = Recorder(guard)
        for i in range(5):
            git_repo.git("branch", "-m", f"renamed-{i}")
            guard.check(strict=True)
        sentinel = git_repo.commit("sentinel")
        first = rec.wait_for("stale", sentinel)
        assert rec.events[0] is first  # no unreadable/current pair before it


def test_c12_reads_are_applied_in_the_order_they_were_made(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = Guard.for_checkout(git_repo.path)
    real = guard._read
    entered, release = threading.Event(), threading.Event()
    calls = iter([True])

    def slow_first_read(chain: list[Path] | None = None) -> str | None:
        value = real(chain)  # reads the old HEAD...
        if next(calls, False):
            entered.set()
            release.wait(5)  # ...and is slow to apply it
        return value

    monkeypatch.setattr(guard, "_read", slow_first_read)
    slow = threading.Thread(target=guard.refresh)
    slow.start()
    assert entered.wait(5)
    new = git_repo.commit("lands while the slow read is in flight")
    fast_done = threading.Event()
    fast = threading.Thread(target=lambda: (guard.refresh(), fast_done.set()))
    fast.start()
    assert not fast_done.wait(0.2)  # the later read waits for the earlier one to apply
    release.set()
    slow.join(5)
    fast.join(5)
    assert guard.snapshot().current_revision == new  # the later read wins
    assert guard.status is Status.STALE


def test_stop_returns_within_a_second_even_during_a_slow_subscriber(
    git_repo: Repo, caplog: pytest.LogCaptureFixture
) -> None:
    inside, release = threading.Event(), threading.Event()
    names: list[str] = []

    def slow(event: Event) -> None:
        names.append(threading.current_thread().name)
        inside.set()
        release.wait(10)

    guard = started(Guard.for_checkout(git_repo.path))
    guard.subscribe(slow)
    git_repo.commit("delivered to a slow subscriber on the watcher thread")
    assert inside.wait(5)
    t0 = time.monotonic()
    guard.stop()
    assert time.monotonic() - t0 < 1.5
    # Every other thread is gone already; only the one in the callback (the inotify reader
    # that ran the turn, or a worker) waits for it.
    busy = [t.name for t in threading.enumerate() if t.name.startswith("stalewatch")]
    assert busy == names
    assert "still in a callback" in caplog.text
    release.set()


def test_c9_wait_ready_returns_once_a_polling_watcher_runs(git_repo: Repo) -> None:
    """Polling is never trusted: wait_ready() means "running", not "trusted" (issue 12)."""
    from stalewatch import LocalSource

    source = LocalSource(poll=True, poll_interval=0.1)
    with Guard.for_checkout(git_repo.path, source=source) as guard:
        assert guard.wait_ready(5)
        snap = guard.snapshot()
        assert (snap.mode, snap.trusted) == ("polling", False)  # so every check re-reads
        git_repo.commit("seen by the re-read, before any poll")
        with pytest.raises(StaleError):
            guard.check()


def test_a_misspelt_keyword_is_a_type_error_not_ignored(git_repo: Repo) -> None:
    """A typo such as latchh=True never builds a guard without the latch asked for."""
    with pytest.raises(TypeError):
        Guard.for_checkout(git_repo.path, latchh=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Guard.for_checkout(git_repo.path, loaded_revison="0" * 40)  # type: ignore[call-arg]


def test_bytes_are_not_a_loaded_revision() -> None:
    """A loaded revision is text: bytes (or a list of ints) are no commit id."""
    with pytest.raises(BindError):
        checked_revision(b"a" * 40)  # type: ignore[arg-type]
    assert not is_object_id([ord("a")] * 40)  # type: ignore[arg-type]


def test_a_guard_given_bytes_refuses_them_instead_of_being_stale_forever(git_repo: Repo) -> None:
    """Bytes would never equal HEAD's text: refused, not a guard stale for ever."""
    revision = git_repo.git("rev-parse", "HEAD").strip()
    with pytest.raises(BindError):
        Guard.for_checkout(git_repo.path, loaded_revision=revision.encode())  # type: ignore[arg-type]
