"""Commands the daemon runs: bounded output, done when the process exits, killed on timeout."""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from stalewatch.server import commands as process
from stalewatch.server.drain import HEAD_BYTES
from tests.support.daemons import WAIT

PY = sys.executable


def test_output_is_kept_to_a_bounded_head_and_tail_whatever_the_command_prints() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # 300 MB on one line, then a last line: only a head and a tail are kept.
    script = (
        "import sys\nfor _ in range(300):\n    sys.stdout.write('x' * (1 << 20))\nprint()\nprint('the end')"
    )
    outcome = process.run([PY, "-c", script], timeout=60)
    assert outcome.ok
    assert len(outcome.output) < 3 * HEAD_BYTES + 200  # head, tail, and a note of what was left out
    assert outcome.output.endswith("the end")
    assert "bytes not logged" in outcome.output
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < 50_000  # kilobytes: far below the 300 MB printed


def test_a_command_is_done_when_it_exits_even_if_its_background_child_holds_the_output(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "child.pid"
    # The usual restart idiom: start something in the background and exit 0.
    script = f"sleep 30 & echo $! > {pidfile}; echo started"
    started = time.monotonic()
    outcome = process.run(["sh", "-c", script], timeout=20)
    elapsed = time.monotonic() - started
    child = int(pidfile.read_text())
    try:
        assert outcome.ok and outcome.code == 0
        assert "started" in outcome.output
        assert elapsed < 5  # not the child's 30 s, not the timeout
        os.kill(child, 0)  # and the child was left running
    finally:
        os.kill(child, signal.SIGKILL)


def _ended(pid: int, timeout: float) -> bool:
    """True once ``pid`` has exited (gone, or a zombie its new parent has not reaped),
    waiting at most ``timeout`` s on a pidfd (a signal is delivered, not acted on, at once)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    return bool(ready)


def _state(pid: int) -> str | None:
    """The process's state letter from /proc (``Z``: a zombie), ``None`` once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="os.pidfd_open needs Linux >= 5.3")
def test_a_command_past_its_timeout_is_killed_with_its_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "background.pid"
    script = f"sleep 60 & echo $! > {pidfile}; sleep 60"
    outcome = process.run(["sh", "-c", script], timeout=0.5)
    background = int(pidfile.read_text())
    try:
        assert not outcome.ok and outcome.code is None
        assert "timed out" in outcome.detail
        # Not only the shell: the sleep it left in the background went with its group.
        assert _ended(background, WAIT), f"background pid {background} survived: {_state(background)}"
        assert _state(background) in (None, "Z")
    finally:
        if _state(background) not in (None, "Z"):
            os.kill(background, signal.SIGKILL)


# A process that leaves the command's group (setsid), writes its pid and sleeps. The
# command waits until the pid is written (its own behaviour), then sleeps past its timeout.
_ESCAPER = "import os, sys, time; os.setsid(); open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"
_WAIT_FOR_PID = 'while [ ! -s "$0" ]; do sleep 0.01; done; sleep 60'


def _outlived(pidfile: Path, argv: list[str], env: dict[str, str] | None = None) -> bool:
    """Run ``argv`` into its timeout; whether the process that wrote ``pidfile`` survived.

    The survivor, if any, is killed afterwards by the pid it wrote.
    """
    outcome = process.run(argv, timeout=3.0, env=env)
    assert "timed out" in outcome.detail
    pid = int(pidfile.read_text())
    try:
        return not _ended(pid, WAIT)
    finally:
        if _state(pid) not in (None, "Z"):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="os.pidfd_open needs Linux >= 5.3")
def test_a_child_that_calls_setsid_goes_with_a_timed_out_command(tmp_path: Path) -> None:
    pidfile = tmp_path / "escaper.pid"
    script = f'{PY} -c "{_ESCAPER}" "$0" & {_WAIT_FOR_PID}'
    assert not _outlived(pidfile, ["sh", "-c", script, str(pidfile)])


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="os.pidfd_open needs Linux >= 5.3")
def test_a_double_forked_setsid_orphan_is_found_by_the_runs_mark(tmp_path: Path) -> None:
    """Its parent exited at once: no longer a descendant, it still carries the run's mark."""
    pidfile = tmp_path / "escaper.pid"
    script = f'({PY} -c "{_ESCAPER}" "$0" &); {_WAIT_FOR_PID}'
    assert not _outlived(pidfile, ["sh", "-c", script, str(pidfile)])


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="os.pidfd_open needs Linux >= 5.3")
def test_a_timeout_spares_what_another_run_started(tmp_path: Path) -> None:
    """Only this run's processes: another run's orphan (its own mark) is left alone."""
    other = tmp_path / "other.pid"
    bystander = process.run(
        [
            "sh",
            "-c",
            f'({PY} -c "{_ESCAPER}" "$0" &); {_WAIT_FOR_PID.replace("sleep 60", "true")}',
            str(other),
        ],
        timeout=30,
    )
    assert bystander.ok, bystander.detail
    pid = int(other.read_text())
    try:
        pidfile = tmp_path / "escaper.pid"
        assert not _outlived(
            pidfile, ["sh", "-c", f'({PY} -c "{_ESCAPER}" "$0" &); {_WAIT_FOR_PID}', str(pidfile)]
        )
        assert _state(pid) not in (None, "Z"), "another run's process was killed"
    finally:
        os.kill(pid, signal.SIGKILL)


def test_stop_kills_a_running_command() -> None:
    stop = threading.Event()
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    try:
        outcome = process.run(["sleep", "60"], timeout=60, stop=stop)
    finally:
        timer.cancel()
    assert not outcome.ok and "stopped" in outcome.detail


def test_exit_status_and_the_last_line_make_the_detail() -> None:
    outcome = process.run([PY, "-c", "import sys; print('boom'); sys.exit(3)"], timeout=30)
    assert (outcome.ok, outcome.code) == (False, 3)
    assert outcome.detail == "exited 3: boom"
    missing = process.run(["/nonexistent/command"], timeout=5)
    assert not missing.ok and "cannot run" in missing.detail


def test_systemd_variables_are_not_passed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    outcome = process.run(
        [PY, "-c", "import os; print(os.environ.get('NOTIFY_SOCKET'))"], timeout=30, env={"A": "1"}
    )
    assert outcome.output == "None"


def test_an_error_while_waiting_kills_and_reaps_the_command_then_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Out of descriptors for the selector (EMFILE) once the command runs: the error
    # reaches the caller (the restart executor answers with it), and the command is not
    # left running unseen with its pipe open.
    started = tmp_path / "started"
    argv = [
        sys.executable,
        "-c",
        f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(60)",
    ]

    class NoSelector:
        def __init__(self) -> None:
            deadline = time.monotonic() + WAIT
            while not started.exists():  # the command runs: its pid is in use
                assert time.monotonic() < deadline
                select.select([], [], [], 0.01)
            raise OSError(24, "Too many open files")

    spawned: list[int] = []
    real_popen = process.subprocess.Popen

    def popen(*args: object, **kwargs: object) -> object:
        proc = real_popen(*args, **kwargs)  # type: ignore[call-overload]
        spawned.append(proc.pid)
        return proc

    monkeypatch.setattr(process.selectors, "DefaultSelector", NoSelector)
    monkeypatch.setattr(process.subprocess, "Popen", popen)
    try:
        with pytest.raises(OSError, match="Too many open files"):
            process.run(argv, timeout=WAIT)
        (pid,) = spawned
        with pytest.raises(ChildProcessError):  # reaped: no longer our child, not a zombie
            os.waitpid(pid, os.WNOHANG)
    finally:
        for pid in spawned:  # without the fix it runs on, still our unreaped child
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG) == (0, 0):  # running: the pid cannot be reused
                    os.killpg(pid, signal.SIGKILL)  # its own group, made by run()
                    os.waitpid(pid, 0)
