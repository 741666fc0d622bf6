"""Hook commands: argv (no shell), STALEWATCH_* variables, timeout, coalescing, hold."""

from __future__ import annotations

import json
import logging
import re
import signal
import socket
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stalewatch.core.status import Event, Status
from stalewatch.server.config import HookConfig
from stalewatch.server.drain import HEAD_BYTES, MAX_LINES, TAIL_BYTES, OutputDrain
from stalewatch.server.hooks import HookRunner
from tests.support.daemons import WAIT, Subscriber, greet, short_dir, start_daemon
from tests.support.repos import Repo, make_repo

# The hook reports its argv and environment to the test over a Unix socket, then
# waits for the test's go-ahead byte, prints a line and exits with the code it got.
# It exits with _exit(): the kernel closes its socket only after the exit status is
# fixed, so once the test sees the socket close nothing can turn the exit into a kill.
HOOK = r"""
import json, os, socket, sys
sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
env = {k: v for k, v in os.environ.items() if k.startswith(("STALEWATCH_", "NOTIFY_"))}
sock.sendall(json.dumps({"argv": sys.argv[2:], "env": env, "pid": os.getpid()}).encode() + b"\n")
code = sock.recv(1)
print("hook output line", flush=True)
os._exit(code[0] if code else 0)
"""


class HookServer:
    """Where hooks phone home; the test answers each to let it finish."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen()
        self.conns: list[socket.socket] = []

    def command(self, *extra: str) -> tuple[str, ...]:
        return (sys.executable, "-c", HOOK, str(self.path), *extra)

    def next_run(self, timeout: float = WAIT) -> tuple[socket.socket, dict[str, Any]]:
        self.sock.settimeout(timeout)
        conn, _ = self.sock.accept()
        self.conns.append(conn)
        conn.settimeout(timeout)
        data = b""
        while not data.endswith(b"\n"):
            data += conn.recv(65536)
        return conn, json.loads(data)

    def pending(self) -> bool:
        """Whether a hook is waiting to connect right now (no waiting)."""
        self.sock.setblocking(False)
        try:
            conn, _ = self.sock.accept()
        except BlockingIOError:
            return False
        conn.close()
        return True

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        self.sock.close()


@pytest.fixture
def hooks() -> Iterator[HookServer]:
    with short_dir() as path:
        server = HookServer(path / "hook.sock")
        try:
            yield server
        finally:
            server.close()


def _event(status: Status, current: str = "b" * 40, generation: int = 1) -> Event:
    previous = Status.CURRENT if status is not Status.CURRENT else Status.STALE
    return Event(Path("/srv/app"), status, previous, "a" * 40, current, generation, time.time())


@pytest.fixture
def runner_factory() -> Iterator[Any]:
    runners: list[HookRunner] = []
    drain = OutputDrain()

    def make(config: HookConfig) -> HookRunner:
        runner = HookRunner(Path("/srv/app"), config, drain)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.stop()
    drain.stop()


def wait_until_idle(runner: HookRunner, timeout: float) -> bool:
    """Wait until nothing is pending or running; False on timeout."""
    with runner._cond:
        return runner._cond.wait_for(lambda: runner._pending is None and runner.state == "idle", timeout)


def wait_for_state(runner: HookRunner, state: str, timeout: float) -> bool:
    """Wait until the runner is in ``state``; False on timeout."""
    with runner._cond:
        return runner._cond.wait_for(lambda: runner.state == state, timeout)


def finish(runner: HookRunner, conn: socket.socket, code: int = 0) -> None:
    """Let the hook waiting on ``conn`` exit with ``code``; wait until the runner is idle."""
    conn.send(bytes([code]))
    assert wait_until_idle(runner, WAIT)


def test_hook_gets_argv_literally_and_the_event_in_env(
    hooks: HookServer, runner_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    runner = runner_factory(HookConfig(on_stale=hooks.command("$HOME; echo hi", "*")))
    with caplog.at_level(logging.INFO, logger="stalewatch.server"):
        runner.submit(_event(Status.STALE), 5)
        conn, report = hooks.next_run()
        assert report["argv"] == ["$HOME; echo hi", "*"]  # never a shell
        env = report["env"]
        assert env["STALEWATCH_HOOK"] == "on_stale"
        assert env["STALEWATCH_STATUS"] == "stale"
        assert env["STALEWATCH_PREVIOUS_STATUS"] == "current"
        assert env["STALEWATCH_LOADED_REVISION"] == "a" * 40
        assert env["STALEWATCH_CURRENT_REVISION"] == "b" * 40
        assert env["STALEWATCH_GENERATION"] == "5"
        assert env["STALEWATCH_CHECKOUT"] == "/srv/app"
        finish(runner, conn, 3)
    assert "hook output line" in caplog.text
    assert "exited 3" in caplog.text


def test_only_the_matching_hook_runs(hooks: HookServer, runner_factory: Any) -> None:
    runner = runner_factory(HookConfig(on_current=hooks.command("current")))
    runner.submit(_event(Status.STALE), 1)  # no on_stale: nothing runs
    assert wait_until_idle(runner, WAIT)
    assert not hooks.pending()
    runner.submit(_event(Status.CURRENT, "a" * 40, 2), 2)
    conn, report = hooks.next_run()
    assert report["argv"] == ["current"]
    finish(runner, conn)


def test_one_at_a_time_and_later_events_coalesce(hooks: HookServer, runner_factory: Any) -> None:
    runner = runner_factory(
        HookConfig(on_stale=hooks.command("stale"), on_unreadable=hooks.command("unreadable"))
    )
    runner.submit(_event(Status.STALE, "b" * 40, 1), 1)
    first, report = hooks.next_run()
    assert report["env"]["STALEWATCH_GENERATION"] == "1"
    # While it runs: three more changes. Only the last one runs, once.
    runner.submit(_event(Status.UNREADABLE, "", 2), 2)
    runner.submit(_event(Status.STALE, "c" * 40, 3), 3)
    runner.submit(_event(Status.STALE, "d" * 40, 4), 4)
    assert not hooks.pending()  # nothing runs beside the first
    first.send(b"\0")
    second, report = hooks.next_run()
    assert report["env"]["STALEWATCH_GENERATION"] == "4"
    assert report["env"]["STALEWATCH_CURRENT_REVISION"] == "d" * 40
    finish(runner, second)
    assert not hooks.pending()


def test_timeout_kills_the_hook(
    hooks: HookServer, runner_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    runner = runner_factory(HookConfig(on_stale=hooks.command(), timeout=0.3))
    with caplog.at_level(logging.INFO, logger="stalewatch.server"):
        runner.submit(_event(Status.STALE), 1)
        conn, _ = hooks.next_run()  # and never answered
        assert wait_until_idle(runner, WAIT)
        assert conn.recv(1) == b""  # the hook process is gone
    assert "timed out after 0.3 s" in caplog.text


# A hook that starts a process in a session of its own (as a daemonizing restart script
# does), which keeps the hook's output pipe open, then waits for the test like HOOK.
ESCAPING_HOOK = f"""
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", {HOOK!r}, sys.argv[1], "escaped"], start_new_session=True)
os.execv(sys.executable, [sys.executable, "-c", {HOOK!r}, sys.argv[1], "hook"])
"""


# slow (quick: a hook's run of test_commands.py's
# test_a_child_that_calls_setsid_goes_with_a_timed_out_command (hooks run through commands.run);
# test_timeout_kills_the_hook covers a hook's timeout)
@pytest.mark.slow
def test_timeout_ends_a_process_that_left_the_group_too(
    hooks: HookServer, runner_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A daemonizing child (its own session) used to outlive the hook's timeout, holding
    its output; it carries the run's mark and goes with the hook (issue 17)."""
    command = (sys.executable, "-c", ESCAPING_HOOK, str(hooks.path))
    # The timeout must outlast two Python start-ups (the hook and its escaped child both
    # report before it ends): 0.3 s did not on a loaded 2-core machine.
    runner = runner_factory(HookConfig(on_stale=command, timeout=2.0))
    with caplog.at_level(logging.INFO, logger="stalewatch.server"):
        runner.submit(_event(Status.STALE), 1)
        roles = {report["argv"][0]: conn for conn, report in (hooks.next_run() for _ in range(2))}
        hook, escaped = roles["hook"], roles["escaped"]
        assert wait_until_idle(runner, WAIT)
        assert hook.recv(1) == b""  # the hook was killed
        assert escaped.recv(1) == b""  # and so was the process that left its group
    assert "timed out after 2.0 s" in caplog.text


def test_hold_while_marker_exists(hooks: HookServer, runner_factory: Any, tmp_path: Path) -> None:
    marker = tmp_path / "updating"
    marker.touch()
    runner = runner_factory(HookConfig(on_stale=hooks.command(), hold_while=marker))
    runner.submit(_event(Status.STALE, "b" * 40, 1), 1)
    assert wait_for_state(runner, "held", WAIT)
    runner.submit(_event(Status.STALE, "c" * 40, 2), 2)
    assert not hooks.pending()
    marker.unlink()  # the updater finished
    conn, report = hooks.next_run()
    assert report["env"]["STALEWATCH_CURRENT_REVISION"] == "c" * 40
    finish(runner, conn)
    assert not hooks.pending()


def test_missing_command_is_logged_and_later_hooks_still_run(
    hooks: HookServer, runner_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    runner = runner_factory(HookConfig(on_stale=("/nonexistent/restart-it",), on_current=hooks.command()))
    runner.submit(_event(Status.STALE), 1)
    assert wait_until_idle(runner, WAIT)
    assert "on_stale hook for /srv/app ['/nonexistent/restart-it']: cannot run" in caplog.text
    runner.submit(_event(Status.CURRENT, "a" * 40, 2), 2)
    conn, _ = hooks.next_run()
    finish(runner, conn)


def test_stop_ends_a_running_hook_quickly(hooks: HookServer) -> None:
    drain = OutputDrain()
    runner = HookRunner(Path("/srv/app"), HookConfig(on_stale=hooks.command()), drain)
    runner.submit(_event(Status.STALE), 1)
    conn, _ = hooks.next_run()
    started = time.monotonic()
    runner.stop()
    runner.stop()
    drain.stop()
    assert time.monotonic() - started < 1.5
    assert conn.recv(1) == b""


def test_daemon_runs_the_hook_after_a_commit(hooks: HookServer, git_repo: Repo) -> None:
    """End to end: a real commit, a real daemon, the hook runs with the revisions."""
    loaded = git_repo.head()
    with short_dir() as workdir:
        config = workdir / "c.toml"
        argv = ", ".join(json.dumps(part) for part in hooks.command("restart", "web"))
        config.write_text(f'[[checkout]]\npath = "{git_repo.path}"\non_stale = [{argv}]\nhook_timeout = 10\n')
        with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
            greet(sub)
            new = git_repo.commit()
            conn, report = hooks.next_run()
            assert report["argv"] == ["restart", "web"]
            env = report["env"]
            assert (env["STALEWATCH_STATUS"], env["STALEWATCH_LOADED_REVISION"]) == ("stale", loaded)
            assert env["STALEWATCH_CURRENT_REVISION"] == new
            assert env["STALEWATCH_CHECKOUT"] == str(git_repo.path.resolve())
            assert not any(key.startswith("NOTIFY_") for key in env)  # systemd's are ours alone
            conn.send(b"\0")
            assert conn.recv(1) == b""  # the hook exited (with status 0: see HOOK)
            # Stopping joins the hook thread, so its log lines are all written by now.
            assert daemon.stop() == 0
        log = daemon.log_text()
        assert "on_stale hook for" in log and "exited 0" in log
        assert "hook output line" in log


def test_reload_adds_hooks_to_a_checkout_watched_without_any(hooks: HookServer, git_repo: Repo) -> None:
    """SIGHUP keeps the watch and starts running the hooks it now names."""
    with short_dir() as workdir:
        config = workdir / "c.toml"
        config.write_text(f'[[checkout]]\npath = "{git_repo.path}"\n')
        with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
            greet(sub)
            argv = ", ".join(json.dumps(part) for part in hooks.command("added"))
            config.write_text(f'[[checkout]]\npath = "{git_repo.path}"\non_stale = [{argv}]\n')
            daemon.signal(signal.SIGHUP)
            daemon.notes.wait_for(lambda m: m.startswith("RELOADING=1"))
            daemon.notes.wait_for(lambda m: m.startswith("READY=1"))
            new = git_repo.commit()
            assert sub.next("event")["current_revision"] == new
            conn, report = hooks.next_run()
            assert report["argv"] == ["added"]
            assert report["env"]["STALEWATCH_CURRENT_REVISION"] == new
            conn.send(b"\0")
            assert conn.recv(1) == b""


# -- issue 12: chatty hooks, background children, hooks that ignore SIGTERM ---------------


def test_hook_output_is_bounded_in_bytes_under_yes(
    runner_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """`yes` for a whole timeout: memory stays flat, the log gets a head and a tail."""
    runner = runner_factory(HookConfig(on_stale=("yes",), timeout=1.0))
    tracemalloc.start()
    try:
        with caplog.at_level(logging.INFO, logger="stalewatch.server"):
            runner.submit(_event(Status.STALE), 1)
            assert wait_until_idle(runner, WAIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"peak {peak / 1e6:.1f} MB"
    assert "timed out after 1.0 s" in caplog.text
    dropped = re.search(r"\[\.\.\. (\d+) bytes not logged \.\.\.\]", caplog.text)
    assert dropped is not None and int(dropped.group(1)) > 1 << 20
    hook_lines = [r for r in caplog.records if r.getMessage().endswith(": y")]
    assert 0 < len(hook_lines) <= 2 * MAX_LINES


# One line of 300 MB, written in 1 MiB pieces, no newline.
HUGE_LINE = "import sys\nb = b'x' * (1 << 20)\nfor _ in range(300): sys.stdout.buffer.write(b)\n"


def test_one_huge_line_is_logged_as_a_bounded_head_and_tail(
    runner_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    runner = runner_factory(HookConfig(on_stale=(sys.executable, "-c", HUGE_LINE), timeout=60))
    tracemalloc.start()
    try:
        with caplog.at_level(logging.INFO, logger="stalewatch.server"):
            runner.submit(_event(Status.STALE), 1)
            assert wait_until_idle(runner, WAIT * 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"peak {peak / 1e6:.1f} MB"
    assert "exited 0" in caplog.text
    assert f"[... {300 * (1 << 20) - HEAD_BYTES - TAIL_BYTES} bytes not logged ...]" in caplog.text
    assert max(len(r.getMessage()) for r in caplog.records) < 2 * HEAD_BYTES


# Exits 0 at once, leaving a child that holds its stdout (the `restart &` idiom). The
# child phones home like HOOK, then, on the go-ahead, prints to that stdout and reports
# over the socket that the print went through (a closed pipe would kill it by SIGPIPE).
BACKGROUND = """
import subprocess, sys
child = r'''
import socket, sys
sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
sock.sendall(b'{"argv": ["child"], "env": {}, "pid": 0}\\n')
sock.recv(1)
for _ in range(200):
    print("background output " * 100, flush=True)
sock.sendall(b"printed")
'''
subprocess.Popen([sys.executable, "-c", child, sys.argv[1]])
"""


def test_a_hook_is_done_when_it_exits_even_if_its_child_holds_stdout(
    hooks: HookServer, runner_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    background = (sys.executable, "-c", BACKGROUND, str(hooks.path))
    runner = runner_factory(HookConfig(on_stale=background, on_current=hooks.command("next"), timeout=30))
    with caplog.at_level(logging.INFO, logger="stalewatch.server"):
        started = time.monotonic()
        runner.submit(_event(Status.STALE), 1)
        child, report = hooks.next_run()
        assert report["argv"] == ["child"]
        assert wait_until_idle(runner, WAIT)  # not after the 30 s timeout
        assert time.monotonic() - started < WAIT
        assert "on_stale hook for /srv/app exited 0" in caplog.text
        # The next hook is not delayed by the child, which is still running.
        runner.submit(_event(Status.CURRENT, "a" * 40, 2), 2)
        conn, report = hooks.next_run()
        assert report["argv"] == ["next"]
        finish(runner, conn)
        # The child was not killed, and its output (more than a pipe holds) is drained.
        child.send(b"\0")
        assert child.recv(16) == b"printed"
        assert child.recv(1) == b""
    assert "timed out" not in caplog.text
    assert "still holds its output" in caplog.text


# Reports like HOOK, then ignores SIGTERM and waits for ever.
STUBBORN = f"""
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
{HOOK.replace("code = sock.recv(1)", "code = sock.recv(1) or sock.recv(1)")}
"""


def test_sigterm_ends_the_daemon_with_several_stubborn_hooks_stopped_side_by_side(
    hooks: HookServer, tmp_path: Path
) -> None:
    # Each hook ignores SIGTERM and dies of the SIGKILL sent the kill grace (0.5 s, in
    # stalewatch.daemon) later: side by side the daemon ends in about one grace, one
    # after another in six (3 s and more).
    repos = [make_repo(tmp_path / f"r{n}") for n in range(6)]
    argv = ", ".join(json.dumps(part) for part in (sys.executable, "-c", STUBBORN, str(hooks.path)))
    with short_dir() as workdir:
        config = workdir / "c.toml"
        tables = (f'[[checkout]]\npath = "{r.path}"\non_stale = [{argv}]\nhook_timeout = 60\n' for r in repos)
        config.write_text("".join(tables))
        with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
            greet(sub)
            for repo in repos:
                repo.commit()
            runs = [hooks.next_run() for _ in repos]  # six hooks running, ignoring SIGTERM
            started = time.monotonic()
            daemon.signal(signal.SIGTERM)
            assert daemon.proc.wait(timeout=WAIT) == 0
            took = time.monotonic() - started
            for conn, _ in runs:
                assert conn.recv(1) == b""  # killed
        assert took < 2.0, f"stopping took {took:.2f} s"  # one after another: 3 s and more


def test_a_dangling_symlink_marker_holds(hooks: HookServer, runner_factory: Any, tmp_path: Path) -> None:
    marker = tmp_path / "updating"
    marker.symlink_to(tmp_path / "lock-of-the-updater-gone")
    runner = runner_factory(HookConfig(on_stale=hooks.command(), hold_while=marker))
    runner.submit(_event(Status.STALE), 1)
    assert wait_for_state(runner, "held", WAIT)
    assert not hooks.pending()
    marker.unlink()
    conn, _ = hooks.next_run()
    finish(runner, conn)


def test_a_runner_holds_a_thread_only_while_it_has_work(hooks: HookServer, runner_factory: Any) -> None:
    runner = runner_factory(HookConfig(on_stale=hooks.command()))
    assert runner.thread is None  # started, idle: no thread
    runner.submit(_event(Status.STALE), 1)
    conn, _ = hooks.next_run()
    thread = runner.thread
    assert thread is not None and thread.is_alive()
    finish(runner, conn)
    thread.join(WAIT)
    assert not thread.is_alive() and runner.thread is None
    runner.submit(_event(Status.STALE, "c" * 40, 2), 2)  # work again: a thread again
    conn, report = hooks.next_run()
    assert report["env"]["STALEWATCH_GENERATION"] == "2"
    finish(runner, conn)
