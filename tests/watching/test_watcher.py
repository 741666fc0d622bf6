"""stalewatch.watching.local: what wakes the watcher (C7, C11) and the faults it survives (C9)."""

from __future__ import annotations

import dataclasses
import errno
import logging
import shutil
import struct
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stalewatch import Guard, LocalSource, StaleError
from stalewatch.git.refs import GitDirs, find_git_dirs
from stalewatch.watching import inotify as inotify_module
from stalewatch.watching import inotify_calls
from stalewatch.watching import local as watcher_module
from stalewatch.watching import observer as observer_module
from stalewatch.watching.plan import Relevance
from stalewatch.watching.source import OnChange, OnHealth, Watch
from stalewatch.watching.watcher import halt
from tests.support.forks import report_from_fork
from tests.support.notifiers import inotify_only
from tests.support.recorder import Recorder
from tests.support.repos import Repo, make_repo


@pytest.fixture
def crashes(monkeypatch: pytest.MonkeyPatch) -> list[threading.ExceptHookArgs]:
    """Threads that die of an exception during the test (a fault the test injects)."""
    seen: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", seen.append)
    return seen


class Limit:
    """The user's watch limit, as another process would exhaust it: real watches until
    ``allowed`` runs out, then ``ENOSPC`` from the kernel's answer (either notifier)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, allowed: int) -> None:
        self.allowed = allowed
        for kind in (inotify_module.Inotify, observer_module.ObserverNotifier):
            monkeypatch.setattr(kind, "add", self._limited(kind.add))

    def _limited(self, real: Callable[..., object]) -> Callable[..., object]:
        def add(*args: object, **kwargs: object) -> object:
            if self.allowed <= 0:
                raise OSError(errno.ENOSPC, "inotify_add_watch: inotify watch limit reached")
            self.allowed -= 1
            return real(*args, **kwargs)

        return add


@pytest.fixture
def watch_limit(monkeypatch: pytest.MonkeyPatch) -> Iterator[Limit]:
    yield Limit(monkeypatch, 0)


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
    from stalewatch.git.files import Files

    source = LocalSource(verify_interval=3600)
    with started(Guard.for_checkout(git_repo.path, source=source)) as guard:
        rec = Recorder(guard)
        reads: list[str] = []
        real_resolve, real_chain = Files.resolve_head, Files.head_chain

        def counted_chain(store: Files, dirs: GitDirs) -> list[Path]:
            reads.append("chain")
            return real_chain(store, dirs)

        def counted_resolve(store: Files, dirs: GitDirs, chain: list[Path] | None = None) -> str | None:
            reads.append("read")
            return real_resolve(store, dirs, chain)

        monkeypatch.setattr(Files, "head_chain", counted_chain)
        monkeypatch.setattr(Files, "resolve_head", counted_resolve)
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


def test_c9_a_worker_killed_in_a_turn_is_replaced_and_its_checkout_restarted(
    git_repo: Repo, caplog: pytest.LogCaptureFixture
) -> None:
    # Re-verification set to an hour: only the fault report can rescue this guard.
    with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=3600))) as guard:
        rec = Recorder(guard)
        killed: list[threading.Thread] = []
        exited = threading.Event()

        def exit_once(event: object) -> None:  # sys.exit() in a callback ends the thread
            if not killed:
                killed.append(threading.current_thread())
                exited.set()
                raise SystemExit("a subscriber exits its thread")

        guard.subscribe(exit_once)
        first = git_repo.commit("its event kills the worker")
        rec.wait_for("stale", first)
        assert exited.wait(5)
        killed[0].join(5)
        assert not killed[0].is_alive()
        assert guard.wait_ready(5)  # distrusted when the worker died, restarted since
        second = git_repo.commit("seen by the new worker")
        rec.wait_for("stale", second)
        with pytest.raises(StaleError):
            guard.check()
    assert "died" in caplog.text


@inotify_only
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
        # What the kernel writes into the instance when its queue overflows.
        instance = watcher._watches.instance
        assert instance is not None
        overflow = inotify_calls.IN_Q_OVERFLOW
        instance._dispatch(struct.pack("iIII", -1, overflow, 0, 0))
        rec.wait_for("stale", lost)
        assert guard.wait_ready(5)
        with pytest.raises(StaleError):
            guard.check()


@inotify_only
@pytest.mark.serial  # the queue's length is the machine's: other tests' instances would overflow
def test_c9_real_inotify_overflow_is_detected_even_with_every_logger_silenced(git_repo: Repo) -> None:
    # The kernel's overflow record is read from the instance itself: quieting watchdog's
    # logger (or ours) no longer hides it, as it did while it was only a log line.
    knob = Path("/proc/sys/fs/inotify/max_queued_events")
    loggers = [logging.getLogger(name) for name in ("watchdog", "stalewatch")]
    levels = [logger.level for logger in loggers]
    try:
        old = knob.read_text()
        knob.write_text("16\n")  # applies to inotify instances created from now on
    except OSError:
        pytest.skip("cannot lower fs.inotify.max_queued_events here")
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=60))) as guard:
            rec = Recorder(guard)
            overflowed = threading.Event()
            watcher = watcher_of(guard)
            real = watcher.on_overflow

            def spy() -> None:
                overflowed.set()
                real()

            watcher.on_overflow = spy  # type: ignore[method-assign]
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
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def test_c9_watch_limit_falls_back_to_polling_logged_once(
    git_repo: Repo, watch_limit: Limit, caplog: pytest.LogCaptureFixture
) -> None:
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
    assert caplog.text.count("watch limit reached") == 1  # retries fail quietly


def test_c9_watch_limit_reached_part_way_falls_back_to_polling(git_repo: Repo, watch_limit: Limit) -> None:
    watch_limit.allowed = 2  # fewer than the plan needs
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
    git_repo: Repo, watch_limit: Limit
) -> None:
    watch_limit.allowed = 100
    source = LocalSource(verify_interval=3600, poll_interval=0.1)
    with started(Guard.for_checkout(git_repo.path, source=source)) as guard:
        rec = Recorder(guard)
        watcher = watcher_of(guard)
        polling = threading.Event()
        real = watcher._health._on_health

        def spy(trusted: bool, mode: str) -> None:
            if mode == "polling" and not trusted:
                polling.set()
            real(trusted, mode)

        watcher._health._on_health = spy
        watch_limit.allowed = 0  # the limit is reached by another process meanwhile
        git_repo.git("checkout", "-q", "-b", "feature/deep")  # needs refs/heads/feature watched
        new = git_repo.commit("on the new branch")
        rec.wait_for("stale", new)  # seen, whether before or after the switch
        # The switch follows the re-plan that hit the limit: wait for it, never assume
        # it came before the event (the commit may be read by the resolve before it).
        assert polling.wait(10)
        assert guard.snapshot().mode == "polling"
        assert not guard.snapshot().trusted


def test_c9_watch_limit_lifted_returns_to_native_notification(
    git_repo: Repo, watch_limit: Limit, caplog: pytest.LogCaptureFixture
) -> None:
    native = threading.Event()
    source = LocalSource(verify_interval=3600, poll_interval=0.1)
    with Guard.for_checkout(git_repo.path, source=source) as guard:
        rec = Recorder(guard)
        assert guard.wait_ready(5)  # the watcher runs: polling, never trusted
        assert guard.snapshot().mode == "polling" and not guard.snapshot().trusted
        watcher = watcher_of(guard)
        real = watcher._health._on_health

        def spy(trusted: bool, mode: str) -> None:
            if (trusted, mode) == (True, "native"):
                native.set()
            real(trusted, mode)

        watcher._health._on_health = spy
        watch_limit.allowed = 1000  # another process let go of its watches
        # The guard (and a daemon's clients) are told: trusted again, mode native.
        assert native.wait(10), "never returned to native notification"
        assert guard.snapshot().mode == "native" and guard.snapshot().trusted
        new = git_repo.commit("seen natively: re-verification is off")
        rec.wait_for("stale", new)
    assert "available again" in caplog.text


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

        def child() -> str:
            trusted_after_fork = guard.snapshot().trusted
            git_repo.git("commit", "-q", "--allow-empty", "-m", "in child")
            try:
                guard.check()
                raised = False
            except StaleError:
                raised = True
            return f"{trusted_after_fork},{raised}"

        code, report = report_from_fork(child)
        assert code == 0, report
        assert report == "False,True"
        # The parent's watcher is untouched by the child and sees the child's commit.
        rec.wait_for("stale")
        assert guard.snapshot().trusted


@inotify_only
def test_c9_dead_inotify_reader_thread_is_noticed_and_restarted(
    git_repo: Repo, caplog: pytest.LogCaptureFixture
) -> None:
    # Re-verification set to an hour: only the reader's death report can rescue this guard.
    with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=3600))) as guard:
        rec = Recorder(guard)
        watcher = watcher_of(guard)
        instance = watcher._watches.instance
        assert instance is not None
        reader = instance.thread
        assert reader.name == "stalewatch-inotify"

        def boom(data: bytes) -> None:
            raise RuntimeError("inotify reader bug")

        instance._dispatch = boom  # type: ignore[method-assign]
        new = git_repo.commit("the reader dies on this event")
        reader.join(5)
        assert not reader.is_alive()
        rec.wait_for("stale", new)  # seen after the restart on a new instance
        assert guard.wait_ready(5)
        assert watcher._watches.instance is not instance
        again = git_repo.commit("and the new instance reads on")
        rec.wait_for("stale", again)
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
    c = git_repo.commit("c")
    git_repo.git("reset", "-q", "--hard", a)
    ref = git_repo.path / ".git/refs/heads/main"
    lock = ref.with_name("main.lock")

    def move_to(revision: str) -> None:  # what git does: write main.lock, rename it over main
        lock.write_text(revision + "\n")
        lock.replace(ref)

    with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=3600))) as guard:
        rec = Recorder(guard)
        entered, release = threading.Event(), threading.Event()
        first = iter([True])

        def hold_first(event: object) -> None:  # a slow subscriber, held by the test
            if next(first, False):
                entered.set()
                release.wait(60)

        guard.subscribe(hold_first)
        try:
            move_to(c)
            assert entered.wait(10)  # the worker is inside the event for c now
            for i in range(1, 201):  # a rebase-like burst, ending on b
                move_to(b if i % 2 == 0 else a)
        finally:
            release.set()
        # Every write of the burst landed while the worker was held: they coalesce
        # into a turn or two that read b, not one event per write.
        rec.wait_for("stale", b)
        assert [e.current_revision for e in rec.events[:1]] == [c]
        assert len(rec.events) <= 3, [e.current_revision for e in rec.events]
        assert rec.events[-1].current_revision == b
        assert [e.generation for e in rec.events] == list(range(1, len(rec.events) + 1))
        assert guard.snapshot().current_revision == b


def test_c9_a_failing_worker_turn_is_survived(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with started(Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=0.1))) as guard:
        rec = Recorder(guard)
        watcher = watcher_of(guard)
        real = watcher._verify
        failed = threading.Event()

        def flaky(now: float) -> None:
            if not failed.is_set():
                failed.set()
                raise OSError("transient failure inside the worker")
            real(now)

        monkeypatch.setattr(watcher, "_verify", flaky)
        assert failed.wait(5)
        new = git_repo.commit("after the failure")
        rec.wait_for("stale", new)
        assert guard.wait_ready(5)
    assert "failed; restarting" in caplog.text


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


def test_c11_symlinked_head_commit_is_seen_with_reverification_off(git_repo: Repo) -> None:
    # core.preferSymlinkRefs: HEAD is a symlink to refs/heads/side. Read through, it
    # looked detached: refs/heads was never watched and a commit went unseen (issue 12).
    git_repo.git("branch", "side")
    git_repo.git("-c", "core.preferSymlinkRefs=true", "checkout", "-q", "side")
    assert (git_repo.path / ".git/HEAD").is_symlink()
    source = LocalSource(verify_interval=3600)  # only events can explain what follows
    with started(Guard.for_checkout(git_repo.path, source=source)) as guard:
        rec = Recorder(guard)
        new = git_repo.commit("on the symlinked branch")
        rec.wait_for("stale", new)
        with pytest.raises(StaleError):
            guard.check()


def test_c4_switching_a_symlinked_head_is_never_a_false_unreadable(git_repo: Repo) -> None:
    # With core.preferSymlinkRefs git switches branch by unlinking HEAD and then
    # creating the new symlink: a resolve in between reads "HEAD does not exist". The
    # worker waits for the new HEAD (its creation wakes it) instead of reporting it.
    git_repo.git("branch", "side")
    git_repo.commit("main moves on: each switch changes HEAD's commit")
    git_repo.git("config", "core.preferSymlinkRefs", "true")
    git_repo.git("checkout", "-q", "side")
    source = LocalSource(verify_interval=3600)
    with started(Guard.for_checkout(git_repo.path, source=source)) as guard:
        rec = Recorder(guard)
        for i in range(40):
            git_repo.git("checkout", "-q", "main" if i % 2 == 0 else "side")
            rec.wait_for("stale" if i % 2 == 0 else "current")
        assert [e for e in rec.events if e.status.value == "unreadable"] == []


def test_c4_head_deleted_for_good_is_unreadable_after_the_grace(git_repo: Repo) -> None:
    source = LocalSource(verify_interval=3600)  # only the deletion's event can explain it
    with started(Guard.for_checkout(git_repo.path, source=source)) as guard:
        rec = Recorder(guard)
        (git_repo.path / ".git/HEAD").unlink()
        event = rec.wait_for("unreadable", timeout=5)
        assert "HEAD does not exist" in (event.error or "")  # type: ignore[attr-defined]


def test_a_halted_watcher_takes_no_more_turns_and_still_stops(git_repo: Repo) -> None:
    """Halted (a daemon's exit halts all its watchers first), a watcher is turned no more
    though its watches still fire; stop() then removes them as usual."""
    source = LocalSource(verify_interval=3600)
    with (
        started(Guard.for_checkout(git_repo.path, source=source)) as halted,
        started(Guard.for_checkout(git_repo.path, source=source)) as witness,
    ):
        watcher = watcher_of(halted)
        halt([watcher])
        turns = watcher.turns
        rec = Recorder(witness)
        new = git_repo.commit("after the halt")
        rec.wait_for("stale", new)  # the same kernel event reached both watchers
        assert watcher.turns == turns
        halted.stop()
        assert halted.snapshot().trusted is False


def test_a_source_whose_watch_is_an_unhashable_callable_still_feeds_a_guard(git_repo: Repo) -> None:
    """``Source`` is public: its ``watch`` may be any callable, an unhashable one too (a
    dataclass with ``__call__``); the keywords it takes are read from its signature."""
    local = LocalSource()

    @dataclasses.dataclass  # eq and not frozen: no __hash__
    class Feed:
        told: list[str | None]

        def __call__(
            self,
            dirs: GitDirs,
            on_change: OnChange,
            on_health: OnHealth,
            *,
            loaded_revision: str | None = None,
            on_restart: object = None,
        ) -> Watch:
            self.told.append(loaded_revision)
            return local.watch(dirs, on_change, on_health)

    feed = Feed([])
    source = types.SimpleNamespace(watch=feed)
    guard = Guard.for_checkout(git_repo.path, source=source)
    with guard:
        assert guard.wait_ready(5)
        assert feed.told == [git_repo.head()]
