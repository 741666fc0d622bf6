"""SIGTERM and SIGINT stop ``events`` at once: the handler sets a flag and wakes the loop;
Ctrl-C at any moment of any command exits 130 without a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import stalewatch.__main__
from stalewatch.core import exits
from tests.support.daemons import WAIT, short_dir, start_daemon
from tests.support.repos import Repo


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_events_stops_at_once_while_the_daemon_is_silent(git_repo: Repo, stop_signal: int) -> None:
    with short_dir() as workdir:
        config = workdir / "c.toml"
        config.write_text(f"keepalive = 60.0\n[[checkout]]\npath = {json.dumps(str(git_repo.path))}\n")
        config.chmod(0o600)
        with start_daemon(workdir, "--config", str(config)) as daemon:
            tail = subprocess.Popen(
                [sys.executable, "-m", "stalewatch", "events", "--json", "--socket", str(daemon.socket)],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert tail.stdout is not None
                assert '"type":"hello"' in tail.stdout.readline()
                assert '"type":"snapshot"' in tail.stdout.readline()  # then silence: no ping for 60 s
                started = time.monotonic()
                tail.send_signal(stop_signal)
                assert tail.wait(timeout=WAIT) == (130 if stop_signal == signal.SIGINT else 0)
                assert time.monotonic() - started < 2.0  # woken, not left waiting for a line
            finally:
                tail.kill()
                tail.wait()
                if tail.stdout is not None:
                    tail.stdout.close()


def _ctrl_c_moment(proc: subprocess.Popen[str], moment: str, command: str) -> None:
    """Wait for ``moment``, told by the process's own output, then send SIGINT (Ctrl-C)."""
    assert proc.stdout is not None and proc.stderr is not None
    if moment == "imports":  # -X importtime writes a line as each import ends
        while "stalewatch.core" not in (line := proc.stderr.readline()):
            assert line, "the command ended before its imports did"
    elif moment == "running":  # its handlers are installed once it says it runs
        stream, mark = (proc.stderr, "serving") if command == "daemon" else (proc.stdout, "")
        while mark not in (line := stream.readline()) or not line:
            assert line, "the command ended before it ran"
    proc.send_signal(signal.SIGINT)


@pytest.mark.parametrize("moment", ["at-once", "imports", "running"])
@pytest.mark.parametrize("command", ["daemon", "watch", "events", "status", "hermes"])
def test_ctrl_c_at_any_moment_exits_130_without_a_traceback(
    git_repo: Repo, command: str, moment: str
) -> None:
    """Issue 29: Ctrl-C in the first ~0.2 s (the imports, before any handler) printed a
    KeyboardInterrupt traceback; after start-up SIGINT exited 0, as SIGTERM does."""
    if command in ("status", "hermes") and moment == "running":
        pytest.skip(f"{command} prints and exits: nothing runs to interrupt")
    with short_dir() as workdir, start_daemon(workdir, str(git_repo.path)) as daemon:
        words = {
            "daemon": ["daemon", "--socket", str(workdir / "own.sock"), str(git_repo.path)],
            "watch": ["watch", str(git_repo.path)],
            "events": ["events", "--socket", str(daemon.socket)],
            "status": ["status", str(git_repo.path)],
            "hermes": ["hermes", "setup", "--hermes-home", str(workdir / "nowhere")],
        }[command]
        python = [sys.executable, "-X", "importtime"] if moment == "imports" else [sys.executable, "-u"]
        proc = subprocess.Popen(
            [*python, "-m", "stalewatch", *words], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            _ctrl_c_moment(proc, moment, command)
            _, err = proc.communicate(timeout=WAIT)
        finally:
            proc.kill()
            proc.wait()
    if moment == "at-once":
        # Before the interpreter installs its own handler the signal ends the process
        # (what a shell shows as 130 too); after it, the command line answers 130. In
        # between, the interpreter's own start (site, runpy) runs no code of ours: a
        # traceback there is Python's, so none may name a file of stalewatch.
        assert f"{os.sep}stalewatch{os.sep}" not in err, err
        assert proc.returncode in (exits.INTERRUPTED, -signal.SIGINT), (proc.returncode, err)
        return
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert proc.returncode == exits.INTERRUPTED, (proc.returncode, err)


def test_the_entry_points_exit_code_is_the_one_defined() -> None:
    """The entry point spells 130 itself: importing it is what a Ctrl-C may interrupt."""
    assert stalewatch.__main__.INTERRUPTED == exits.INTERRUPTED
