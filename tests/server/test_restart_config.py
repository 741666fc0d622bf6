"""The [checkout.restart] table: every key read, every mistake named by file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalewatch.client.connection import MAX_BACKOFF
from stalewatch.core.declared import declared
from stalewatch.core.errors import DaemonConfigError
from stalewatch.server.config import load
from stalewatch.server.restart.policy import DrainOutcome, RestartPolicy

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
        "reconnect_grace = 0\n"
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
        reconnect_grace=0.0,
        pid_command=("supervisorctl", "pid", "web"),
    )


def test_defaults_and_the_pidfile_form(tmp_path: Path) -> None:
    policy = load(write(tmp_path, 'pidfile = "/run/gunicorn.pid"\nsignal = "sighup"\n')).checkouts[0].restart
    assert policy == RestartPolicy(pidfile=Path("/run/gunicorn.pid"), signal="HUP")
    assert (policy.settle, policy.max_attempts, policy.min_interval) == (2.0, 3, 30.0)
    assert policy.reconnect_grace == 3.0 > MAX_BACKOFF  # servers reconnect within it


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
        ('action = ["x"]\nmax_attempts = 2.5\n', "checkout[1].restart.max_attempts", 6, "between 1 and 100"),
        ('action = ["x"]\nmax_attempts = "3"\n', "checkout[1].restart.max_attempts", 6, "between 1 and 100"),
        ('action = ["x"]\nmax_attempts = 101\n', "checkout[1].restart.max_attempts", 6, "between 1 and 100"),
        ('pidfile = "/p"\nsignal = 1\n', "checkout[1].restart.signal", 6, "expected a signal name"),
        ('pidfile = "/p"\nsignal = ["HUP"]\n', "checkout[1].restart.signal", 6, "expected a signal name"),
        (
            'action = ["x"]\non_drain_timeout = 1\n',
            "checkout[1].restart.on_drain_timeout",
            6,
            "refuse, restart",
        ),
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


def _load_restart(tmp_path: Path, restart: str) -> RestartPolicy:
    policy = load(write(tmp_path, restart)).checkouts[0].restart
    assert policy is not None
    return policy


def test_a_restart_that_is_not_a_table_is_a_config_error_on_its_line(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text('[[checkout]]\npath = "/a"\nrestart = "x"\n')
    with pytest.raises(DaemonConfigError) as caught:
        load(file)
    assert (caught.value.name, caught.value.value, caught.value.line) == ("checkout[1].restart", "x", 3)
    assert caught.value.reason == "expected a [checkout.restart] table"


@pytest.mark.parametrize("count", [1, 100])
def test_max_attempts_takes_its_bounds(tmp_path: Path, count: int) -> None:
    policy = _load_restart(tmp_path, f'action = ["x"]\nmax_attempts = {count}\n')
    assert policy.max_attempts == count and type(policy.max_attempts) is int


@pytest.mark.parametrize(
    ("key", "low", "high"),
    [
        ("settle", 0.0, 3600.0),
        ("update_marker_max_age", 1.0, 7 * 86400.0),
        ("verify_timeout", 0.1, 3600.0),
        ("confirm_timeout", 0.1, 3600.0),
        ("action_timeout", 0.1, 3600.0),
        ("min_interval", 0.0, 86400.0),
        ("drain_timeout", 0.0, 86400.0),
        ("drain_probe_timeout", 0.1, 3600.0),
        ("drain_poll", 0.0, 3600.0),
        ("reconnect_grace", 0.0, 60.0),
    ],
)
def test_every_duration_takes_its_bounds_and_refuses_past_them(
    tmp_path: Path, key: str, low: float, high: float
) -> None:
    assert getattr(_load_restart(tmp_path, f'action = ["x"]\n{key} = {high}\n'), key) == high
    if key != "drain_poll":  # a poll of 0 is a busy loop: refused on its own
        policy = _load_restart(tmp_path, f'action = ["x"]\n{key} = {low}\n')
        assert getattr(policy, key) == low and type(getattr(policy, key)) is float
    for wrong in (low - 0.05, high + 0.05):
        with pytest.raises(DaemonConfigError) as caught:
            _load_restart(tmp_path, f'action = ["x"]\n{key} = {wrong}\n')
        assert caught.value.name == f"checkout[1].restart.{key}"
        assert caught.value.reason == f"expected between {low:g} and {high:g}"
    whole = _load_restart(tmp_path, f'action = ["x"]\n{key} = {int(high)}\n')
    assert getattr(whole, key) == high and type(getattr(whole, key)) is float


@pytest.mark.parametrize(
    ("written", "name"), [("usr2", "USR2"), ("SIGTERM", "TERM"), ("Hup", "HUP"), ("INT", "INT")]
)
def test_a_signal_is_named_in_any_case_with_or_without_sig(tmp_path: Path, written: str, name: str) -> None:
    assert _load_restart(tmp_path, f'pidfile = "/p"\nsignal = "{written}"\n').signal == name


def test_each_unknown_key_is_named_with_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(DaemonConfigError) as caught:
        _load_restart(tmp_path, 'action = ["x"]\nretries = 3\n')
    assert caught.value.name == "checkout[1].restart.retries"
    assert caught.value.reason == f"unknown key (known: {', '.join(sorted(declared(RestartPolicy)))})"
    assert caught.value.value == 3


def test_without_action_or_pidfile_the_table_says_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(DaemonConfigError) as caught:
        _load_restart(tmp_path, "settle = 1\n")
    assert (caught.value.name, caught.value.reason) == (
        "checkout[1].restart",
        "give action (an argv), or pidfile (with signal)",
    )


def test_a_handoff_false_is_no_handoff_and_a_pidfile_with_usr2_alone_is_a_signal(tmp_path: Path) -> None:
    policy = _load_restart(tmp_path, 'pidfile = "/p"\nsignal = "USR2"\nhandoff = false\n')
    assert (policy.handoff, policy.signal, policy.action) == (False, "USR2", None)
    policy = _load_restart(tmp_path, 'pidfile = "/p"\nsignal = "USR2"\n')
    assert policy.handoff is False


def test_a_lock_in_an_existing_directory_is_taken(tmp_path: Path) -> None:
    assert _load_restart(tmp_path, 'action = ["x"]\nlock = "u.lock"\n').lock == tmp_path / "u.lock"


@pytest.mark.parametrize(
    ("restart", "key", "value", "reason"),
    [
        ('action = ["x"]\ndrain_poll = 0\n', "drain_poll", 0, "expected more than 0"),
        ('pidfile = "/p"\nsignal = "USR2"\nhandoff = 1\n', "handoff", 1, "expected true or false"),
        ('pidfile = "/p"\nsignal = 9\n', "signal", 9, "expected a signal name"),
        (
            'action = ["x"]\nsignal = "HUP"\n',
            "signal",
            "HUP",
            "a signal is sent only without an action (to the pidfile's pid)",
        ),
        (
            'action = ["x"]\npidfile = "/p"\npid_command = ["y"]\n',
            "pid_command",
            ["y"],
            "give one way to find the server's pid: pidfile or pid_command",
        ),
        (
            'pidfile = "/p"\nhandoff = true\n',
            "handoff",
            True,
            'a handoff needs pidfile with signal = "USR2" and no action (gunicorn\'s re-exec)',
        ),
        ('pidfile = ""\n', "pidfile", "", "expected a non-empty path string (without NUL)"),
        (
            'action = ["x"]\nupdate_marker = 3\n',
            "update_marker",
            3,
            "expected a non-empty path string (without NUL)",
        ),
        ('action = ["x"]\nlock = ""\n', "lock", "", "expected a non-empty path string (without NUL)"),
        ('action = ["x"]\nlock = "/no/such/dir/u.lock"\n', "lock", "/no/such/dir/u.lock", None),
    ],
)
def test_each_refusal_names_its_key_value_and_reason_exactly(
    tmp_path: Path, restart: str, key: str, value: object, reason: str | None
) -> None:
    with pytest.raises(DaemonConfigError) as caught:
        _load_restart(tmp_path, restart)
    assert (caught.value.name, caught.value.value) == (f"checkout[1].restart.{key}", value)
    assert caught.value.reason == (reason or "its directory /no/such/dir does not exist")
    line = 5 + restart.splitlines().index(next(x for x in restart.splitlines() if x.startswith(f"{key} =")))
    assert caught.value.line == line
