"""The daemon's configuration and start-up errors: clear messages, exit code 2."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch.cli import main
from stalewatch.core.errors import DaemonConfigError, ProtocolError, SocketPathError
from stalewatch.protocol.codec import LineReader, decode, encode
from stalewatch.protocol.socket_path import default_socket_path
from stalewatch.server.config import MAX_CONFIG_BYTES, check_ownership, load
from tests.support.daemons import short_dir
from tests.support.repos import Repo


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def test_full_example(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text(
        'socket = "run/s.sock"\nkeepalive = 2\nmax_clients = 9\nclient_queue = 7\nlog_level = "DEBUG"\n'
        "[[checkout]]\n"
        'path = "/srv/app"\n'
        f'revision = "{"ab" * 20}"\n'
        'on_stale = ["systemctl", "--no-block", "restart", "web.service"]\n'
        "hook_timeout = 5\n"
        'hold_while = "/srv/app/.updating"\n'
        "[[checkout]]\n"
        'path = "other"\n'
    )
    config = load(file)
    assert config.socket == tmp_path / "run/s.sock"  # relative to the file
    assert (config.keepalive, config.max_clients, config.client_queue) == (2.0, 9, 7)
    assert config.log_level == "debug"
    first, second = config.checkouts
    assert first.path == Path("/srv/app") and first.revision == "ab" * 20
    assert first.hooks.on_stale == ("systemctl", "--no-block", "restart", "web.service")
    assert first.hooks.timeout == 5.0 and first.hooks.hold_while == Path("/srv/app/.updating")
    assert second.path == tmp_path / "other" and not second.hooks.any


@pytest.mark.parametrize(
    ("text", "name", "line"),
    [
        ('[[checkout]]\npath = "/a"\non_stale = "systemctl restart web"\n', "checkout[1].on_stale", 3),
        (
            '[[checkout]]\npath = "/a"\n\n[[checkout]]\npath = "/b"\non_stal = ["x"]\n',
            "checkout[2].on_stal",
            6,
        ),
        ('keepalive = "soon"\n', "keepalive", 1),
        ("\nmax_clients = 0\n", "max_clients", 2),
        ('log_level = "loud"\n', "log_level", 1),
        ('[[checkout]]\npath = "/a"\nrevision = "HEAD"\n', "checkout[1].revision", 3),
        ('[[checkout]]\nrevision = "HEAD"\n', "checkout[1].path", 1),
        ('sockets = "/x"\n', "sockets", 1),
        ('[[checkout]]\npath = "/a"\non_current = []\n', "checkout[1].on_current", 3),
        ('[[checkout]]\npath = "/a"\nhook_timeout = -1\n', "checkout[1].hook_timeout", 3),
        ("a = [1,\n  2\nb = 3\n", "TOML", 3),
        ('[[checkout]]\npath = "~no-such-user-stalewatch/a"\n', "checkout[1].path", 2),  # no home to expand
    ],
)
def test_invalid_config_names_key_and_line(tmp_path: Path, text: str, name: str, line: int) -> None:
    file = tmp_path / "c.toml"
    file.write_text(text)
    with pytest.raises(DaemonConfigError) as caught:
        load(file)
    assert (caught.value.name, caught.value.line, caught.value.file) == (name, line, file)
    assert str(caught.value).startswith(f"{file}:{line}: {name}: ")


def test_invalid_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "c.toml"
    file.write_text('[[checkout]]\npath = "/a"\non_stale = "restart"\n')
    assert main(["daemon", "--socket", str(tmp_path / "s"), "--config", str(file)]) == 2
    err = capsys.readouterr().err
    assert f"{file}:3: checkout[1].on_stale" in err and "never run through a shell" in err


def test_a_checkout_under_a_home_nobody_has_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["daemon", "--socket", str(tmp_path / "s"), "~no-such-user-stalewatch/x"]) == 2
    assert "CHECKOUT: no home directory to expand ~ to" in capsys.readouterr().err


def test_unreadable_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["daemon", "--socket", str(tmp_path / "s"), "--config", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_checkout_that_does_not_exist_exits_2(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["daemon", "--socket", str(workdir / "s.sock"), str(workdir / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (workdir / "s.sock").exists()


def test_untracked_file_and_duplicates_exit_2(
    workdir: Path, git_repo: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    loose = git_repo.write("loose.py", "")
    assert main(["daemon", "--socket", str(workdir / "s.sock"), str(loose)]) == 2
    assert "is not committed to the git repository" in capsys.readouterr().err
    module = git_repo.path / "module.py"
    assert main(["daemon", "--socket", str(workdir / "s.sock"), str(git_repo.path), str(module)]) == 2
    assert "configured twice" in capsys.readouterr().err


def test_socket_in_a_missing_directory_exits_2(git_repo: Repo, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["daemon", "--socket", "/nonexistent-dir/s.sock", str(git_repo.path)]) == 2
    assert "directory /nonexistent-dir does not exist" in capsys.readouterr().err


def test_socket_path_problems_exit_2(
    workdir: Path, git_repo: Repo, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    regular = workdir / "file"
    regular.write_text("precious")
    assert main(["daemon", "--socket", str(regular), str(git_repo.path)]) == 2
    assert "not a socket" in capsys.readouterr().err
    assert regular.read_text() == "precious"
    assert main(["daemon", "--socket", str(workdir / ("x" * 120)), str(git_repo.path)]) == 2
    assert "too long" in capsys.readouterr().err
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert main(["daemon", str(git_repo.path)]) == 2
    assert "--socket" in capsys.readouterr().err
    assert main(["daemon", "--socket", str(workdir / "s.sock")]) == 2
    assert "nothing to watch" in capsys.readouterr().err
    # A configuration error, naming the file that configures nothing.
    empty = workdir / "empty.toml"
    empty.write_text("log_level = 'info'\n")
    assert main(["daemon", "--socket", str(workdir / "s.sock"), "--config", str(empty)]) == 2
    assert f"{empty}: checkout: nothing to watch" in capsys.readouterr().err


def test_default_socket_path() -> None:
    assert default_socket_path({"RUNTIME_DIRECTORY": "/run/a:/run/b"}) == Path("/run/a/stalewatch.sock")
    assert default_socket_path({"XDG_RUNTIME_DIR": "/run/user/1"}) == Path("/run/user/1/stalewatch.sock")
    with pytest.raises(SocketPathError):
        default_socket_path({})


def test_protocol_lines() -> None:
    assert decode(encode({"type": "ping", "n": 1})) == {"type": "ping", "n": 1}
    for bad in (b"nope", b"[1]", b'{"type": 3}', b"\xff"):
        with pytest.raises(ProtocolError):
            decode(bad)
    reader = LineReader(10)
    assert reader.feed(b"ab") == []
    assert reader.feed(b"c\nde\nf") == [b"abc", b"de"]
    assert reader.feed(b"\n") == [b"f"]
    with pytest.raises(ProtocolError):
        reader.feed(b"x" * 11)


def test_status_over_the_socket_when_unreachable(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--socket", str(workdir / "none.sock")]) == 3
    assert "cannot reach the stalewatch daemon" in capsys.readouterr().err
    assert main(["events", "--socket", str(workdir / "none.sock")]) == 3


# -- issue 12: the file names commands the daemon runs ------------------------------------


def _config(tmp_path: Path, text: str = '[[checkout]]\npath = "/a"\n', mode: int = 0o644) -> Path:
    file = tmp_path / "c.toml"
    file.write_text(text)
    file.chmod(mode)
    return file


@pytest.mark.parametrize(("mode", "who"), [(0o664, "group"), (0o646, "others"), (0o666, "group and others")])
def test_a_config_writable_by_group_or_others_is_refused(tmp_path: Path, mode: int, who: str) -> None:
    file = _config(tmp_path, mode=mode)
    with pytest.raises(DaemonConfigError) as caught:
        load(file)
    assert f"writable by {who} (mode {mode:04o})" in str(caught.value)
    assert "chmod go-w" in str(caught.value)
    assert str(caught.value).startswith(f"{file}: config: ")


def test_a_config_owned_by_a_stranger_is_refused(tmp_path: Path) -> None:
    file = _config(tmp_path, mode=0o600)
    info = file.stat()
    check_ownership(file, info, euid=info.st_uid)  # ours: fine
    stranger = info.st_uid + 4242
    check_ownership(file, os.stat_result((*info[:4], 0, *info[5:])), euid=stranger)  # root's: fine
    owned = os.stat_result((*info[:4], stranger, *info[5:]))
    with pytest.raises(DaemonConfigError) as caught:
        check_ownership(file, owned, euid=info.st_uid)
    assert f"owned by uid {stranger}, neither root nor the daemon's user" in str(caught.value)
    if os.geteuid() == 0:  # a real file of another user, read through load()
        os.chown(file, stranger, -1)
        with pytest.raises(DaemonConfigError, match="owned by uid"):
            load(file)


def test_the_checks_are_made_on_the_opened_file_through_a_symlink(tmp_path: Path) -> None:
    real = _config(tmp_path, mode=0o664)
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    with pytest.raises(DaemonConfigError, match="writable by group"):
        load(link)  # the link's own mode (0777) is not what counts: the file's is
    real.chmod(0o644)
    assert load(link).checkouts[0].path == Path("/a")


def test_a_fifo_or_a_device_as_config_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(DaemonConfigError, match="not a regular file"):
        load(fifo)
    with pytest.raises(DaemonConfigError, match="not a regular file"):
        load(Path("/dev/zero"))  # would otherwise be read for ever


def test_a_huge_config_is_refused(tmp_path: Path) -> None:
    file = _config(tmp_path, "# " + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(DaemonConfigError, match="larger than"):
        load(file)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ('[[checkout]]\npath = "/a\\u0000b"\n', "checkout[1].path"),
        ('[[checkout]]\npath = "/a"\non_stale = ["restart\\u0000"]\n', "checkout[1].on_stale"),
        ('socket = "/run/\\u0000"\n', "socket"),
        ("a = " + "[" * 2000 + "]" * 2000 + "\n", "TOML"),
    ],
)
def test_values_nothing_downstream_could_use_are_refused_at_load(
    tmp_path: Path, text: str, name: str
) -> None:
    with pytest.raises(DaemonConfigError) as caught:
        load(_config(tmp_path, text))
    assert caught.value.name == name


def test_reload_refuses_a_config_made_group_writable(workdir: Path, git_repo: Repo) -> None:
    from tests.support.daemons import Subscriber, greet, start_daemon

    config = workdir / "c.toml"
    config.write_text(f'[[checkout]]\npath = "{git_repo.path}"\n')
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        config.write_text(f'[[checkout]]\npath = "{git_repo.path}"\non_stale = ["touch", "/tmp/pwned"]\n')
        config.chmod(0o666)
        daemon.signal(signal.SIGHUP)
        daemon.notes.wait_for(lambda m: m.startswith("RELOADING=1"))
        daemon.notes.wait_for(lambda m: m.startswith("READY=1"))
        assert git_repo.commit() == sub.next("event")["current_revision"]  # still serving
    log = daemon.log_text()
    assert "reload failed" in log and "writable by group and others" in log
