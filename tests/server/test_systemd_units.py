"""The systemd units: valid for systemd-analyze, and carrying what the daemon relies on."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "systemd"
ANALYZE = shutil.which("systemd-analyze")
REQUIRED = {
    "Type": "notify",
    "NotifyAccess": "main",
    "ProtectSystem": "strict",
    "NoNewPrivileges": "yes",
    "RestartPreventExitStatus": "2",
    "ExecReload": "/bin/kill -HUP $MAINPID",
}


def _settings(path: Path) -> dict[str, str]:
    settings = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


@pytest.mark.parametrize("name", ["stalewatch.service", "stalewatch@.service"])
def test_unit_has_what_the_daemon_needs(name: str) -> None:
    settings = _settings(UNITS / name)
    for key, value in REQUIRED.items():
        assert settings.get(key) == value, key
    assert int(settings["WatchdogSec"]) > 0
    assert settings["RuntimeDirectory"].startswith("stalewatch")
    # Started with the web server, before it, and never stopped or restarted with it: a
    # daemon driving a restart must outlive it (R3, R5).
    assert settings["Before"] == settings["WantedBy"]
    assert "PartOf" not in settings and "BindsTo" not in settings
    assert settings["ReadOnlyPaths"]
    assert settings["RestrictAddressFamilies"] == "AF_UNIX"
    # ExecStart runs our own CLI: its arguments must parse.
    from stalewatch.cli.run import parser as _parser

    argv = settings["ExecStart"].split()
    assert argv[0].endswith("/stalewatch")
    args = _parser().parse_args(argv[1:])
    assert args.command == "daemon" and args.config


def test_template_is_per_instance() -> None:
    settings = _settings(UNITS / "stalewatch@.service")
    assert settings["Before"] == settings["WantedBy"] == "%i.service"
    assert "%i" in settings["RuntimeDirectory"] and "%i" in settings["ExecStart"]


def test_the_gunicorn_unit_keeps_its_master_hup_and_names_the_pidfile_of_its_policy() -> None:
    """Issue 28: under systemd gunicorn's master is the unit's main process and must stay."""
    path = UNITS / "gunicorn-webapp.service"
    settings = _settings(path)
    assert (settings["Type"], settings["NotifyAccess"]) == ("notify", "main")
    assert settings["ExecReload"] == "/bin/kill -s HUP $MAINPID"
    assert settings["KillMode"] == "mixed"
    argv = settings["ExecStart"].split()
    pidfile = argv[argv.index("--pid") + 1]
    assert f'#   pidfile = "{pidfile}"' in path.read_text().splitlines()
    assert '#   signal = "HUP"' in path.read_text().splitlines()
    assert not any("USR2" in line for line in path.read_text().splitlines() if not line.startswith("#"))


@pytest.mark.skipif(ANALYZE is None, reason="no systemd-analyze here: apt-get install systemd")
@pytest.mark.parametrize(
    ("name", "verify_as"),
    [
        ("stalewatch.service", "stalewatch.service"),
        ("stalewatch@.service", "stalewatch@hermes-webui.service"),
        ("gunicorn-webapp.service", "gunicorn-webapp.service"),
    ],
)
def test_systemd_analyze_verify(tmp_path: Path, name: str, verify_as: str) -> None:
    # verify checks that ExecStart exists: point it at this environment's stalewatch
    # and gunicorn, as an operator does when installing the unit.
    executable = Path(sys.executable).with_name("stalewatch")
    gunicorn = Path(sys.executable).with_name("gunicorn")
    assert executable.exists() and gunicorn.exists()
    text = (UNITS / name).read_text().replace("/opt/stalewatch/bin/stalewatch", str(executable))
    text = text.replace("/srv/webapp/venv/bin/gunicorn", str(gunicorn))
    (tmp_path / name).write_text(text)
    assert ANALYZE is not None
    done = subprocess.run(
        [ANALYZE, "verify", str(tmp_path / verify_as)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # Unknown keys and bad values are only warnings: any line about our unit fails.
    complaints = [line for line in done.stderr.splitlines() if name.split("@", maxsplit=1)[0] in line]
    assert complaints == []
