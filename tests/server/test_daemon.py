"""The daemon end to end: a real process, a real Unix socket, real git commits."""

from __future__ import annotations

import contextlib
import json
import queue
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemons import (
    REQUIRED,
    WAIT,
    LineReader,
    Subscriber,
    daemon_command,
    greet,
    short_dir,
    start_daemon,
)
from tests.support.repos import Repo, make_repo


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def test_event_reaches_subscriber_after_commit(workdir: Path, git_repo: Repo) -> None:
    """C3, C8, C12: snapshot first, then one event per change, in generation order."""
    loaded = git_repo.head()
    with start_daemon(workdir, str(git_repo.path)) as daemon, Subscriber(daemon.socket) as sub:
        hello, (snap,) = greet(sub)
        assert hello["protocol"] == 1
        assert hello["checkouts"] == [str(git_repo.path.resolve())]
        assert hello["keepalive"] > 0
        assert all(key in snap for key in REQUIRED)
        assert snap["status"] == "current"
        assert snap["loaded_revision"] == snap["current_revision"] == loaded
        assert snap["trusted"] is True
        assert snap["mode"] == "native"

        new = git_repo.commit("moved")
        event = sub.next("event")
        assert all(key in event for key in REQUIRED)
        assert (event["status"], event["previous_status"]) == ("stale", "current")
        assert (event["loaded_revision"], event["current_revision"]) == (loaded, new)
        assert event["generation"] == snap["generation"] + 1

        git_repo.git("reset", "-q", "--hard", loaded)  # C8: rollback returns to current
        back = sub.next("event")
        assert (back["status"], back["current_revision"]) == ("current", loaded)
        assert back["generation"] == event["generation"] + 1


def test_each_event_is_journaled_once_its_subscribers_are_sent_it(workdir: Path, git_repo: Repo) -> None:
    """The journal line comes after the clients' flush (issue 17), and is never lost."""
    loaded = git_repo.head()
    with start_daemon(workdir, str(git_repo.path)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        new = git_repo.commit("moved")
        stale = sub.next("event")
        git_repo.git("reset", "-q", "--hard", loaded)
        current = sub.next("event")
        daemon.stop()
    log = daemon.log_text()
    key = str(git_repo.path.resolve())
    lines = (
        f"WARNING stalewatch: {key} is stale (loaded {loaded}, current {new}, "
        f"generation {stale['generation']})",
        f"INFO stalewatch: {key} is current (loaded {loaded}, current {loaded}, "
        f"generation {current['generation']})",
    )
    assert [log.count(line) for line in lines] == [1, 1], log


def test_each_subscriber_gets_each_event_once(workdir: Path, git_repo: Repo) -> None:
    """C12 over the socket: two subscribers, three commits, no gaps, no duplicates."""
    with (
        start_daemon(workdir, str(git_repo.path)) as daemon,
        Subscriber(daemon.socket) as one,
        Subscriber(daemon.socket) as two,
    ):
        greet(one)
        greet(two)
        revisions = []
        for n in range(3):
            revisions.append(git_repo.commit(f"c{n}"))
            assert one.next("event")["current_revision"] == revisions[-1]
        got = [two.next("event") for _ in range(3)]
        assert [e["current_revision"] for e in got] == revisions
        assert [e["generation"] for e in got] == [1, 2, 3]
        # A latecomer gets the state as a snapshot, not the history.
        with Subscriber(daemon.socket) as late:
            _, (snap,) = greet(late)
            assert (snap["generation"], snap["current_revision"]) == (3, revisions[-1])
            one.send(b'{"type":"ping","id":7}\n')
            assert one.next("pong")["id"] == 7


def test_garbage_closes_only_that_client(workdir: Path, git_repo: Repo) -> None:
    with (
        start_daemon(workdir, str(git_repo.path)) as daemon,
        Subscriber(daemon.socket) as good,
        Subscriber(daemon.socket) as bad,
        Subscriber(daemon.socket) as long,
        Subscriber(daemon.socket) as unknown,
    ):
        for sub in (good, bad, long, unknown):
            greet(sub)
        bad.send(b"\x00\xffnot json at all\n")
        long.send(b"x" * 10_000)  # no newline, past the request limit
        unknown.send(b'{"type":"subscribe"}\n')
        for sub in (bad, long, unknown):
            rest = sub.rest()
            assert [m["type"] for m in rest if m["type"] != "ping"] == ["error"]
            assert rest[-1]["reason"] == "bad-request"
        new = git_repo.commit()
        assert good.next("event")["current_revision"] == new
    assert "closing client" in daemon.log_text()


def _read_all(sub: Subscriber, into: queue.SimpleQueue[dict[str, object]]) -> None:
    with contextlib.suppress(OSError, AssertionError):  # the test's end closes the socket
        while (line := sub.line(timeout=WAIT)) is not None:
            into.put(json.loads(line))


def test_stuck_client_is_dropped_without_delaying_others(workdir: Path, git_repo: Repo) -> None:
    """A client that never reads is told and dropped; the reader keeps getting lines."""
    config = workdir / "c.toml"
    config.write_text(
        f'keepalive = 0.05\nclient_queue = 4\nclient_buffer = 1024\n[[checkout]]\npath = "{git_repo.path}"\n'
    )
    with (
        start_daemon(workdir, "--config", str(config)) as daemon,
        Subscriber(daemon.socket) as reader,
        Subscriber(daemon.socket) as stuck,
    ):
        greet(reader)
        # The reader reads all along (on a thread: the test itself waits on systemd's
        # notifications meanwhile), as a live client does; the stuck one never does.
        lines: queue.SimpleQueue[dict[str, object]] = queue.SimpleQueue()
        reading = threading.Thread(target=_read_all, args=(reader, lines), name="test-reader", daemon=True)
        reading.start()
        daemon.notes.wait_for(lambda m: m.endswith("; 2 clients"))
        # A commit while the stuck client is still connected, its buffer filling: the
        # reader is told at once all the same (get's WAIT bounds it; a reader served
        # only after the stuck client's drop would wait for that drop).
        before_drop = git_repo.commit("while the stuck client is connected")
        while (message := lines.get(timeout=WAIT))["type"] != "event":
            assert message["type"] == "ping", message  # never an error: the reader is served
        assert message["current_revision"] == before_drop
        # The stuck client's buffer fills with pings; then it is dropped.
        daemon.notes.wait_for(lambda m: m.endswith("; 1 client"))
        new = git_repo.commit("after the stuck client was dropped")
        while (message := lines.get(timeout=WAIT))["type"] != "event":
            assert message["type"] == "ping", message
        assert message["current_revision"] == new
        assert lines.get(timeout=WAIT)["type"] in ("ping", "health")  # still served
        rest = stuck.rest()
        assert rest[-1]["type"] == "error"
        assert rest[-1]["reason"] == "slow-client"
        # Nothing after its drop: at most the first event, if its buffer still took it.
        events = [m["current_revision"] for m in rest if m["type"] == "event"]
        assert events in ([], [before_drop]), events
    assert "dropping client" in daemon.log_text()


def test_client_cap(workdir: Path, git_repo: Repo) -> None:
    config = workdir / "c.toml"
    config.write_text(f'max_clients = 1\n[[checkout]]\npath = "{git_repo.path}"\n')
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as first:
        greet(first)
        with Subscriber(daemon.socket) as second:
            (error,) = second.rest()
            assert (error["type"], error["reason"]) == ("error", "too-many-clients")
        new = git_repo.commit()
        assert first.next("event")["current_revision"] == new


def test_sighup_reload_keeps_watches(workdir: Path, tmp_path: Path, git_repo: Repo) -> None:
    other = make_repo(tmp_path / "other")
    config = workdir / "c.toml"
    config.write_text(f'[[checkout]]\npath = "{git_repo.path}"\n')
    loaded = git_repo.head()
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        first = git_repo.commit("before reload")
        assert sub.next("event")["generation"] == 1

        config.write_text(
            f'[[checkout]]\npath = "{git_repo.path}"\non_current = ["true"]\n'
            f'[[checkout]]\npath = "{other.path}"\n'
        )
        daemon.signal(signal.SIGHUP)
        daemon.notes.wait_for(lambda m: m.startswith("RELOADING=1"))
        daemon.notes.wait_for(lambda m: m.startswith("READY=1"))
        added = sub.next("snapshot")
        assert added["checkout"] == str(other.path.resolve())
        # The first checkout kept its guard: still loaded at the original revision.
        second = git_repo.commit("after reload")
        event = sub.next("event")
        assert (event["loaded_revision"], event["current_revision"]) == (loaded, second)
        assert event["generation"] == 2 and first != second
        assert other.commit() == sub.next("event")["current_revision"]

        config.write_text("this is = = not toml\n")
        daemon.signal(signal.SIGHUP)
        daemon.notes.wait_for(lambda m: m.startswith("READY=1"))
        assert git_repo.commit() == sub.next("event")["current_revision"]  # still serving

        config.write_text(f'[[checkout]]\npath = "{other.path}"\n')
        daemon.signal(signal.SIGHUP)
        removed = sub.next("removed")
        assert removed["checkout"] == str(git_repo.path.resolve())
        with Subscriber(daemon.socket) as late:
            assert greet(late)[0]["checkouts"] == [str(other.path.resolve())]
    log = daemon.log_text()
    assert "reload failed" in log and "line 1" in log


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stops_within_a_second(workdir: Path, git_repo: Repo, signum: int) -> None:
    with start_daemon(workdir, str(git_repo.path)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        mode = stat.S_IMODE(daemon.socket.stat().st_mode)
        assert mode == 0o660
        started = time.monotonic()
        daemon.signal(signum)
        assert daemon.proc.wait(timeout=WAIT) == (130 if signum == signal.SIGINT else 0)  # Ctrl-C: 130
        assert time.monotonic() - started < 1.0
        assert sub.rest() == []
        assert not daemon.socket.exists()
        daemon.notes.wait_for(lambda m: m == "STOPPING=1")


def test_stale_socket_from_a_crash_is_replaced(workdir: Path, git_repo: Repo) -> None:
    with start_daemon(workdir, str(git_repo.path)) as crashed, Subscriber(crashed.socket) as sub:
        greet(sub)
        crashed.kill()  # SIGKILL: the socket file stays behind
    assert stat.S_ISSOCK(crashed.socket.lstat().st_mode)
    with start_daemon(workdir, str(git_repo.path)) as daemon, Subscriber(daemon.socket) as sub:
        assert daemon.socket == crashed.socket
        greet(sub)
    assert "replacing the stale socket" in daemon.log_text()


def test_a_live_daemon_is_not_replaced(workdir: Path, git_repo: Repo) -> None:
    from stalewatch.cli import main

    with start_daemon(workdir, str(git_repo.path)) as daemon:
        done = main(["daemon", "--socket", str(daemon.socket), str(git_repo.path)])
        assert done == 2
        with Subscriber(daemon.socket) as sub:  # the running daemon is untouched
            greet(sub)


def test_the_log_says_stopped_only_for_a_daemon_that_started(workdir: Path, git_repo: Repo) -> None:
    """Issue 29: a daemon refused at start-up (another one listens) logged `daemon stopped
    (1 checkouts, in 0.00 s)`; a started one logged `trusted=False mode=none` at INFO."""
    with start_daemon(workdir, str(git_repo.path)) as daemon:
        daemon.notes.wait_for(lambda m: m.startswith("STATUS="))
        refused = subprocess.run(
            daemon_command("--socket", str(daemon.socket), str(git_repo.path)),
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )
        assert refused.returncode == 2, refused.stderr
        assert "stopped" not in refused.stderr and "serving" not in refused.stderr, refused.stderr
        assert daemon.stop() == 0
    log = daemon.log_text()
    assert f"for 1 checkout: {git_repo.path.resolve()}" in log, log
    assert "daemon stopped (1 checkout, in " in log, log
    assert "trusted=False mode=none" not in log, log  # DEBUG: a watcher not running yet
    assert "trusted=True mode=native" in log, log


def test_a_foreign_listener_is_not_replaced(
    workdir: Path, git_repo: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    from stalewatch.cli import main

    path = workdir / "live.sock"
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(path))
        live.listen()
        assert main(["daemon", "--socket", str(path), str(git_repo.path)]) == 2
    assert "already listening" in capsys.readouterr().err
    assert path.exists()


def test_journal_stream_drops_timestamps(workdir: Path, git_repo: Repo) -> None:
    log = workdir / "j.log"
    log.touch()
    info = log.stat()
    # The daemon's stderr is that file: JOURNAL_STREAM names it as systemd would.
    env = {"JOURNAL_STREAM": f"{info.st_dev}:{info.st_ino}"}
    with start_daemon(workdir, str(git_repo.path), env=env, name="j") as daemon:
        daemon.stop()
    lines = daemon.log_text().splitlines()
    assert lines, "no log output"
    assert all(line.startswith(("<6>", "<4>", "<3>", "<7>")) for line in lines), lines
    assert not any(line[3:7].isdigit() for line in lines)
    with start_daemon(workdir, str(git_repo.path), name="t") as plain:
        plain.stop()
    assert plain.log_text()[:4].isdigit()  # a timestamp of its own outside systemd


def test_events_and_status_commands(
    workdir: Path, git_repo: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess
    import sys

    from stalewatch.cli import main

    with start_daemon(workdir, str(git_repo.path)) as daemon:
        assert main(["status", "--socket", str(daemon.socket)]) == 0
        out = capsys.readouterr().out
        assert out.startswith("current ") and str(git_repo.path.resolve()) in out
        tail = subprocess.Popen(
            [sys.executable, "-m", "stalewatch", "events", "--json", "--socket", str(daemon.socket)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert tail.stdout is not None
            assert '"type":"hello"' in tail.stdout.readline()
            assert '"type":"snapshot"' in tail.stdout.readline()
            new = git_repo.commit()
            line = tail.stdout.readline()
            assert '"type":"event"' in line and new in line
            tail.send_signal(signal.SIGTERM)
            assert tail.wait(timeout=WAIT) == 0
        finally:
            tail.kill()
            tail.wait()
            if tail.stdout is not None:
                tail.stdout.close()
        assert main(["status", "--json", "--socket", str(daemon.socket)]) == 0
        assert f'"current_revision":"{new}"' in capsys.readouterr().out


def test_events_command_reconnects_when_the_daemon_restarts_and_says_so(
    workdir: Path, git_repo: Repo
) -> None:
    import subprocess
    import sys

    tail: subprocess.Popen[bytes] | None = None
    try:
        with start_daemon(workdir, str(git_repo.path)) as daemon:
            tail = subprocess.Popen(
                [sys.executable, "-m", "stalewatch", "events", "--json", "--socket", str(daemon.socket)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            out, err = LineReader(tail.stdout), LineReader(tail.stderr)
            assert '"type":"hello"' in out.line()
            assert daemon.stop() == 0
        lost = err.line()
        assert "lost the daemon" in lost and lost.endswith("reconnecting"), lost
        assert tail.poll() is None  # still running, waiting for a daemon
        with start_daemon(workdir, str(git_repo.path)) as second:
            assert "reconnected to the daemon" in err.line()
            hello = out.until(lambda line: '"type":"hello"' in line)
            assert f'"pid":{second.proc.pid}' in hello  # the new daemon greeted it
            new = git_repo.commit("after the restart")
            assert new in out.until(lambda line: '"type":"event"' in line)
        tail.send_signal(signal.SIGTERM)
        assert tail.wait(timeout=WAIT) == 0
    finally:
        if tail is not None:
            tail.kill()
            tail.wait()
            for pipe in (tail.stdout, tail.stderr):
                if pipe is not None:
                    pipe.close()


def test_events_command_exits_3_when_no_daemon_was_ever_reached(workdir: Path) -> None:
    from stalewatch.cli import main

    assert main(["events", "--socket", str(workdir / "none.sock")]) == 3
