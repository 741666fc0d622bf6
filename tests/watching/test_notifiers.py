"""stalewatch.watching.notifier: the contract every notifier keeps, run on each of them
(the shared inotify instance and watchdog's public observer), and what covers what a
notifier cannot report."""

from __future__ import annotations

import errno
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalewatch import Guard, LocalSource
from stalewatch.core import settings
from stalewatch.core.errors import ConfigError
from stalewatch.watching import notifier as notifier_module
from stalewatch.watching import observer as observer_module
from stalewatch.watching.notifier import Notifier, Registration
from stalewatch.watching.watcher import Watcher
from tests.support.recorder import Recorder
from tests.support.repos import Repo

KINDS = ("inotify", "observer")


class Events:
    """A listener that records what the notifier hands it."""

    def __init__(self) -> None:
        self.events: queue.SimpleQueue[tuple[bytes, bool]] = queue.SimpleQueue()

    def on_event(self, registration: Registration, name: bytes, deleted: bool) -> None:
        self.events.put((name, deleted))

    def on_overflow(self) -> None:
        pass

    def on_reader_died(self) -> None:
        pass

    def next(self, timeout: float = 5.0) -> tuple[bytes, bool]:
        return self.events.get(timeout=timeout)

    def until(self, wanted: tuple[bytes, bool]) -> None:
        """Events until ``wanted``; each one before it names the same entry (a write may
        come as a creation, then a close)."""
        while (event := self.next()) != wanted:
            assert event[0] == wanted[0], event

    def none(self, timeout: float = 0.2) -> bool:
        try:
            self.events.get(timeout=timeout)
        except queue.Empty:
            return True
        return False


@pytest.fixture(params=KINDS)
def hub(request: pytest.FixtureRequest) -> Iterator[Notifier]:
    instance = notifier_module.acquire(request.param)
    try:
        yield instance
    finally:
        instance.release()


def test_a_rename_over_a_watched_name_is_delivered_and_other_names_are_not(
    hub: Notifier, tmp_path: Path
) -> None:
    # git writes HEAD.lock, then renames it over HEAD: the directory is watched, not the file.
    listener = Events()
    registration = hub.add(tmp_path, False, frozenset({b"HEAD"}), listener)
    (tmp_path / "ORIG_HEAD").write_text("x\n")  # a name nobody asked for
    (tmp_path / "HEAD.lock").write_text("ref: refs/heads/main\n")
    (tmp_path / "HEAD.lock").replace(tmp_path / "HEAD")
    assert listener.next() == (b"HEAD", False)
    (tmp_path / "HEAD").unlink()
    listener.until((b"HEAD", True))
    hub.remove(registration)
    (tmp_path / "HEAD").write_text("again\n")
    assert listener.none()  # removed: nothing more


def test_a_narrow_watch_ignores_writes_to_contents(hub: Notifier, tmp_path: Path) -> None:
    (tmp_path / "app.log").write_text("")
    listener = Events()
    registration = hub.add(tmp_path, True, frozenset({b"app.log", b"checkout"}), listener)
    with (tmp_path / "app.log").open("a") as log:
        for i in range(50):
            log.write(f"line {i}\n")
            log.flush()
    (tmp_path / "checkout").mkdir()  # an entry created: delivered
    assert listener.next()[0] == b"checkout"
    hub.remove(registration)


def test_two_listeners_on_one_directory_keep_their_own_names(hub: Notifier, tmp_path: Path) -> None:
    a, b = Events(), Events()
    first = hub.add(tmp_path, False, frozenset({b"a"}), a)
    second = hub.add(tmp_path, False, frozenset({b"b"}), b)
    (tmp_path / "b").write_text("")
    assert b.next()[0] == b"b"
    assert a.none()
    hub.remove(first)
    (tmp_path / "b").unlink()
    b.until((b"b", True))  # the other registration keeps the directory watched
    hub.remove(second)
    assert hub.watch_count() == 0


def test_a_deleted_directory_is_told_and_its_registration_is_lost(hub: Notifier, tmp_path: Path) -> None:
    directory = tmp_path / "refs-heads-feature"
    directory.mkdir()
    listener = Events()
    registration = hub.add(directory, False, frozenset(), listener)
    assert not hub.lost(registration)
    directory.rmdir()
    assert listener.next() == (b"", True)
    assert hub.lost(registration)
    hub.remove(registration)


def test_a_missing_directory_or_a_file_is_refused(hub: Notifier, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(FileNotFoundError):
        hub.add(tmp_path / "missing", False, frozenset(), Events())
    with pytest.raises(NotADirectoryError):
        hub.add(tmp_path / "file", False, frozenset(), Events())
    assert hub.watch_count() == 0


@pytest.mark.parametrize("kind", KINDS)
def test_one_notifier_per_process_closed_by_its_last_user(kind: str) -> None:
    first = notifier_module.acquire(kind)
    second = notifier_module.acquire(kind)
    assert first is second
    first.release()
    second.release()
    third = notifier_module.acquire(kind)
    assert third is not first  # the last user closed it; a new one was opened
    third.release()


@pytest.mark.unit
def test_polling_has_no_notifier() -> None:
    with pytest.raises(OSError) as raised:
        notifier_module.acquire("polling")
    assert raised.value.errno == errno.ENOSYS


def test_an_observer_that_would_only_poll_is_refused_so_the_watcher_polls_itself(
    monkeypatch: pytest.MonkeyPatch, git_repo: Repo
) -> None:
    # Where watchdog has no native backend its Observer polls: that must never be
    # trusted as notification.
    monkeypatch.setattr(observer_module, "Observer", observer_module.PollingObserver)
    with pytest.raises(OSError) as raised:
        notifier_module.acquire("observer")
    assert raised.value.errno == errno.ENOSYS
    monkeypatch.setenv("STALEWATCH_NOTIFIER", "observer")
    with Guard.for_checkout(git_repo.path) as guard:
        assert guard.wait_ready(5)
        assert guard.snapshot().mode == "polling" and not guard.snapshot().trusted


@pytest.mark.unit
def test_the_platform_gets_inotify_on_linux() -> None:
    assert notifier_module.platform_default() == "inotify"
    assert observer_module.native()  # watchdog's observer is native here too (its inotify)


@pytest.mark.unit
@given(st.text(max_size=20))
def test_the_notifier_variable_is_one_of_the_kinds_or_a_config_error(raw: str) -> None:
    try:
        chosen = settings.notifier(raw)
    except ConfigError as exc:
        assert raw.strip().lower() not in settings.NOTIFIERS
        assert "notifier" in str(exc)
    else:
        assert chosen == (raw.strip().lower() or None)
        assert chosen is None or chosen in settings.NOTIFIERS


@pytest.mark.unit
def test_polling_chosen_by_the_variable_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STALEWATCH_NOTIFIER", "polling")
    assert LocalSource().poll
    monkeypatch.setenv("STALEWATCH_NOTIFIER", "observer")
    source = LocalSource()
    assert not source.poll and source.notifier == "observer"
    monkeypatch.setenv("STALEWATCH_NOTIFIER", "kqueue")
    with pytest.raises(ConfigError, match="STALEWATCH_NOTIFIER"):
        LocalSource()


def test_poll_false_as_a_keyword_outranks_the_polling_variable(
    monkeypatch: pytest.MonkeyPatch, git_repo: Repo
) -> None:
    # Defaults: the keyword argument, then the variable (docs/library.md).
    monkeypatch.setenv("STALEWATCH_NOTIFIER", "polling")
    source = LocalSource(poll=False)
    assert not source.poll and source.notifier == notifier_module.platform_default()
    with Guard.for_checkout(git_repo.path, source=source) as guard:
        assert guard.wait_ready(5)
        assert guard.snapshot().mode != "polling" and guard.snapshot().trusted


def _watcher(guard: Guard) -> Watcher:
    watcher = guard._watch
    assert isinstance(watcher, Watcher)
    return watcher


@pytest.mark.parametrize("kind", KINDS)
def test_c9_an_event_lost_without_notice_is_caught_by_the_next_verification(
    kind: str, git_repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FSEvents' MustScanSubDirs and a ReadDirectoryChangesW overflow lose events and say
    # nothing: only the periodic verification (stat stamps, then HEAD) can catch them.
    monkeypatch.setenv("STALEWATCH_NOTIFIER", kind)
    period = 0.3
    with Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=period)) as guard:
        assert guard.wait_ready(5)
        rec = Recorder(guard)
        watcher = _watcher(guard)
        monkeypatch.setattr(watcher, "on_event", lambda registration, name, deleted: None)  # dropped
        lost = git_repo.commit("its events are dropped, silently")
        rec.wait_for("stale", lost, timeout=3 * period + 2)  # a period, and the grid and load
        assert guard.snapshot().trusted


def test_c9_an_observer_emitter_that_dies_is_noticed_and_watched_anew(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A backend thread of watchdog that ends says nothing: the verification asks.
    monkeypatch.setenv("STALEWATCH_NOTIFIER", "observer")
    with Guard.for_checkout(git_repo.path, source=LocalSource(verify_interval=0.2)) as guard:
        assert guard.wait_ready(5)
        watcher = _watcher(guard)
        hub = watcher._watches.instance
        assert isinstance(hub, observer_module.ObserverNotifier)
        emitters = [e for e in hub._observer.emitters if Path(e.watch.path) == git_repo.path / ".git"]
        assert len(emitters) == 1
        emitters[0].stop()  # as if its thread had died
        emitters[0].join(5)
        rewatched = threading.Event()

        def check() -> None:
            alive = [e for e in hub._observer.emitters if Path(e.watch.path) == git_repo.path / ".git"]
            if alive and alive[0] is not emitters[0] and alive[0].is_alive():
                rewatched.set()

        watcher.on_verified = check
        assert rewatched.wait(5), "the dead emitter was never replaced"
        rec = Recorder(guard)
        new = git_repo.commit("seen through the new emitter")
        rec.wait_for("stale", new)
