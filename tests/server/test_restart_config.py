"""The [checkout.restart] table: every key read, every mistake named by file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalewatch.core.errors import DaemonConfigError
from stalewatch.server.config import load
from stalewatch.server.restart.policy import RestartPolicy

pytestmark = pytest.mark.unit


def write(tmp_path: Path, restart: str, *, before: str = "") -> Path:
    file = tmp_path / "c.toml"
    file.write_text(f'{before}[[checkout]]\npath = "/srv/app"\n\n[checkout.restart]\n{restart}')
    return file


def test_every_key_is_read_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "locks").mkdir()
    file = write(
        tmp_path,
        'action = ["systemctl", "--user", "--no-block", "restart", "web.service"]\n'
        "settle = 0.5\n"
        'hold_while = ".updating"\n'
        'update_marker = "/home/me/.hermes/.hermes-update-in-progress"\n'
        "update_marker_max_age = 600\n"
        'incomplete_markers = ["/srv/app/.update-incomplete", "venv/.lazy-refresh-incomplete"]\n'
        'verify = ["/srv/app/venv/bin/python", "-c", "import run_agent"]\n'
        "verify_timeout = 30\n"
        'lock = "locks/update.lock"\n'
        'confirm = ["curl", "-fsS", "http://127.0.0.1:8787/health"]\n'
        "confirm_timeout = 20\n"
        "action_timeout = 10\n"
        "max_attempts = 2\n"
        "min_interval = 5\n",
    )
    policy = load(file).checkouts[0].restart
    assert policy == RestartPolicy(
        action=("systemctl", "--user", "--no-block", "restart", "web.service"),
        settle=0.5,
        hold_while=(tmp_path / ".updating",),
        update_marker=Path("/home/me/.hermes/.hermes-update-in-progress"),
        update_marker_max_age=600.0,
        incomplete_markers=(Path("/srv/app/.update-incomplete"), tmp_path / "venv/.lazy-refresh-incomplete"),
        verify=("/srv/app/venv/bin/python", "-c", "import run_agent"),
        verify_timeout=30.0,
        lock=tmp_path / "locks/update.lock",
        confirm=("curl", "-fsS", "http://127.0.0.1:8787/health"),
        confirm_timeout=20.0,
        action_timeout=10.0,
        max_attempts=2,
        min_interval=5.0,
    )


def test_defaults_and_the_pidfile_form(tmp_path: Path) -> None:
    policy = load(write(tmp_path, 'pidfile = "/run/gunicorn.pid"\nsignal = "sighup"\n')).checkouts[0].restart
    assert policy == RestartPolicy(pidfile=Path("/run/gunicorn.pid"), signal="HUP")
    assert (policy.settle, policy.max_attempts, policy.min_interval) == (2.0, 3, 30.0)


def test_no_restart_table_means_no_policy(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text('[[checkout]]\npath = "/srv/app"\n')
    assert load(file).checkouts[0].restart is None


@pytest.mark.parametrize(
    ("restart", "name", "line", "reason"),
    [
        ('action = "systemctl restart web"\n', "checkout[1].restart.action", 5, "list of strings"),
        ('action = ["x"]\nlock = "/no/such/dir/u.lock"\n', "checkout[1].restart.lock", 6, "does not exist"),
        ('action = ["x"]\nsettle = -1\n', "checkout[1].restart.settle", 6, "between"),
        ('action = ["x"]\nsetle = 1\n', "checkout[1].restart.setle", 6, "unknown key"),
        ('action = ["x"]\npidfile = "/run/p.pid"\n', "checkout[1].restart", 4, "exactly one"),
        ("settle = 1\n", "checkout[1].restart", 4, "exactly one"),
        ('pidfile = "/p"\nsignal = "NOPE"\n', "checkout[1].restart.signal", 6, "signal"),
        ('action = ["x"]\nmax_attempts = 0\n', "checkout[1].restart.max_attempts", 6, "whole number"),
        ('action = ["x"]\nhold_while = [1]\n', "checkout[1].restart.hold_while", 6, "path"),
        ('action = ["x"]\nverify = []\n', "checkout[1].restart.verify", 6, "list of strings"),
    ],
)
def test_bad_restart_settings_are_named_by_file_line_and_key(
    tmp_path: Path, restart: str, name: str, line: int, reason: str
) -> None:
    file = write(tmp_path, restart)
    with pytest.raises(DaemonConfigError) as caught:
        load(file)
    assert caught.value.name == name
    assert caught.value.line == line
    assert reason in str(caught.value)
    assert str(caught.value).startswith(f"{file}:{line}: {name}: ")


def test_an_inline_restart_table_is_located_on_its_line(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text(
        '[[checkout]]\npath = "/a"\n\n[[checkout]]\npath = "/b"\nrestart = { settle = -3, action = ["x"] }\n'
    )
    with pytest.raises(DaemonConfigError) as caught:
        load(file)
    assert (caught.value.name, caught.value.line) == ("checkout[2].restart.settle", 6)
