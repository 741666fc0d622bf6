"""stalewatch.watching.local: what wakes the watcher (C7, C11) and the faults it survives (C9)."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import warnings
from pathlib import Path

import pytest

from conftest import Recorder, Repo, make_repo
from stalewatch import Guard, LocalSource, StaleError
from stalewatch.git.refs import GitDirs, find_git_dirs
from stalewatch.watching import local as watcher_module
from stalewatch.watching import observers as observers_module
from stalewatch.watching.plan import Relevance


@pytest.fixture
def crashes(monkeypatch: pytest.MonkeyPatch) -> list[threading.ExceptHookArgs]:
    """Threads that die of an exception during the test (a fault the test injects)."""
    seen: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", seen.append)
    return seen


def watcher_of(guard: Guard) -> watcher_module.Watcher:
    watcher = guard._watch
    assert isinstance(watcher, watcher_module.Watcher)
    return watcher


def started(guard: Guard) -> Guard:
    guard.start()
    assert guard.wait_ready(5), "watcher never became ready"
    return guard


def test_c7_fetch_tags_branches_gc_and_index_writes_do_not_flip(git_repo: Repo, tmp_path: Path) -> None:
    upstream = make_repo(tmp_path / "upstream")
    git_repo.git("remote", "add", "origin", str(upstream.path))
    with started(Guard.for_checkout(git_repo.path)) as guard:
        rec = Recorder(guard)
        upstream.commit("upstream work")
        git_repo.git("fetch", "-q", "origin")
        git_repo.git("tag", "v1")
        git_repo.git("tag", "-a", "v2", "-m", "annotated")
        git_repo.git("branch", "side")
        git_repo.git("branch", "-D", "side")
        git_repo.git("gc", "-q")
        git_repo.git("pack-refs", "--all")
        git_repo.write("untracked.txt", "x")
        git_repo.git("add", "untracked.txt")  # index write
        git_repo.git("reset", "-q")
        guard.check()
        # Events are handled in order: the first event must be this sentinel commit.
        sentinel = git_repo.commit("sentinel")
        first = rec.wait_for("stale", sentinel)
        assert rec.events[0] is first
        assert first.generation == 1


def test_each_change_is_resolved_once_the_guard_hands_its_ref_chain_to_the_watcher(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stalewatch.git import refs as refs_module
    from stalewatch.watching import plan as plan_module

    source = LocalSource(verify_interval=3600)
    with started(Guard.for_checkout(git_repo.path, source=source)) as guard:
        rec = Recorder(guard)
        reads: list[str] = []
        real_resolve, real_chain = refs_module.resolve_head, refs_module.head_chain

        def counted_chain(dirs: GitDirs) -> list[Path]:
            reads.append("chain")
            return real_chain(dirs)

        def counted_resolve(dirs: GitDirs, chain: list[Path] | None = None) -> str | None:
            reads.append("read")
            return real_resolve(dirs, chain)

        monkeypatch.setattr(plan_module, "head_chain", counted_chain)
        monkeypatch.setattr(refs_module, "resolve_head", counted_resolve)
        first = git_repo.commit("first")
        rec.wait_for("stale", first)
        git_repo.git("checkout", "-q", "-b", "feature/x")  # the plan moves: refs/heads/feature
        second = git_repo.commit("second")
        rec.wait_for("stale", second)  # the worker is serial: the first wake-up's re-plan is done
        assert reads and set(reads) == {"read"}  # the watcher never resolved HEAD on its own


def test_only_writes_that_can_move_head_wake_the_worker(git_repo: Repo) -> None:
    ready = threading.Event()
    dirs = find_git_dirs(git_repo.path.resolve())
    assert dirs is not None
    watch = LocalSource(verify_interval=3600).watch(dirs, lambda: None, lambda ok, mode: ok and ready.set())
    assert isinstance(watch, watcher_module.Watcher)
    seen: list[Relevance] = []
    woke = threading.Event()
    real = watch.signal

    def spy(relevance: Relevance) -> None:  # the handler's decision, before any coalescing
        if relevance is not Relevance.NONE:
            seen.append(relevance)
        if relevance is Relevance.REF:
            woke.set()
        real(relevance)

    watch.signal = spy  # type: ignore[method-assign]
    watch.start()
    try:
        assert ready.wait(5)
        for _ in range(200):  # opened/closed-no-write traffic
            (git_repo.path / ".git/HEAD").read_bytes()
            (git_repo.path / ".git/refs/heads/main").read_bytes()
            (git_repo.path / ".git/config").read_bytes()
        (git_repo.path / ".git/description").write_text("unrelated write\n")
        (git_repo.path / ".git/index").write_bytes((git_repo.path / ".git/index").read_bytes())
        git_repo.git("update-ref", "refs/heads/other", "HEAD")  # not HEAD's branch (C7)
        git_repo.git("tag", "v1")
        # Events arrive in order: the sentinel commit must be the first thing that matters.
        git_repo.git("commit", "-q", "--allow-empty", "-m", "sentinel")
        assert woke.wait(5)
        assert seen == [Relevance.REF]
    finally:
        watch.stop()


def test_c11_linked_worktree_commit_and_checkout_are_seen(git_repo: Repo, tmp_path: Path) -> None:
    git_repo.git("worktree", "add", "-q", "-b", "wt", str(tmp_path / "wt"))
    wt = Repo(tmp_path / "wt")
    with started(Guard.for_checkout(wt.path)) as guard:
        rec = Recorder(guard)
        new = wt.commit("in worktree")  # ref lives in the common dir
        rec.wait_for("stale", new)
        wt.git("checkout", "-q", "--detach", "HEAD~1")  # HEAD lives in the worktree's git dir
        rec.wait_for("current")


def test_c11_packed_only_ref_then_commit(git_repo: Repo) -> None:
    git_repo.git("pack-refs", "--all")
    with started(Guard.for_checkout(git_repo.path)) as guard:
        rec = Recorder(guard)
        new = git_repo.commit("after gc")
        rec.wait_for("stale", new)


def test_c9_handler_exception_does_not_kill_the_watcher(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    source = LocalSource(verify_interval=0.2)  # re-verification recovers the lost wake-up
    with started(Guard.for_checkout(git_repo.path, source=source)) as guard:
        rec = Recorder(guard)
        watcher = watcher_of(guard)
        real = watcher.signal
        failures = iter([True])

        def flaky(relevance: Relevance) -> None:
            if relevance is not Relevance.NONE and next(failures, False):
                raise OSError("handler bug")
            real(relevance)

        monkeypatch.setattr(watcher, "signal", flaky)
        first = git_repo.commit("the handler fails on this one's first event")
        rec.wait_for("stale", first)
        second = git_repo.commit("and the dispatch thread is still alive for this one")
        rec.wait_for("stale", second)
        assert guard.snapshot().trusted
    assert "error handling" in caplog.text


def test_c9_dead_observer_is_distrusted_then_restarted(
    git_repo: Repo, crashes: list[threading.ExceptHookArgs], caplog: pytest.LogCaptureFixture
) -> None:
    with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=0.2))) as guard:
        rec = Recorder(guard)
        watcher = watcher_of(guard)
        observer = watcher._observer
        assert observer is not None
        # A malformed queue entry makes watchdog's dispatch loop raise: the thread dies
        # silently, exactly as with a bug inside watchdog.
        observer.event_queue.put((None, None))
        observer.join(5)
        assert not observer.is_alive()
        assert crashes and crashes[0].thread is observer
        new = git_repo.commit("while the observer was dead")
        rec.wait_for("stale", new)  # seen by the restarted observer or the resync
        assert guard.wait_ready(5)
        assert watcher._observer is not observer  # restarted with a fresh observer
        with pytest.raises(StaleError):
            guard.check()
        git_repo.git("reset", "-q", "--hard", "HEAD~1")
        rec.wait_for("current")
        again = git_repo.commit("after restart")
        rec.wait_for("stale", again)
    assert "died" in caplog.text


def test_c9_queue_overflow_resyncs_an_update_whose_event_was_lost(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=3600))) as guard:
        rec = Recorder(guard)
        watcher = watcher_of(guard)
        real = watcher.signal
        monkeypatch.setattr(watcher, "signal", lambda relevance: None)  # events lost
        lost = git_repo.commit("its events fall into the overflow")
        guard.check()  # the flag cannot know yet: this is what an overflow does
        monkeypatch.setattr(watcher, "signal", real)
        # watchdog's own warning is the only signal it gives of an overflow.
        logging.getLogger("watchdog.observers.inotify_c").warning(
            "Inotify queue overflowed; filesystem events were lost"
        )
        rec.wait_for("stale", lost)
        assert guard.wait_ready(5)
        with pytest.raises(StaleError):
            guard.check()


def test_c9_silenced_watchdog_logger_is_reported(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    quiet = logging.getLogger("watchdog")
    before = quiet.level
    quiet.setLevel(logging.ERROR)  # a common way to quiet watchdog
    try:
        with started(Guard.for_checkout(git_repo.path)):
            pass
    finally:
        quiet.setLevel(before)
    assert "overflows go unnoticed" in caplog.text


def test_c9_real_inotify_overflow_is_detected(git_repo: Repo) -> None:
    knob = Path("/proc/sys/fs/inotify/max_queued_events")
    try:
        old = knob.read_text()
        knob.write_text("16\n")  # applies to inotify instances created from now on
    except OSError:
        pytest.skip("cannot lower fs.inotify.max_queued_events here")
    try:
        with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=60))) as guard:
            rec = Recorder(guard)
            overflowed = threading.Event()
            watcher = guard._watch
            assert isinstance(watcher, watcher_module.Watcher)
            real = watcher.queue_overflowed

            def spy() -> None:
                overflowed.set()
                real()

            watcher.queue_overflowed = spy  # type: ignore[method-assign]
            # Hold watchdog's reader back? Not possible; flood faster than it drains.
            refs = git_repo.path / ".git/refs/heads"
            head = git_repo.head()
            for i in range(20000):
                tmp = refs / f"flood{i % 50}.lock"
                tmp.write_text(head + "\n")
                tmp.replace(refs / f"flood{i % 50}")
                if overflowed.is_set():
                    break
            assert overflowed.wait(10), "the kernel queue never overflowed"
            assert guard.wait_ready(5)
            new = git_repo.commit("after overflow")
            rec.wait_for("stale", new)
    finally:
        knob.write_text(old)


class _LimitedObserver(observers_module._Native):  # type: ignore[misc]
    """A real native observer on a machine whose inotify watch limit is exhausted."""

    def schedule(self, *args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOSPC, "inotify watch limit reached")


def test_c9_watch_limit_falls_back_to_polling_logged_once(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(observers_module, "native_observer", _LimitedObserver)
    guard = Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=0.2, poll_interval=0.1))
    with guard:
        rec = Recorder(guard)
        assert guard.wait_ready(5)  # the watcher runs (polling) ...
        assert not guard.snapshot().trusted  # ... but polling is never trusted for the fast path
        new = git_repo.commit("while polling")
        with pytest.raises(StaleError):
            guard.check()  # the barrier re-reads synchronously
        snap = guard.snapshot()
        assert snap.mode == "polling"
        assert not snap.trusted
        rec.wait_for("stale", new)
    assert caplog.text.count("watch limit reached") == 1


class _LimitAfter(observers_module._Native):  # type: ignore[misc]
    """A real native observer whose inotify watch limit runs out after ``allowed`` watches."""

    allowed = 0

    def schedule(self, *args: object, **kwargs: object) -> object:
        if _LimitAfter.allowed <= 0:
            raise OSError(errno.ENOSPC, "inotify watch limit reached")
        _LimitAfter.allowed -= 1
        return super().schedule(*args, **kwargs)


def test_c9_watch_limit_reached_part_way_falls_back_to_polling(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(observers_module, "native_observer", _LimitAfter)
    monkeypatch.setattr(_LimitAfter, "allowed", 2)  # fewer than the plan needs
    source = LocalSource(verify_interval=0.2, poll_interval=0.1)
    with Guard.for_checkout(git_repo.path, source=source) as guard:
        rec = Recorder(guard)
        assert guard.wait_ready(5)  # running, polling: ready, never trusted
        assert guard.snapshot().mode == "polling" and not guard.snapshot().trusted
        new = git_repo.commit("while polling")
        with pytest.raises(StaleError):
            guard.check()
        rec.wait_for("stale", new)


def test_c9_watch_limit_reached_when_head_moves_to_a_new_directory(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(observers_module, "native_observer", _LimitAfter)
    monkeypatch.setattr(_LimitAfter, "allowed", 100)
    source = LocalSource(verify_interval=3600, poll_interval=0.1)
    with started(Guard.for_checkout(git_repo.path, source=source)) as guard:
        rec = Recorder(guard)
        _LimitAfter.allowed = 0  # the limit is reached by another process meanwhile
        git_repo.git("checkout", "-q", "-b", "feature/deep")  # needs refs/heads/feature watched
        new = git_repo.commit("on the new branch")
        rec.wait_for("stale", new)
        assert guard.snapshot().mode == "polling"
        assert not guard.snapshot().trusted


def test_c9_forced_polling_still_delivers_events(git_repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STALEWATCH_POLL", "1")
    monkeypatch.setenv("STALEWATCH_POLL_INTERVAL", "0.1")
    with Guard.for_checkout(git_repo.path) as guard:
        rec = Recorder(guard)
        new = git_repo.commit("polled")
        rec.wait_for("stale", new)
        assert guard.snapshot().mode == "polling"


def test_c9_git_dir_deleted_and_recreated_rewatches(git_repo: Repo, tmp_path: Path) -> None:
    backup = tmp_path / "backup.git"
    shutil.copytree(git_repo.path / ".git", backup)
    with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=0.1))) as guard:
        rec = Recorder(guard)
        shutil.rmtree(git_repo.path / ".git")
        rec.wait_for("unreadable")
        with pytest.raises(StaleError):
            guard.check()
        shutil.copytree(backup, git_repo.path / ".git")
        rec.wait_for("current")
        assert guard.wait_ready(5)
        new = git_repo.commit("after re-creation")  # seen only if watches were re-made
        rec.wait_for("stale", new)


def test_c4_checkout_swapped_by_rename_is_seen_at_once(git_repo: Repo, tmp_path: Path) -> None:
    replacement = tmp_path / "replacement"
    subprocess_clone = Repo(tmp_path)
    subprocess_clone.git("clone", "-q", str(git_repo.path), str(replacement))
    newer = Repo(replacement).commit("the new release")
    with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=3600))) as guard:
        rec = Recorder(guard)
        git_repo.path.rename(tmp_path / "old-release")  # an atomic deploy: swap directories
        replacement.rename(git_repo.path)
        rec.wait_for("stale", newer)  # not 1 s later at the health tick, and not never
        assert guard.wait_ready(5)


def test_c9_forked_child_does_not_trust_the_parents_watcher(git_repo: Repo) -> None:
    with started(Guard.for_checkout(git_repo.path)) as guard:
        rec = Recorder(guard)
        read_fd, write_fd = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
            pid = os.fork()
        if pid == 0:  # child: report, then leave without running pytest's teardown
            code = 1
            try:
                trusted_after_fork = guard.snapshot().trusted
                git_repo.git("commit", "-q", "--allow-empty", "-m", "in child")
                try:
                    guard.check()
                    raised = False
                except StaleError:
                    raised = True
                os.write(write_fd, f"{trusted_after_fork},{raised}".encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write_fd)
        _, status = os.waitpid(pid, 0)
        report = os.read(read_fd, 100).decode()
        os.close(read_fd)
        assert os.waitstatus_to_exitcode(status) == 0
        assert report == "False,True"
        # The parent's watcher is untouched by the child and sees the child's commit.
        rec.wait_for("stale")
        assert guard.snapshot().trusted


def test_c9_dead_inotify_reader_thread_is_noticed_and_restarted(
    git_repo: Repo, crashes: list[threading.ExceptHookArgs], caplog: pytest.LogCaptureFixture
) -> None:
    # Re-verification set to an hour: only the liveness check can rescue this guard.
    with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=3600))) as guard:
        rec = Recorder(guard)
        watcher = watcher_of(guard)
        readers = [t for t in watcher._reader_threads if type(t).__name__ == "InotifyFD"]
        assert len(readers) == 1
        reader = readers[0]

        def boom(event: object) -> None:
            raise RuntimeError("watchdog reader bug")

        reader.handle_event = boom  # type: ignore[attr-defined]
        new = git_repo.commit("the reader dies on this event")
        reader.join(5)
        assert not reader.is_alive()
        rec.wait_for("stale", new)  # seen after the restart, within the liveness period
        assert guard.wait_ready(5)
    assert "died" in caplog.text


def test_c11_reftable_is_watched_through_tables_list_and_resolved_by_git(git_repo: Repo) -> None:
    # git 2.39 on this machine cannot create reftable repositories; the layout marker
    # makes stalewatch treat the repository as one, and git resolves HEAD as usual.
    tables = git_repo.path / ".git/reftable/tables.list"
    tables.parent.mkdir()
    tables.write_text("")
    with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=3600))) as guard:
        rec = Recorder(guard)
        assert guard.loaded_revision == git_repo.head()
        new = git_repo.commit("reftable update")
        # What a reftable git does on every ref update: rename tables.list.lock over it.
        lock = tables.with_name("tables.list.lock")
        lock.write_text("0x000001-0x000002-0.ref\n")
        lock.replace(tables)
        rec.wait_for("stale", new)


def test_c12_a_burst_coalesces_and_the_final_state_arrives(git_repo: Repo) -> None:
    a = git_repo.head()
    b = git_repo.commit("b")
    git_repo.git("reset", "-q", "--hard", a)
    ref = git_repo.path / ".git/refs/heads/main"
    lock = ref.with_name("main.lock")
    with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=3600))) as guard:
        rec = Recorder(guard)
        writes = 201
        for i in range(writes):  # a rebase-like burst, ending on b
            lock.write_text((b if i % 2 == 0 else a) + "\n")
            lock.replace(ref)
        # The burst's events may still be in flight: the final one must name b.
        while guard.snapshot().current_revision != b:
            rec.wait_for("stale", b)
        assert len(rec.events) <= writes
        assert rec.events[-1].current_revision == b
        assert [e.generation for e in rec.events] == list(range(1, len(rec.events) + 1))
        assert guard.snapshot().current_revision == b


def test_c9_a_failing_worker_turn_is_survived(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=0.1))) as guard:
        rec = Recorder(guard)
        watcher = watcher_of(guard)
        real = watcher._healthy
        failed = threading.Event()

        def flaky() -> bool:
            if not failed.is_set():
                failed.set()
                raise OSError("transient failure inside the worker")
            return real()

        monkeypatch.setattr(watcher, "_healthy", flaky)
        assert failed.wait(5)
        new = git_repo.commit("after the failure")
        rec.wait_for("stale", new)
        assert guard.wait_ready(5)
    assert "failed; restarting" in caplog.text


def test_watchdogs_rename_hold_is_removed_for_our_emitters(git_repo: Repo) -> None:
    # watchdog holds a rename's first half up to 0.5 s and, in a race, stalls every
    # later event of the directory behind it (11 of 5,000 ref updates measured). This
    # pins the internal setting stalewatch relies on, so a watchdog upgrade that moves
    # it fails here instead of bringing back half-second detections.
    with started(Guard.for_checkout(git_repo.path)) as guard:
        watcher = watcher_of(guard)
        observer = watcher._observer
        assert observer is not None
        emitters = list(observer.emitters)
        assert emitters
        for emitter in emitters:
            assert isinstance(emitter, observers_module._Emitter)
            assert emitter._inotify._move_event_grouper._queue.delay == 0


def test_c11_branch_directory_packed_away_and_recreated_is_rewatched(
    git_repo: Repo, caplog: pytest.LogCaptureFixture
) -> None:
    git_repo.git("checkout", "-q", "-b", "feature/x")
    source = LocalSource(verify_interval=3600)  # only events can explain what follows
    with started(Guard.for_checkout(git_repo.path, source=source)) as guard:
        rec = Recorder(guard)
        for i in range(3):
            git_repo.git("pack-refs", "--all")  # removes refs/heads/feature/ itself
            assert not (git_repo.path / ".git/refs/heads/feature").exists()
            new = git_repo.commit(f"recreates refs/heads/feature/x ({i})")
            rec.wait_for("stale", new)
        assert guard.snapshot().trusted
    assert "died" not in caplog.text


def test_c11_switching_branch_in_the_same_directory_then_committing_is_seen(git_repo: Repo) -> None:
    # The switch is resolved while the old plan (watching main) still sorts events: a
    # commit on the new branch landing before the plan moves must not be ignored.
    git_repo.git("branch", "other")
    git_repo.commit("main moves on, so the switch changes HEAD's commit")
    source = LocalSource(verify_interval=3600)  # only events can explain what follows
    with started(Guard.for_checkout(git_repo.path, source=source)) as guard:
        rec = Recorder(guard)
        entered, release = threading.Event(), threading.Event()
        first = iter([True])

        def hold_first(event: object) -> None:  # a slow subscriber, held by the test
            if next(first, False):
                entered.set()
                release.wait(5)

        guard.subscribe(hold_first)
        git_repo.git("switch", "-q", "other")
        assert entered.wait(5)  # the worker is inside the switch's event now
        new = git_repo.commit("on other, before the watcher re-plans")
        release.set()
        while guard.snapshot().current_revision != new:
            rec.wait_for("stale", new)
