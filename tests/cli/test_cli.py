"""stalewatch.cli: ``main()`` called directly and the command run as a real process."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stalewatch.cli import main
from stalewatch.cli.run import parser
from stalewatch.core.exits import INTERRUPTED as EXIT_INTERRUPTED
from stalewatch.core.exits import OK as EXIT_OK
from stalewatch.core.exits import UNREACHABLE as EXIT_UNREACHABLE
from stalewatch.core.exits import UNREADABLE as EXIT_UNREADABLE
from stalewatch.core.exits import USAGE as EXIT_USAGE
from tests.support.daemons import short_dir
from tests.support.repos import Repo


def test_status_prints_the_current_revision(git_repo: Repo, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", str(git_repo.path)]) == EXIT_OK
    assert capsys.readouterr().out.strip() == git_repo.head()


def test_status_json_for_a_source_file(git_repo: Repo, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--json", str(git_repo.path / "module.py")]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data["type"] == "snapshot"
    assert data["status"] == "current"
    assert data["current_revision"] == git_repo.head()


def test_status_outside_a_checkout_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", str(tmp_path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "not inside a git working tree" in err
    assert "Traceback" not in err


def test_status_of_a_missing_path_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", str(tmp_path / "nope")]) == EXIT_USAGE
    assert "does not exist" in capsys.readouterr().err


def test_status_with_corrupt_head_exits_unreadable(
    git_repo: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    (git_repo.path / ".git/HEAD").write_text("garbage\n")
    assert main(["status", str(git_repo.path)]) == EXIT_UNREADABLE
    assert "cannot resolve HEAD" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_USAGE
    assert main(["frobnicate"]) == EXIT_USAGE
    assert main(["--version"]) == EXIT_OK
    assert "stalewatch" in capsys.readouterr().out


def test_invalid_setting_is_a_usage_error(
    git_repo: Repo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STALEWATCH_VERIFY_INTERVAL", "soon")
    assert main(["status", str(git_repo.path)]) == EXIT_USAGE
    assert "STALEWATCH_VERIFY_INTERVAL" in capsys.readouterr().err


@contextmanager
def _watch_process(path: Path, *extra: str) -> Iterator[subprocess.Popen[str]]:
    """A real ``stalewatch watch`` process, killed and reaped whatever the test does."""
    with subprocess.Popen(
        [sys.executable, "-m", "stalewatch", "watch", *extra, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as proc:
        try:
            yield proc
        finally:
            proc.kill()


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_watch_process_prints_changes_and_exits_cleanly(git_repo: Repo, stop_signal: signal.Signals) -> None:
    with _watch_process(git_repo.path, "--json") as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = json.loads(proc.stdout.readline())
        assert (first["type"], first["status"]) == ("snapshot", "current")
        new = git_repo.commit("seen by the watch command")
        event = json.loads(proc.stdout.readline())
        assert (event["type"], event["status"], event["current_revision"]) == ("event", "stale", new)
        proc.send_signal(stop_signal)
        assert proc.wait(timeout=5) == (EXIT_INTERRUPTED if stop_signal == signal.SIGINT else EXIT_OK)
        assert "Traceback" not in proc.stderr.read()


def test_watch_process_human_lines(git_repo: Repo) -> None:
    with _watch_process(git_repo.path) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("current")
        new = git_repo.commit("human")
        line = proc.stdout.readline()
        assert line.startswith("stale")
        assert new[:7] in line
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=5) == EXIT_INTERRUPTED


def test_watch_process_on_bad_path_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "stalewatch", "watch", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == EXIT_USAGE
    assert "does not exist" in done.stderr
    assert "Traceback" not in done.stderr


def test_status_of_a_repository_without_commits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.repos import make_repo

    repo = make_repo(tmp_path / "empty", initial=False)
    assert main(["status", str(repo.path)]) == EXIT_OK
    assert capsys.readouterr().out.startswith("(no commit yet)")


@pytest.mark.parametrize("command", ["status", "watch"])
def test_a_file_no_repository_tracks_is_a_usage_error_not_a_silent_watch(
    git_repo: Repo, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`watch` of an untracked file used to run for ever, watching nothing (C2)."""
    stray = git_repo.write("notes.txt", "not added\n")
    assert main([command, str(stray)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not committed to the git repository" in err, err
    assert "git add notes.txt && git commit" in err


def test_the_first_watch_line_says_how_the_checkout_is_watched(git_repo: Repo) -> None:
    """Printed once the watcher runs: not `trusted: false, mode: none` from before it did."""
    with _watch_process(git_repo.path, "--json") as proc:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert (first["trusted"], first["mode"]) == (True, "native"), first
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == EXIT_OK


def test_every_help_has_examples_that_the_parser_accepts() -> None:
    """`--help` shows examples; each `stalewatch ...` one is a command line this parser takes."""
    top = parser()
    for words in [("watch",), ("status",), ("daemon",), ("events",), ("hermes", "setup")]:
        command = top
        for word in words:
            (choices,) = [a.choices for a in command._actions if isinstance(a, argparse._SubParsersAction)]
            command = choices[word]
        examples = command.format_help().split("examples:\n", 1)[1].splitlines()
        ours = [
            line.split("#")[0].split("|")[0] for line in examples if line.strip().startswith("stalewatch")
        ]
        assert len(ours) >= 2, words
        for line in ours:
            top.parse_args(shlex.split(line)[1:])  # raises SystemExit on a usage error


def test_the_help_gives_the_socket_default_the_docs_give() -> None:
    """Issue 29: `daemon --help` and `events --help` left out the $XDG_RUNTIME_DIR fallback."""
    default = "$RUNTIME_DIRECTORY/stalewatch.sock, else $XDG_RUNTIME_DIR/stalewatch.sock"
    page = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
    assert default in " ".join(page.read_text().replace("`", "").split())
    (commands,) = [a.choices for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name in ("daemon", "events"):
        assert default in " ".join(commands[name].format_help().split()), name


def test_a_mistyped_option_shows_the_commands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 29: `status --jsn` showed the top level's usage, which does not list --json."""
    assert main(["status", "--jsn"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("usage: stalewatch status ") and "--json" in err, err
    assert "unrecognized arguments: --jsn" in err
    assert main(["hermes", "setup", "--nope"]) == EXIT_USAGE
    assert capsys.readouterr().err.startswith("usage: stalewatch hermes setup ")


@pytest.mark.parametrize("command", [["events"], ["status"]])
def test_a_socket_path_nobody_listens_on_says_why(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29: a directory and a crashed daemon's leftover socket both said `Connection refused`."""
    with short_dir() as tmp_path:
        _nobody_listens(tmp_path, command, capsys)


def _nobody_listens(tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, "--socket", str(tmp_path)]) == EXIT_UNREACHABLE
    assert "it is a directory, not a socket" in capsys.readouterr().err
    leftover = tmp_path / "stalewatch.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as crashed:
        crashed.bind(str(leftover))  # bound, never listening, never unlinked: what a crash leaves
    assert main([*command, "--socket", str(leftover)]) == EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert "no daemon is listening on it" in err and "crashed" in err, err
    assert "Connection refused" not in err
