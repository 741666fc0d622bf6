"""Many checkouts in one process: one inotify instance, a few threads, faults kept apart (issue 11)."""

from __future__ import annotations

import logging
import os
import queue
import shutil
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from stalewatch import Event, Guard, LocalSource, StaleError
from stalewatch.watching import inotify as inotify_module
from stalewatch.watching import inotify_calls
from stalewatch.watching import scheduler as scheduler_module
from stalewatch.watching.plan import Relevance
from stalewatch.watching.watcher import Watcher
from tests.support.forks import report_from_fork
from tests.support.notifiers import inotify_only
from tests.support.recorder import Recorder
from tests.support.repos import Repo, make_repo


def instances() -> int:
    """inotify instances this process holds (its file descriptors that are one)."""
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            count += str(fd.readlink()) == "anon_inode:inotify"
        except OSError:
            continue  # the descriptor the listing itself used
    return count


def checkouts(root: Path, n: int) -> list[Repo]:
    """``n`` real checkouts side by side (copies of one repository: fast)."""
    first = make_repo(root / "c0")
    repos = [first]
    for i in range(1, n):
        shutil.copytree(first.path, root / f"c{i}", symlinks=True)
        repos.append(Repo(root / f"c{i}"))
    return repos


def watcher_of(guard: Guard) -> Watcher:
    watch = guard._watch
    assert isinstance(watch, Watcher)
    return watch


@pytest.fixture
def guards() -> Iterator[list[Guard]]:
    started: list[Guard] = []
    with ExitStack() as stack:
        stack.callback(lambda: [g.stop() for g in started])
        yield started


def start_all(repos: list[Repo], started: list[Guard], verify: float = 3600) -> list[Guard]:
    for repo in repos:
        started.append(Guard.for_checkout(repo.path, source=LocalSource(verify_interval=verify)).start())
    for guard in started:
        assert guard.wait_ready(10), f"{guard} never became ready"
    return started


@inotify_only
def test_twenty_checkouts_share_one_instance_and_a_few_threads(tmp_path: Path, guards: list[Guard]) -> None:
    repos = checkouts(tmp_path, 20)
    threads_before, instances_before = threading.active_count(), instances()
    start_all(repos, guards)
    assert instances() - instances_before == 1
    added = threading.active_count() - threads_before
    assert added <= inotify_module._READERS + scheduler_module.MAX_WORKERS  # readers and workers, whatever N
    names = {t.name for t in threading.enumerate()}
    assert "stalewatch-inotify" in names
    hub = watcher_of(guards[0])._watches.instance
    assert hub is not None
    assert all(watcher_of(g)._watches.instance is hub for g in guards)
    # Every checkout's directories are watched once; their common parent once for all.
    assert hub.watch_count() == 1 + 3 * len(repos)
    recorders = [Recorder(g) for g in guards]
    new = repos[7].commit("in one of twenty")
    recorders[7].wait_for("stale", new)
    for other in (0, 19):
        with pytest.raises(AssertionError):
            recorders[other].wait_for("stale", timeout=0.05)
    for guard in guards:
        guard.stop()
    assert instances() == instances_before  # the last watcher out closed the instance


@inotify_only
def test_one_guard_costs_one_instance_and_three_threads(git_repo: Repo, guards: list[Guard]) -> None:
    threads_before, instances_before = threading.active_count(), instances()
    start_all([git_repo], guards)
    assert instances() - instances_before == 1
    # stalewatch-inotify, stalewatch-inotify-2 (reads while the other runs a turn), stalewatch-worker-1
    assert threading.active_count() - threads_before == 3


@inotify_only
def test_a_wake_ups_turn_runs_on_the_reader_and_a_subscriber_blocking_it_stalls_no_other_checkout(
    tmp_path: Path, guards: list[Guard]
) -> None:
    a_repo, b_repo = checkouts(tmp_path, 2)
    a, b = start_all([a_repo, b_repo], guards)
    inside, release = threading.Event(), threading.Event()
    names: list[str] = []

    def block(event: Event) -> None:
        names.append(threading.current_thread().name)
        inside.set()
        release.wait(30)

    a.subscribe(block)
    rec_b = Recorder(b)
    try:
        a_repo.commit("its event blocks in a's subscriber")
        assert inside.wait(5)
        assert names[0].startswith("stalewatch-inotify")  # no hop to a worker (issue 27)
        new = b_repo.commit("seen while a's subscriber still blocks its reader")
        rec_b.wait_for("stale", new)  # within 10 s: a's subscriber still blocks
    finally:
        release.set()


@inotify_only
def test_a_turn_on_the_reader_waits_for_the_rest_of_its_read_not_the_other_way_round(
    git_repo: Repo, guards: list[Guard]
) -> None:
    # Two guards of one checkout: one kernel event, one read, a call for each. The first
    # call's turn ran there and then on the reader, and a subscriber blocking it held the
    # second call back: that guard never heard of the commit while the subscriber blocked.
    first, second = start_all([git_repo, git_repo], guards)
    inside, release = threading.Event(), threading.Event()
    seen: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()

    def subscriber(name: str) -> Callable[[Event], None]:
        def on_event(event: Event) -> None:
            thread = threading.current_thread().name
            seen.put((name, thread))
            if thread.startswith("stalewatch-inotify") and not inside.is_set():
                inside.set()  # whichever turn ran on the reader blocks it
                release.wait(30)

        return on_event

    first.subscribe(subscriber("first"))
    second.subscribe(subscriber("second"))
    try:
        new = git_repo.commit("one event for both guards")
        got = {seen.get(timeout=10)[0], seen.get(timeout=5)[0]}  # both, while one blocks
        assert got == {"first", "second"}
        assert inside.is_set()  # one of them did run on the reader (issue 27)
        assert first.snapshot().current_revision == second.snapshot().current_revision == new
    finally:
        release.set()


def health_reports(guard: Guard) -> list[bool]:
    """Every trust report ``guard``'s watcher makes from now on, in order."""
    reports: list[bool] = []
    watcher = watcher_of(guard)
    real_report = watcher._health._on_health

    def spy(trusted: bool, mode: str) -> None:
        reports.append(trusted)
        real_report(trusted, mode)

    watcher._health._on_health = spy
    return reports


@inotify_only
def test_sys_exit_in_a_subscriber_on_the_reader_restarts_only_its_own_checkout(
    tmp_path: Path, guards: list[Guard], caplog: pytest.LogCaptureFixture
) -> None:
    # As a worker's death told only its task: the reader that ran the turn must not die
    # and take every other checkout's trust with it (issue 11: faults kept apart).
    a_repo, b_repo = checkouts(tmp_path, 2)
    a, b = start_all([a_repo, b_repo], guards)
    b_health = health_reports(b)
    exited: list[str] = []
    done = threading.Event()

    def exit_once(event: Event) -> None:
        if not exited:
            exited.append(threading.current_thread().name)
            done.set()
            raise SystemExit("a subscriber exits its thread")

    rec_a, rec_b = Recorder(a), Recorder(b)  # before it: an exit ends a delivery's round
    a.subscribe(exit_once)
    first = a_repo.commit("its event's turn exits the reader's thread")
    assert done.wait(5)
    assert exited[0].startswith("stalewatch-inotify")
    rec_a.wait_for("stale", first)
    assert a.wait_ready(5)  # distrusted, restarted since
    second = a_repo.commit("seen after the restart")
    rec_a.wait_for("stale", second)
    new_b = b_repo.commit("B was never disturbed")
    rec_b.wait_for("stale", new_b)
    assert b_health == []  # B's trust was never revoked, not even once
    assert b.snapshot().trusted


def test_one_checkouts_faults_do_not_disturb_the_others(
    tmp_path: Path, guards: list[Guard], caplog: pytest.LogCaptureFixture
) -> None:
    a_repo, b_repo = checkouts(tmp_path, 2)
    a, b = start_all([a_repo, b_repo], guards)
    b_health = health_reports(b)
    rec_a, rec_b = Recorder(a), Recorder(b)

    # 1. A's event handling raises on the reader thread, for every event.
    a_watcher = watcher_of(a)

    def broken(relevance: Relevance) -> None:
        raise RuntimeError("a bug in A's handling")

    a_watcher.signal = broken  # type: ignore[method-assign]
    a_repo.commit("A's events raise")
    new_b = b_repo.commit("B is still watched")
    rec_b.wait_for("stale", new_b)

    # 2. A's subscriber blocks its worker; B's turns run on another.
    inside, release = threading.Event(), threading.Event()
    a_watcher.signal = Watcher.signal.__get__(a_watcher)  # type: ignore[method-assign]

    def blocking(event: Event) -> None:
        inside.set()
        release.wait(10)

    unsubscribe = a.subscribe(blocking)
    a_repo.commit("A's subscriber holds a worker")
    assert inside.wait(5)
    newer_b = b_repo.commit("B while A's worker is held")
    rec_b.wait_for("stale", newer_b)
    release.set()
    unsubscribe()

    # 3. A's .git disappears: A is unreadable, B carries on.
    shutil.rmtree(a_repo.path / ".git")
    rec_a.wait_for("unreadable")
    newest_b = b_repo.commit("B after A lost its repository")
    rec_b.wait_for("stale", newest_b)

    assert b_health == []  # B's trust was never revoked, not even once
    assert b.snapshot().trusted
    with pytest.raises(StaleError):
        b.check()
    assert "a bug in A's handling" in caplog.text


@inotify_only
def test_c9_overflow_on_the_shared_instance_resyncs_every_checkout(
    tmp_path: Path, guards: list[Guard], monkeypatch: pytest.MonkeyPatch
) -> None:
    repos = checkouts(tmp_path, 3)
    start_all(repos, guards)
    recorders = [Recorder(g) for g in guards]
    for guard in guards:  # every event is lost, as in an overflow
        monkeypatch.setattr(watcher_of(guard), "signal", lambda relevance: None)
    lost = [repo.commit("its events fall into the overflow") for repo in repos]
    for guard in guards:
        monkeypatch.setattr(watcher_of(guard), "signal", Watcher.signal.__get__(watcher_of(guard)))
    hub = watcher_of(guards[0])._watches.instance
    assert hub is not None
    overflow = inotify_calls.IN_Q_OVERFLOW
    hub._dispatch(struct.pack("iIII", -1, overflow, 0, 0))  # what the kernel writes
    for rec, new in zip(recorders, lost, strict=True):
        rec.wait_for("stale", new)
    for guard in guards:
        assert guard.wait_ready(5)


@inotify_only
def test_c9_forked_child_gets_its_own_instance_and_leaves_the_parents_alone(
    git_repo: Repo, guards: list[Guard]
) -> None:
    (guard,) = start_all([git_repo], guards)
    rec = Recorder(guard)
    parent_hub = watcher_of(guard)._watches.instance
    assert parent_hub is not None
    events: queue.SimpleQueue[Event] = queue.SimpleQueue()
    guard.subscribe(events.put)

    def child() -> str:
        guard.check()  # starts the child's own watcher
        ready = guard.wait_ready(10)
        hub = watcher_of(guard)._watches.instance
        own = hub is not None and hub is not parent_hub and hub.pid == os.getpid()
        mine = git_repo.commit("in child")
        seen = False
        try:
            while not seen:  # the child's own watcher names its commit
                seen = events.get(timeout=10).current_revision == mine
        except queue.Empty:
            pass
        report = f"{ready},{own},{seen},{instances()}"
        guard.stop()
        return report

    code, report = report_from_fork(child, timeout=60)
    assert code == 0, report
    assert report == "True,True,True,1"  # ready, its own instance, saw its commit, held one
    # The parent's watches were neither removed nor read by the child: it sees the commit.
    rec.wait_for("stale")
    assert guard.snapshot().trusted
    assert watcher_of(guard)._watches.instance is parent_hub


def test_issue12_a_debug_log_in_and_beside_the_checkout_wakes_nothing(
    git_repo: Repo, guards: list[Guard]
) -> None:
    # An app that logs at DEBUG into its own checkout and beside it (issue 12, item 4).
    # watchdog's emitters logged every raw event at DEBUG, and the worktree and its
    # parent were watched for writes: each log line woke the watch, which logged.
    loaded = git_repo.head()
    sentinel = git_repo.commit("the sentinel, made ready beforehand")
    git_repo.git("reset", "-q", "--hard", loaded)
    (guard,) = start_all([git_repo], guards)
    rec = Recorder(guard)
    watcher = watcher_of(guard)
    hub = watcher._watches.instance
    assert hub is not None
    root = logging.getLogger()
    handlers = [
        logging.FileHandler(git_repo.path / "app.log"),
        logging.FileHandler(git_repo.path.parent / "app.log"),
    ]
    ours: list[logging.LogRecord] = []

    class Spy(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.name.startswith(("stalewatch", "watchdog")):
                ours.append(record)

    spy = Spy(logging.DEBUG)
    level = root.level
    for handler in (*handlers, spy):
        root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        reads, turns = getattr(hub, "reads", 0), watcher.turns  # the inotify reader counts its reads
        app = logging.getLogger("app")
        for i in range(500):
            app.debug("request %d handled", i)  # each is a write(2) into both files
        # Then one ref update as git makes it: events are read in order, so once it is
        # seen, everything the log lines caused has been read and handled.
        ref = git_repo.path / ".git/refs/heads/main"
        ref.with_name("main.lock").write_text(sentinel + "\n")
        ref.with_name("main.lock").replace(ref)
        rec.wait_for("stale", sentinel)
        woke, ran = getattr(hub, "reads", 0) - reads, watcher.turns - turns
    finally:
        root.setLevel(level)
        for handler in (*handlers, spy):
            root.removeHandler(handler)
            handler.close()
    # No log line of ours about events, at any level. watchdog's observer logs each raw
    # event at DEBUG (the sentinel's; the log files' creation, which may be read after the
    # spy was added), but the log files' writes are never events.
    writes = [r for r in ours if "app.log" in r.getMessage() and "IN_CREATE" not in r.getMessage()]
    assert [r for r in ours if r.name.startswith("stalewatch")] + writes == []
    assert ran <= 3  # the sentinel's turn (and at most another), not one per log line
    assert woke <= 10  # for the sentinel and the log files' creation, not for 1,000 writes
