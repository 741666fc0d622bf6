"""``stalewatch daemon --check``: the start's own reading, printed, with nothing opened.

The command runs as a real process (``python -m stalewatch``) on real configuration
files and real repositories; what it prints on an error is compared with what a start
of the same arguments prints. A daemon already running on the socket is a real one.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from stalewatch.cli import main
from tests.server.test_properties import _document as toml_document
from tests.server.test_properties import documents
from tests.support.daemons import WAIT, Subscriber, greet, short_dir, start_daemon
from tests.support.ports import free_port
from tests.support.properties import budget
from tests.support.repos import Repo, make_repo


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def _write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "JOURNAL_STREAM"}
    return subprocess.run(
        [sys.executable, "-m", "stalewatch", "daemon", *args],
        capture_output=True,
        text=True,
        timeout=WAIT * 3,
        cwd=cwd,
        env=env,
        check=False,
    )


def _tree(*roots: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``roots`` with its mode, size and modification time."""
    seen = {}
    for root in roots:
        for path in [root, *root.rglob("*")]:
            info = path.lstat()
            seen[str(path)] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return seen


VALID = """\
socket = "{socket}"
log_level = "warning"
metrics_address = "127.0.0.1:{port}"
metrics_textfile = "{socket}.prom"

[[checkout]]
path = "{repo}"
on_stale = ["logger", "stale"]
hold_while = "{repo}/.updating"

[checkout.restart]
action = ["systemctl", "--user", "restart", "web.service"]
settle = 5
verify = ["python", "-c", "import module"]

[[checkout]]
path = "{other}/module.py"
revision = "{pinned}"
"""


def _valid(workdir: Path, git_repo: Repo) -> tuple[Path, Path, Repo, int]:
    other = make_repo(workdir / "other")
    pinned = other.head()
    other.commit("after the pin")
    port = free_port()
    path = workdir / "d.sock"
    text = VALID.format(socket=path, port=port, repo=git_repo.path, other=other.path, pinned=pinned)
    return _write(workdir / "daemon.toml", text), path, other, port


def test_a_valid_configuration_prints_what_would_run_and_touches_nothing(
    workdir: Path, git_repo: Repo
) -> None:
    config, sock, other, port = _valid(workdir, git_repo)
    before = _tree(workdir, git_repo.path)
    done = _run("--config", str(config), "--check")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    out = done.stdout
    assert out.startswith(f"# {config}: valid\n")
    assert f'socket = "{sock}"  # read at start only' in out
    assert f'metrics_address = "127.0.0.1:{port}"  # read at start only' in out
    assert f'metrics_textfile = "{sock}.prom"  # read at start only' in out
    assert 'log_level = "warning"\n' in out and "keepalive = 5.0  # default" in out
    # Each checkout with what it resolved to: its git dir, ref store and HEAD's revision.
    assert f"# worktree {git_repo.path}, git dir {git_repo.path / '.git'}, refs files\n" in out
    assert f"# HEAD {git_repo.head()}, current\n" in out
    assert f"# HEAD {other.head()}, stale\n" in out  # pinned to an older commit
    assert f'revision = "{other.git("rev-parse", "HEAD~1")}"' in out
    assert "# revision: HEAD when the daemon starts" in out
    assert 'on_stale = ["logger", "stale"]' in out and "hook_timeout = 60.0  # default" in out
    # The restart policy's effective settings: those written, and every default.
    assert 'action = ["systemctl", "--user", "restart", "web.service"]' in out
    assert "settle = 5.0\n" in out and "max_attempts = 3  # default" in out
    assert 'on_drain_timeout = "refuse"  # default' in out
    assert "signal =" not in out  # with an action, no signal is sent
    assert "# restart: none" in out  # the second checkout has no policy
    assert out.endswith("# 2 checkouts; nothing was started\n")
    # Nothing created, nothing changed: no socket, no lock, no textfile, no git file.
    assert not sock.exists() and not Path(f"{sock}.lock").exists()
    assert _tree(workdir, git_repo.path) == before
    with pytest.raises(ConnectionRefusedError):  # the metrics address was not listened on
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_checkouts_on_the_command_line_alone(workdir: Path, git_repo: Repo) -> None:
    done = _run("--socket", str(workdir / "s.sock"), str(git_repo.path / "module.py"), "--check")
    assert done.returncode == 0, done.stderr
    assert "# no configuration file: valid" in done.stdout
    assert f'path = "{git_repo.path / "module.py"}"' in done.stdout
    assert "# metrics: off" in done.stdout and "# 1 checkout;" in done.stdout


# slow kinds (quick: tests/server/test_daemon_config.py's in-process starts print the same
# messages, tests/server/test_restart_config.py the unknown key's); not-toml, bad-type and
# no-git keep --check and a start agreeing at each stage (parse, read, bind) in the quick loop.
@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param(
            '[[checkout]]\npath = "{repo}"\n\nsettle = 3\n',
            "{file}:4: checkout[1].settle: unknown key (known: ",
            id="unknown-key",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            '[[checkout]]\npath = "{repo}"\n[checkout.restart]\naction = ["x"]\nsettle = "soon"\n',
            "{file}:5: checkout[1].restart.settle: expected a number",
            id="bad-type",
        ),
        pytest.param(
            'keepalive = 5\n[[checkout]\npath = "{repo}"\n', "{file}:2: TOML: invalid: ", id="not-toml"
        ),
        pytest.param(
            '[[checkout]]\npath = "{repo}/nope"\n',
            "{repo}/nope: does not exist",
            id="missing",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            '[[checkout]]\npath = "{outside}"\n', "{outside}: is not inside a git working tree", id="no-git"
        ),
        pytest.param(
            '[[checkout]]\npath = "{repo}/loose.py"\n',
            "{repo}/loose.py: is not committed to the git repository",
            id="untracked",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            '[[checkout]]\npath = "{repo}"\n[[checkout]]\npath = "{repo}/module.py"\n',
            "checkout: {repo} is configured twice",
            id="twice",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            'log_level = "info"\n', "{file}: checkout: nothing to watch", id="empty", marks=pytest.mark.slow
        ),
    ],
)
def test_each_error_is_the_one_a_start_prints(workdir: Path, git_repo: Repo, text: str, error: str) -> None:
    git_repo.write("loose.py", "")
    outside = workdir / "outside"
    outside.mkdir()
    file = workdir / "daemon.toml"
    values = {"repo": git_repo.path, "outside": outside, "file": file}
    _write(file, text.format(**values))
    sock = workdir / "s.sock"
    checked = _run("--socket", str(sock), "--config", str(file), "--check")
    started = _run("--socket", str(sock), "--config", str(file))
    assert (checked.returncode, checked.stdout) == (2, "")
    assert checked.stderr.startswith(f"stalewatch: {error.format(**values)}"), checked.stderr
    assert checked.stderr == started.stderr and started.returncode == 2
    assert "Traceback" not in checked.stderr


def test_a_group_writable_file_is_refused_as_at_start(workdir: Path, git_repo: Repo) -> None:
    file = _write(workdir / "daemon.toml", f'[[checkout]]\npath = "{git_repo.path}"\n', mode=0o620)
    checked = _run("--socket", str(workdir / "s.sock"), "--config", str(file), "--check")
    started = _run("--socket", str(workdir / "s.sock"), "--config", str(file))
    assert checked.returncode == 2 and "writable by group" in checked.stderr
    assert checked.stderr == started.stderr


def test_metrics_without_the_extra_are_refused_as_at_start(workdir: Path, git_repo: Repo) -> None:
    """In an environment without prometheus_client (the test's has it: hidden here)."""
    file = _write(workdir / "c.toml", f'metrics_textfile = "{workdir}/s.prom"\n')
    hidden = "import sys; sys.modules['prometheus_client'] = None; from stalewatch.cli import main; "
    outcomes = []
    for flag in (["--check"], []):
        argv = ["daemon", "--socket", str(workdir / "s.sock"), "--config", str(file), str(git_repo.path)]
        code = f"sys.exit(main({argv + flag!r}))"
        outcomes.append(
            subprocess.run(
                [sys.executable, "-c", hidden + code],
                capture_output=True,
                text=True,
                timeout=WAIT * 3,
                check=False,
            )
        )
    checked, started = outcomes
    assert (checked.returncode, started.returncode) == (2, 2)
    assert "metrics_textfile: needs the prometheus_client library" in checked.stderr
    assert checked.stderr == started.stderr and checked.stdout == ""


def test_a_daemon_running_on_the_socket_is_unaffected(workdir: Path, git_repo: Repo) -> None:
    with start_daemon(workdir, str(git_repo.path)) as daemon:
        lock = Path(f"{daemon.socket}.lock")
        socket_before, lock_before = daemon.socket.lstat(), lock.lstat()
        log_before = daemon.log_text()
        file = _write(workdir / "next.toml", f'[[checkout]]\npath = "{git_repo.path}"\n')
        done = _run("--socket", str(daemon.socket), "--config", str(file), "--check")
        assert done.returncode == 0, done.stderr
        # The same socket and lock files, the daemon still serving, and nothing in its log.
        assert daemon.socket.lstat().st_ino == socket_before.st_ino
        assert lock.lstat().st_ino == lock_before.st_ino
        with Subscriber(daemon.socket) as sub:
            _, snapshots = greet(sub)
        assert [s["checkout"] for s in snapshots] == [str(git_repo.path)]
        assert daemon.proc.poll() is None and daemon.log_text() == log_before
        # A start in its place is refused, as it always was: the check is not a start.
        assert _run("--socket", str(daemon.socket), str(git_repo.path)).returncode == 2


def test_check_before_you_reload(workdir: Path, git_repo: Repo, tmp_path: Path) -> None:
    """What --check says of a file is what a SIGHUP then does with it."""
    other = make_repo(tmp_path / "other")
    config = _write(workdir / "c.toml", f'[[checkout]]\npath = "{git_repo.path}"\n')
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        argv = ("--socket", str(daemon.socket), "--config", str(config), "--check")
        for bad in (
            f'[[checkout]]\npath = "{git_repo.path}"\nhook_timout = 5\n',
            '[[checkout]]\npath = "nope"\n',
        ):
            _write(config, bad)
            refused = _run(*argv)
            assert refused.returncode == 2
            daemon.signal(signal.SIGHUP)
            daemon.notes.wait_for(lambda m: m.startswith("READY=1"))
            reason = refused.stderr.removeprefix("stalewatch: ").strip()
            assert f"reload failed, keeping the running configuration: {reason}" in daemon.log_text()
        _write(config, f'[[checkout]]\npath = "{git_repo.path}"\n[[checkout]]\npath = "{other.path}"\n')
        accepted = _run(*argv)
        assert accepted.returncode == 0 and f'path = "{other.path}"' in accepted.stdout
        daemon.signal(signal.SIGHUP)
        assert sub.next("snapshot")["checkout"] == str(other.path.resolve())


def test_in_process_the_check_starts_no_thread(
    workdir: Path, git_repo: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    before = set(threading.enumerate())
    argv = ["daemon", "--socket", str(workdir / "s.sock"), str(git_repo.path), "--check"]
    assert main(argv) == 0
    assert set(threading.enumerate()) == before  # no watcher, no inotify reader, no worker
    assert capsys.readouterr().out.endswith("# 1 checkout; nothing was started\n")


# -- any file: a verdict, never a traceback ---------------------------------------------------


def _check_file(content: bytes, repo: Path) -> None:
    with tempfile.TemporaryDirectory(dir=repo.parent) as tmp:
        file = Path(tmp) / "c.toml"
        file.write_bytes(content)
        file.chmod(0o600)
        sock = Path(tmp) / "s.sock"
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["daemon", "--socket", str(sock), "--config", str(file), "--check"])
        assert not sock.exists() and not Path(f"{sock}.lock").exists()
    assert code in (0, 2), (code, err.getvalue())
    event(f"exit {code}")
    assert "Traceback" not in err.getvalue() and "usage:" not in err.getvalue()  # checked, not refused
    if code == 0:
        assert out.getvalue().endswith("nothing was started\n")
    else:
        # The start's own message, last.
        assert out.getvalue() == ""
        assert err.getvalue().splitlines()[-1].startswith("stalewatch: "), err.getvalue()


@pytest.fixture(scope="module")
def repo_dir() -> Iterator[Path]:
    with short_dir() as path:
        yield make_repo(path / "repo").path


_IN_REPO = st.sampled_from(["repo", "repo/module.py", "../repo", "repo/nope"])


@budget(200)
@given(
    st.one_of(
        st.binary(max_size=300),
        documents.map(lambda data: toml_document(data).encode("utf-8", "surrogatepass")),
    )
)
def test_any_file_gets_a_verdict(repo_dir: Path, content: bytes) -> None:
    _check_file(content, repo_dir)


@budget(200)
@given(st.lists(st.tuples(_IN_REPO, st.booleans()), min_size=1, max_size=3), documents)
def test_any_checkouts_get_a_verdict(
    repo_dir: Path, paths: list[tuple[str, bool]], data: dict[str, Any]
) -> None:
    # Real checkouts, files, duplicates and missing paths, with any top-level keys.
    data = {key: value for key, value in data.items() if key != "checkout"}
    data["checkout"] = [
        {"path": f"../{path}", **({"revision": "ab" * 20} if pin else {})} for path, pin in paths
    ]
    _check_file(toml_document(data).encode("utf-8", "surrogatepass"), repo_dir)
