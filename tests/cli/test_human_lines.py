"""Human `watch`/`events`/`status` lines: one line per message, whatever a path holds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalewatch.cli.human_lines import human_line as format_message
from stalewatch.core.escaping import printable
from tests.support.daemons import WAIT, LineReader, short_dir, start_daemon
from tests.support.properties import budget
from tests.support.repos import Repo, make_repo

# A newline forges a second line; ESC drives the terminal; U+202E reverses the text;
# \xff is not UTF-8 (a surrogate escape, which print() cannot even encode).
HOSTILE_NAME = os.fsdecode(b"co\nnot a status line \x1b[2J\xe2\x80\xae\xff")


@pytest.fixture
def odd_repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path / HOSTILE_NAME)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def _run(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "stalewatch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )


def _stop(proc: subprocess.Popen[bytes]) -> bytes:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    return err


def _assert_one_escaped_line(line: str, repo: Repo) -> None:
    assert "\x1b" not in line and "\u202e" not in line
    assert printable(str(repo.path.resolve())) in line


def test_watch_prints_one_line_per_change_for_a_path_with_control_characters(odd_repo: Repo) -> None:
    proc = _run("watch", str(odd_repo.path))
    try:
        out = LineReader(proc.stdout)
        first = out.line()
        assert first.startswith("current ")
        _assert_one_escaped_line(first, odd_repo)
        new = odd_repo.commit()
        second = out.line()
        assert second.startswith("stale ") and new[:7] in second
        _assert_one_escaped_line(second, odd_repo)
    finally:
        err = _stop(proc)
    assert b"Traceback" not in err, err.decode(errors="replace")


def test_events_and_status_print_one_line_per_message(odd_repo: Repo, workdir: Path) -> None:
    with start_daemon(workdir, str(odd_repo.path)) as daemon:
        proc = _run("events", "--socket", str(daemon.socket))
        try:
            out = LineReader(proc.stdout)
            assert out.line().startswith("# stalewatch daemon")
            snapshot = out.line()
            assert snapshot.startswith("current ")
            _assert_one_escaped_line(snapshot, odd_repo)
            new = odd_repo.commit()
            event = out.line()
            assert event.startswith("stale ") and new[:7] in event
            _assert_one_escaped_line(event, odd_repo)
        finally:
            err = _stop(proc)
        assert b"Traceback" not in err, err.decode(errors="replace")
        status = subprocess.run(
            [sys.executable, "-m", "stalewatch", "status", "--socket", str(daemon.socket)],
            capture_output=True,
            timeout=10,
            check=False,
        )
        assert status.returncode == 0, status.stderr
        (line,) = status.stdout.decode().splitlines()
        _assert_one_escaped_line(line, odd_repo)


def test_a_daemon_sending_odd_fields_cannot_break_the_human_line() -> None:
    """Whatever sits on the socket (another program, a newer daemon), events never raises."""
    odd = [
        {"type": "snapshot"},  # every field missing
        {"type": "event", "status": None, "checkout": ["a"], "loaded_revision": 7, "generation": "x\ny"},
        {"type": "health", "checkout": "a\nb", "trusted": "yes", "mode": {"m": 1}},
        {"type": "error", "reason": "\x1b[2J", "detail": None},
        {"type": "hello", "version": "1\n2", "protocol": 1.5},
        {"type": "removed", "checkout": 3},
    ]
    for message in odd:
        line = format_message(message)
        assert line is not None and "\n" not in line and "\x1b" not in line, (message, line)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_KEYS = ["checkout", "status", "loaded_revision", "current_revision", "generation", "cause", "error"]
_KEYS += ["processes", "restart", "trusted", "mode", "reason", "detail", "version", "protocol"]


@budget(300)
@given(
    kind=st.sampled_from(
        ["snapshot", "event", "restart", "processes", "health", "removed", "error", "hello"]
    ),
    fields=st.dictionaries(st.sampled_from(_KEYS), _JSON, max_size=8),
)
def test_any_json_a_daemon_sends_is_one_escaped_line_never_an_error(
    kind: str, fields: dict[str, object]
) -> None:
    # A boolean where a revision belongs once raised (short(True)): any value is text.
    line = format_message({**fields, "type": kind})
    assert line is None or "\x1b" not in line
    if line is not None and kind != "snapshot":  # a snapshot's servers and restart add their lines
        assert "\n" not in line


def test_the_daemon_log_keeps_one_line_per_record_for_a_path_with_a_newline(
    odd_repo: Repo, workdir: Path
) -> None:
    with start_daemon(workdir, str(odd_repo.path)) as daemon:
        odd_repo.commit()
        assert daemon.stop() == 0
    lines = daemon.log_text().splitlines()
    assert lines and all(line[:4].isdigit() for line in lines), lines  # each starts with a timestamp
    assert "\x1b" not in daemon.log_text()


@pytest.mark.slow
def test_status_gives_up_on_a_peer_that_talks_but_never_sends_snapshots(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another program on the socket: a hello, then pings for ever; status exits 3 in time."""
    import json
    import socket
    import threading
    import time

    from stalewatch.cli import main
    from stalewatch.protocol.codec import PROTOCOL_VERSION

    path = workdir / "impostor.sock"
    stop = threading.Event()
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        listener.listen()
        listener.settimeout(WAIT)  # main never connecting must not leave this thread in accept()

        def talk() -> None:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                return  # main's own assertions say what went wrong
            with conn:
                hello = {
                    "type": "hello",
                    "protocol": PROTOCOL_VERSION,
                    "keepalive": 0.05,
                    "checkouts": ["/a", {"x": 1}],
                }
                conn.sendall(json.dumps(hello).encode() + b"\n")
                while not stop.wait(0.02):
                    try:
                        conn.sendall(b'{"type":"ping"}\n')
                    except OSError:
                        return

        thread = threading.Thread(target=talk, name="test-impostor")
        thread.start()
        try:
            started = time.monotonic()
            assert main(["status", "--socket", str(path)]) == 3
            assert time.monotonic() - started < 8.0  # read_status's 5 s, not for ever
        finally:
            stop.set()
            thread.join(timeout=10)
    err = capsys.readouterr().err
    # The deadline, not any other way of being unavailable (refused, bad hello, closed):
    # the last receive times out at it ("no answer in time") or the loop finds it
    # passed ("no complete answer in time").
    assert f"cannot reach the stalewatch daemon at {path}: " in err, err
    assert err.rstrip().endswith("answer in time"), err


@pytest.mark.unit
def test_a_restart_line_says_the_wait_a_409s_retry_after_says() -> None:
    restart = {"type": "restart", "checkout": "/srv/app", "phase": "scheduled", "revision": "b" * 40}
    line = format_message({**restart, "reason": "settle", "retry_after": 2.2})
    assert line == "restart    /srv/app scheduled onto bbbbbbb: settle (retry in 3 s)"  # 3, as Retry-After
    line = format_message({**restart, "retry_after": 0.2})
    assert line == "restart    /srv/app scheduled onto bbbbbbb (retry in 1 s)"


def test_an_unreadable_line_says_why_as_the_json_does() -> None:
    """The reason used to be in `--json` only; a human reading `events` needs it too (C4)."""
    message = {
        "type": "event",
        "checkout": "/srv/app",
        "status": "unreadable",
        "loaded_revision": "a" * 40,
        "current_revision": None,
        "generation": 3,
        "error": "cannot resolve HEAD: \x1b[2Jgarbage",
    }
    line = format_message(message)
    assert line is not None and line.endswith(": cannot resolve HEAD: \\x1b[2Jgarbage"), line
    stale = format_message({**message, "status": "stale", "error": "old"})
    assert stale is not None and stale.startswith("stale") and "old" not in stale


def _status(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "stalewatch", "status", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=WAIT, check=check)


def test_status_socket_with_a_path_shows_that_checkout_or_says_it_is_not_watched(
    workdir: Path, tmp_path: Path
) -> None:
    watched, other = make_repo(tmp_path / "watched"), make_repo(tmp_path / "other")
    with start_daemon(workdir, str(watched.path), str(other.path)) as daemon:
        socket = str(daemon.socket)
        assert len(_status("--socket", socket).stdout.splitlines()) == 2
        (line,) = _status("--socket", socket, str(watched.path / "module.py")).stdout.splitlines()
        assert str(watched.path.resolve()) in line and str(other.path.resolve()) not in line
        refused = _status("--socket", socket, str(make_repo(tmp_path / "elsewhere").path), check=False)
        assert refused.returncode == 2 and refused.stdout == ""
        assert "is not watched by the daemon" in refused.stderr
        assert str(watched.path.resolve()) in refused.stderr  # and says what it watches


@pytest.mark.unit
def test_causes_and_waits_read_alike() -> None:
    """Issue 29: `commit (1 commit ahead)` beside `pull (fast-forward, ahead)`, and `(retry in 0 s)`."""
    from stalewatch.core.cause import Cause

    pull = Cause("pull", "fast-forward", "pull: Fast-forward", "alice", "", 0.0, "+0000", "ahead")
    assert pull.describe(now=0.0) == "pull (fast-forward, some commits ahead) by alice at 00:00"
    restart = {"type": "restart", "checkout": "/srv/app", "phase": "scheduled", "retry_after": 0.3}
    assert format_message(restart) == f"{'restart':<10} /srv/app scheduled (retry in 1 s)"
