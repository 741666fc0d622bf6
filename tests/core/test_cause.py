"""The cause of a move (what moved HEAD) carried by the guard: Event, Snapshot, StaleError, CLI.

The cause is read from the reflog off the barrier path: once per change, by whichever
thread applies the change (the watcher, or a strict check that saw it first), never by
the flag read.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from stalewatch import Guard, StaleError
from stalewatch.core.cause import Cause
from stalewatch.core.exits import INTERRUPTED as EXIT_INTERRUPTED
from stalewatch.git import reflog
from stalewatch.guard import head as head_module
from tests.support.properties import budget
from tests.support.recorder import Recorder
from tests.support.repos import Repo


class CountingExplain:
    """Wraps ``reflog.explain_move`` as the guard calls it, counting the calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self._real = reflog.explain_move
        monkeypatch.setattr(head_module.reflog, "explain_move", self)

    def __call__(self, *args: Any) -> reflog.Cause | None:
        self.calls += 1
        return self._real(*args)


def test_a_commit_event_says_what_moved_head(git_repo: Repo, recorder: type[Recorder]) -> None:
    loaded = git_repo.head()
    with Guard.for_checkout(git_repo.path) as guard:
        assert guard.wait_ready(10)
        events = recorder(guard)
        new = git_repo.commit("the change")
        event: Any = events.wait_for("stale", new)
        cause = event.cause
        assert cause is not None
        assert (cause.action, cause.message, cause.relation, cause.ahead) == (
            "commit",
            "commit: the change",
            "ahead",
            1,
        )
        assert cause.name == "stalewatch tests"
        assert guard.snapshot().cause == cause
        data = json.loads(event.to_json())
        assert data["cause"]["action"] == "commit"
        assert data["cause"]["summary"].startswith("commit (1 commit ahead) by stalewatch tests at ")
        assert guard.snapshot().to_dict()["cause"]["message"] == "commit: the change"

        with pytest.raises(StaleError) as info:
            guard.check()
        message = str(info.value)
        assert (
            f"(loaded {loaded[:7]}, now {new[:7]}: commit (1 commit ahead) by stalewatch tests at " in message
        )
        assert message.endswith("; restart the process to load it.")
        assert info.value.cause == cause

        git_repo.git("reset", "-q", "--hard", loaded)  # a rollback: current, with its cause
        back: Any = events.wait_for("current", loaded)
        assert back.cause is not None
        assert (back.cause.action, back.cause.relation) == ("reset", "same")
        guard.check()


def test_the_cause_is_read_once_per_change_and_never_on_the_flag_read(
    git_repo: Repo, recorder: type[Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    explain = CountingExplain(monkeypatch)
    with Guard.for_checkout(git_repo.path) as guard:
        assert guard.wait_ready(10)
        events = recorder(guard)
        new = git_repo.commit("one")
        events.wait_for("stale", new)
        assert explain.calls == 1
        for _ in range(100):
            with pytest.raises(StaleError, match="commit"):
                guard.check()  # the flag, and the cause already attached
            with pytest.raises(StaleError, match="commit"):
                guard.check(strict=True)  # re-reads HEAD: unchanged, so no reflog read
        assert explain.calls == 1
        git_repo.git("reset", "-q", "--hard", "HEAD~1")
        events.wait_for("current")
        for _ in range(100):
            guard.check()
        assert explain.calls == 2


def test_a_strict_check_that_sees_the_move_first_reads_the_cause(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    explain = CountingExplain(monkeypatch)
    guard = Guard.for_checkout(git_repo.path)  # never started: every check reads HEAD itself
    guard.check()
    assert explain.calls == 0
    git_repo.git("checkout", "-q", "-b", "feature")
    git_repo.commit("f")
    with pytest.raises(StaleError, match=r"now [0-9a-f]{7}: commit \(1 commit ahead\)"):
        guard.check()
    with pytest.raises(StaleError):
        guard.check()
    assert explain.calls == 1
    git_repo.git("checkout", "-q", "main")
    guard.check()
    assert guard.snapshot().cause is not None
    assert guard.snapshot().cause.action == "checkout"  # type: ignore[union-attr]


def test_no_reflog_means_no_cause_and_the_old_message(git_repo: Repo, tmp_path: Path) -> None:
    git_repo.git("config", "core.logAllRefUpdates", "false")
    for log in (git_repo.path / ".git" / "logs").rglob("*"):
        if log.is_file():
            log.unlink()
    loaded = git_repo.head()
    guard = Guard.for_checkout(git_repo.path)
    new = git_repo.commit("no log")
    with pytest.raises(StaleError) as info:
        guard.check()
    assert info.value.cause is None
    assert f"(loaded {loaded[:7]}, now {new[:7]}); restart" in str(info.value)
    assert guard.snapshot().to_dict()["cause"] is None


def test_unreadable_has_no_cause(git_repo: Repo) -> None:
    guard = Guard.for_checkout(git_repo.path)
    git_repo.commit("moved")
    with pytest.raises(StaleError):
        guard.check()
    assert guard.snapshot().cause is not None
    (git_repo.path / ".git" / "HEAD").write_text("garbage\n")
    with pytest.raises(StaleError, match="can no longer be read"):
        guard.check()
    assert guard.snapshot().cause is None


def test_watch_command_lines_say_what_moved(git_repo: Repo) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "stalewatch", "watch", str(git_repo.path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("current")
            new = git_repo.commit("human")
            line = proc.stdout.readline()
            assert line.startswith("stale")
            assert (
                f"current {new[:7]} (generation 1): commit (1 commit ahead) by stalewatch tests at " in line
            )
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=5) == EXIT_INTERRUPTED
        finally:
            proc.kill()


def _when_by_datetime(at: float, tz: str, now: float) -> str:
    """What ``Cause`` said through ``datetime`` before it did the arithmetic itself."""
    try:
        offset = int(tz[1:3]) * 60 + int(tz[3:5])
        zone = timezone(timedelta(minutes=-offset if tz[0] == "-" else offset))
        when = datetime.fromtimestamp(at, zone)
        today = datetime.fromtimestamp(now, zone).date()
    except (ValueError, OverflowError, OSError, IndexError):
        return f"@{at:.0f}"
    return when.strftime("%H:%M" if when.date() == today else "%Y-%m-%d %H:%M")


@pytest.mark.unit
@budget(3000)
@given(
    at=st.one_of(st.integers(-(10**12), 10**12), st.integers(-(7 * 10**10), 26 * 10**10)),
    tz=st.one_of(st.from_regex(r"\A[+-][0-9]{4}\Z"), st.text(max_size=6)),
    now=st.integers(0, 4 * 10**9),
)
@example(at=-30_610_224_001, tz="-0000", now=0)  # year 999: no zero padding, as strftime
@example(at=1_700_000_000, tz="+2400", now=1_700_000_000)  # an offset datetime refuses
def test_the_time_of_a_cause_is_what_datetime_says(at: int, tz: str, now: int) -> None:
    cause = Cause("commit", None, "commit: x", "a", "a@x", float(at), tz, "same")
    assert cause.describe(now=now).endswith(f" at {_when_by_datetime(float(at), tz, now)}")
