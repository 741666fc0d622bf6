"""The [checkout.restart] table: every key read, every mistake named by file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalewatch.core.errors import DaemonConfigError
from stalewatch.server.config import load
from stalewatch.server.restart.policy import RestartPolicy
from stalewatch.server.restart.rules import DrainOutcome

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
        "min_interval = 5\n"
        "drain_timeout = 120\n"
        'on_drain_timeout = "Restart"\n'
        'drain_probe = ["/srv/app/venv/bin/python", "-m", "app.inflight"]\n'
        "drain_probe_timeout = 3\n"
        "drain_poll = 0.5\n"
        'pid_command = ["supervisorctl", "pid", "web"]\n',
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
        drain_timeout=120.0,
        on_drain_timeout=DrainOutcome.RESTART,
        drain_probe=("/srv/app/venv/bin/python", "-m", "app.inflight"),
        drain_probe_timeout=3.0,
        drain_poll=0.5,
        pid_command=("supervisorctl", "pid", "web"),
    )


def test_defaults_and_the_pidfile_form(tmp_path: Path) -> None:
    policy = load(write(tmp_path, 'pidfile = "/run/gunicorn.pid"\nsignal = "sighup"\n')).checkouts[0].restart
    assert policy == RestartPolicy(pidfile=Path("/run/gunicorn.pid"), signal="HUP")
    assert (policy.settle, policy.max_attempts, policy.min_interval) == (2.0, 3, 30.0)


def test_the_gunicorn_handoff_form(tmp_path: Path) -> None:
    text = 'pidfile = "/run/gunicorn.pid"\nsignal = "USR2"\nhandoff = true\n'
    policy = load(write(tmp_path, text)).checkouts[0].restart
    assert policy == RestartPolicy(pidfile=Path("/run/gunicorn.pid"), signal="USR2", handoff=True)


def test_a_pidfile_beside_an_action_only_tells_what_runs(tmp_path: Path) -> None:
    text = 'action = ["supervisorctl", "restart", "web"]\npidfile = "/run/web.pid"\n'
    policy = load(write(tmp_path, text)).checkouts[0].restart
    assert policy == RestartPolicy(action=("supervisorctl", "restart", "web"), pidfile=Path("/run/web.pid"))


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
        ("settle = 1\n", "checkout[1].restart", 4, "give action"),
        ('action = ["x"]\nsignal = "HUP"\n', "checkout[1].restart.signal", 6, "only without an action"),
        (
            'action = ["x"]\npidfile = "/p"\npid_command = ["y"]\n',
            "checkout[1].restart.pid_command",
            7,
            "one way",
        ),
        ('action = ["x"]\nhandoff = true\n', "checkout[1].restart.handoff", 6, "USR2"),
        ('pidfile = "/p"\nhandoff = true\n', "checkout[1].restart.handoff", 6, "USR2"),
        ('pidfile = "/p"\nsignal = "USR2"\nhandoff = 1\n', "checkout[1].restart.handoff", 7, "true or false"),
        ('action = ["x"]\ndrain_poll = 0\n', "checkout[1].restart.drain_poll", 6, "more than 0"),
        ('action = ["x"]\ndrain_poll = -1\n', "checkout[1].restart.drain_poll", 6, "between"),
        ('action = ["x"]\ndrain_poll = true\n', "checkout[1].restart.drain_poll", 6, "a number"),
        ('action = ["x"]\ndrain_timeout = "10m"\n', "checkout[1].restart.drain_timeout", 6, "a number"),
        ('action = ["x"]\non_drain_timeout = "kill"\n', "checkout[1].restart.on_drain_timeout", 6, "refuse"),
        ('action = ["x"]\ndrain_probe = "count"\n', "checkout[1].restart.drain_probe", 6, "list of strings"),
        ('action = ["x"]\nmax_attempts = true\n', "checkout[1].restart.max_attempts", 6, "whole number"),
        ('action = ["x"]\nmax_attempts = 2.0\n', "checkout[1].restart.max_attempts", 6, "whole number"),
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
